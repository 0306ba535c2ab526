"""`cuda-agent mcp --http HOST:PORT`: the run served at http://HOST:PORT/mcp over the MCP SDK's own
streamable-HTTP transport (its StreamableHTTPServerTransport and serve_loop, under uvicorn), for a
client on another machine or one that cannot start a process. The run and what a client sees are
the same as over stdio (server.py); what differs is how one client is told from another and when
it has gone, which stdio gets for free (one pipe, closed at the end):

- Only the handshake era is served (an initialize, then a session named by Mcp-Session-Id): the
  session is what tells the run's client apart and says when it left. A request of the 2026
  per-request era is answered -32022 naming the handshake versions, the cue for a client of both
  eras (the SDK's, in its default mode) to use the handshake.
- One session at a time. A new client takes the place of an open session that made no tool call
  (a client restarted before it started anything); once the run has started, a new client is
  refused (HTTP 409, one line saying why).
- The session that made the first tool call drives the run. When it ends (the client deletes it,
  or none of its requests has been in flight for SESSION_IDLE_S: the SDK transport's idle rule),
  the run ends as a stdio client's disconnect ends it, and serving stops once it is finalized.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import socket
import sys
import threading
from uuid import uuid4

import anyio
import anyio.from_thread
import anyio.lowlevel
import mcp_types as types
from mcp.server.runner import serve_loop
from mcp.server.streamable_http import MCP_SESSION_ID_HEADER, StreamableHTTPServerTransport
from mcp.server.transport_security import (
    DEFAULT_MAX_REQUEST_BODY_SIZE,
    RequestBodyLimitMiddleware,
    TransportSecurityMiddleware,
    TransportSecuritySettings,
)
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from cuda_agent.mcp_server.server import McpSession

PATH = "/mcp"
SESSION_IDLE_S = 30 * 60  # the SDK's own default: a client gone without a DELETE ends the run after this
GRACE_S = 2.0  # on stopping, how long an open stream (a client still attached) may take to close
BUSY = (
    "this server's run belongs to the client that started it (one run, one client): start another "
    "`cuda-agent mcp` for another run, or `cuda-agent mcp --resume RUN_DIR` once this one has stopped"
)


def parse_address(text: str) -> tuple[str, int]:
    """`PORT`, `HOST:PORT` or `[IPv6]:PORT` -> (host, port); a bare port listens on 127.0.0.1.
    ValueError with a one-line reason otherwise."""
    host, sep, port = text.strip().rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host or ":" in host and not _is_ip(host):
        raise ValueError("give PORT or HOST:PORT (an IPv6 address in brackets: [::1]:8000)")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"the port {port!r} is not a number from 0 to 65535 (0: any free port)")
    return host, int(port)


def is_loopback(host: str) -> bool:
    """Only this machine can reach it: a loopback address, or `localhost`."""
    return host == "localhost" or _is_ip(host) and ipaddress.ip_address(host).is_loopback


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def listen(host: str, port: int) -> socket.socket:
    """A listening socket, bound before the run folder is made (a port in use is a usage error, not
    a run that failed). OSError when it cannot be bound."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]  # an address's own; a name's first
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(16)
    except OSError:
        sock.close()
        raise
    return sock


def _security(host: str) -> TransportSecuritySettings | None:
    """DNS-rebinding protection on a loopback bind, as the SDK sets it up: a web page in a browser
    on this machine cannot reach the endpoint through a name of its own."""
    if not is_loopback(host):
        return None
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"],
        allowed_origins=["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"],
    )


def _error(status: int, code: int, message: str, data=None) -> Response:
    """A JSON-RPC error with no request id (the client matches it to its request), at an HTTP status."""
    error = types.ErrorData(code=code, message=message, **({"data": data} if data is not None else {}))
    body = types.JSONRPCError(jsonrpc="2.0", id=None, error=error)
    return Response(
        body.model_dump_json(by_alias=True, exclude_unset=True), status_code=status, media_type="application/json"
    )


class OneSession:
    """The ASGI app at /mcp: at most one session, its transport and server loop (module doc)."""

    def __init__(self, mcp: McpSession, security: TransportSecuritySettings | None, idle_s: float = SESSION_IDLE_S):
        self.mcp, self.security, self.idle_s = mcp, security, idle_s
        self.guard = TransportSecurityMiddleware(security)
        self.server = mcp.server()
        self.transport: StreamableHTTPServerTransport | None = None
        self.owner_gone = threading.Event()  # the session that drove the run has ended
        self._tg: anyio.abc.TaskGroup | None = None
        self._state = None
        self.token = None  # the serving event loop's, for `close` from another thread

    @contextlib.asynccontextmanager
    async def lifespan(self, _app):
        async with self.server.lifespan(self.server) as state, anyio.create_task_group() as tg:
            self._state, self._tg, self.token = state, tg, anyio.lowlevel.current_token()
            try:
                yield
            finally:
                tg.cancel_scope.cancel()

    async def __call__(self, scope, receive, send) -> None:
        # Host/Origin first: a rebinding web page must not even displace an idle session
        if (bad := await self.guard.validate_request(Request(scope), is_post=scope["method"] == "POST")) is not None:
            return await bad(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        version = headers.get("mcp-protocol-version")
        if version is not None and version not in HANDSHAKE_PROTOCOL_VERSIONS:
            data = {"supported": list(HANDSHAKE_PROTOCOL_VERSIONS), "requested": version}
            return await _error(
                400,
                types.UNSUPPORTED_PROTOCOL_VERSION,
                "cuda-agent mcp over HTTP speaks the initialize handshake",
                data,
            )(scope, receive, send)
        sid = headers.get(MCP_SESSION_ID_HEADER)
        current = self.transport if self.transport is not None and not self.transport.is_terminated else None
        if sid is not None:
            if current is None or sid != current.mcp_session_id:  # as the SDK answers: start a new session
                return await _error(404, types.INVALID_REQUEST, "Session not found")(scope, receive, send)
            return await current.handle_request(scope, receive, send)
        if scope["method"] != "POST":
            return await _error(
                400, types.INVALID_REQUEST, "no Mcp-Session-Id: a session starts with an initialize POST"
            )(scope, receive, send)
        if current is not None:
            if self.mcp.called:
                return await _error(409, types.INVALID_REQUEST, BUSY)(scope, receive, send)
            await current.terminate()  # it started nothing: the newer client takes its place
        self.transport = transport = StreamableHTTPServerTransport(
            mcp_session_id=uuid4().hex, security_settings=self.security, idle_timeout=self.idle_s
        )
        assert self._tg is not None, "the app's lifespan has not started"
        await self._tg.start(self._serve, transport)
        await transport.handle_request(scope, receive, send)

    async def close(self) -> None:
        """End the open session, its streams with it (a client's open GET stream would otherwise hold
        the server's shutdown for GRACE_S and end in a traceback)."""
        if self.transport is not None and not self.transport.is_terminated:
            await self.transport.terminate()

    async def _serve(self, transport: StreamableHTTPServerTransport, *, task_status=anyio.TASK_STATUS_IGNORED):
        try:
            async with transport.connect() as (read, write):
                task_status.started()
                with transport.idle_scope or anyio.CancelScope():  # cancelled once the session idles out
                    await serve_loop(
                        self.server, read, write, lifespan_state=self._state, session_id=transport.mcp_session_id
                    )
        except Exception as e:  # one session's fault: said, and that session is over
            print(f"cuda-agent mcp: the HTTP session failed: {type(e).__name__}: {e}", file=sys.stderr)
        finally:
            if not transport.is_terminated:
                with anyio.CancelScope(shield=True):
                    await transport.terminate()
            if self.mcp.called and transport.mcp_session_id == self.mcp.owner:
                self.owner_gone.set()
                self.mcp.bridge.disconnect()  # the run's client left: as a stdio client closing its end


class HttpServed:
    """The server in a thread of its own; `wait` until the run's client has gone, `stop` at once."""

    def __init__(self, mcp: McpSession, sock: socket.socket):
        import uvicorn

        host, port = sock.getsockname()[:2]
        self.app = OneSession(mcp, _security(host))
        starlette = Starlette(
            routes=[Route(PATH, endpoint=RequestBodyLimitMiddleware(self.app, DEFAULT_MAX_REQUEST_BODY_SIZE))],
            lifespan=self.app.lifespan,
        )
        self.server = uvicorn.Server(
            uvicorn.Config(starlette, log_level="warning", access_log=False, timeout_graceful_shutdown=GRACE_S)
        )
        self.url = f"http://{f'[{host}]' if ':' in host else host}:{port}{PATH}"

        def main() -> None:
            try:
                asyncio.run(self.server.serve(sockets=[sock]))
            finally:
                sock.close()
                mcp.bridge.disconnect()
                mcp.started.set()
                self.app.owner_gone.set()

        self.thread = threading.Thread(target=main, name="mcp-http", daemon=True)
        self.thread.start()

    def wait(self) -> None:
        self.app.owner_gone.wait()
        self.stop()

    def stop(self) -> None:
        if self.thread.is_alive() and self.app.token is not None:
            with contextlib.suppress(Exception):  # the loop may be ending already: then so is the session
                anyio.from_thread.run(self.app.close, token=self.app.token)
        self.server.should_exit = True
        self.thread.join(timeout=GRACE_S + 10)
