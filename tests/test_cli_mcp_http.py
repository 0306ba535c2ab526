"""`cuda-agent mcp --http`: the same run served over the SDK's streamable-HTTP transport, driven by
the SDK's own HTTP client on loopback (a free port the server picks and names on stderr). One
client: before the run starts a newer client takes an idle session's place, once it has started a
second client is refused with a one-line reason; the run ends with `finish` or with its client's
session, and the server then exits with optimize's codes. Bad --http values are one-line errors."""

import builtins
import json
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest
from typer.testing import CliRunner

mcp = pytest.importorskip("mcp")
import mcp_types as types  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from cuda_agent.mcp_server.http import BUSY, is_loopback, parse_address  # noqa: E402
from cuda_agent.records import Closing, Header, ToolResultRecord  # noqa: E402
from cuda_agent.trajectory import read_trajectory  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASK = Path(__file__).parent / "harness" / "cpu_task"
CLIENT = types.Implementation(name="test-client", version="9.1")


class Served:
    """`cuda-agent mcp TASK --http 127.0.0.1:0` in a process of its own; `url` from its stderr."""

    def __init__(self, tmp_path: Path, *extra: str):
        self.out, self.log = tmp_path / "runs", tmp_path / "server.log"
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "cuda_agent.cli",
                "mcp",
                str(TASK / "model.py"),
                "--out",
                str(self.out),
                "--device",
                "cpu",
                "--no-compile-baseline",
                "--http",
                "127.0.0.1:0",
                *extra,
            ],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=open(self.log, "w"),
        )
        deadline = time.monotonic() + 120
        while not (found := re.search(r"http://127\.0\.0\.1:\d+/mcp", self.stderr())):
            assert self.proc.poll() is None and time.monotonic() < deadline, self.stderr()
            time.sleep(0.2)
        self.url = found.group(0)

    def stderr(self) -> str:
        return self.log.read_text()

    def wait(self, timeout: float = 120) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            raise AssertionError(f"the server did not exit:\n{self.stderr()}") from None


@pytest.fixture
def served(tmp_path):
    made = []
    yield lambda *extra: made.append(Served(tmp_path, *extra)) or made[-1]
    for s in made:
        if s.proc.poll() is None:
            s.proc.kill()
            s.proc.wait()


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content)


def innermost(e: BaseException) -> BaseException:
    groups = getattr(builtins, "BaseExceptionGroup", ())  # Python 3.11 on; anyio's own on 3.10
    while isinstance(e, groups) or type(e).__name__ in ("BaseExceptionGroup", "ExceptionGroup"):
        e = e.exceptions[0]
    return e


async def refused(url: str, **kw) -> MCPError:
    try:
        async with Client(url, client_info=types.Implementation(name="other", version="1"), **kw) as c:
            await c.list_tools()
    except BaseException as e:  # the SDK's client raises it from its task group
        assert isinstance(innermost(e), MCPError), repr(e)
        return innermost(e)
    raise AssertionError("a second client was let in")


def test_a_client_drives_a_run_over_http_and_a_second_one_is_refused(served):
    server = served()
    seen: dict = {"progress": []}

    async def progress(p, total, message):
        seen["progress"].append(message)

    async def session():
        # a client of the 2026 per-request era only: told this server speaks the handshake
        seen["modern"] = await refused(server.url, mode="2026-07-28")
        async with Client(server.url, client_info=types.Implementation(name="early", version="0")) as early:
            await early.list_tools()  # connected, never calls a tool
            async with Client(server.url, client_info=CLIENT, read_timeout_seconds=300) as c:
                seen["tools"] = {t.name for t in (await c.list_tools()).tools}  # it took the idle session's place
                with pytest.raises(MCPError, match="Session not found"):  # its session was closed
                    await early.list_tools()
                seen["list"] = await c.call_tool("list_files", {})
                seen["view"] = await c.call_tool("view_file", {"path": "model.py"}, progress_callback=progress)
                seen["second"] = await refused(server.url)  # the run has started: one run, one client
                seen["finish"] = await c.call_tool("finish", {"summary": "looked only"})

    anyio.run(session)
    assert seen["modern"].code == types.UNSUPPORTED_PROTOCOL_VERSION
    assert "2025-11-25" in seen["modern"].error.data["supported"]
    assert {"edit_file", "verify", "finish"} <= seen["tools"]
    assert not seen["list"].is_error and "model.py" in text(seen["list"])
    assert "class Model" in text(seen["view"]) and seen["progress"][0] == "view_file: started"
    assert seen["second"].error.message == BUSY and "\n" not in BUSY
    assert "the run ended: finished after 3 steps" in text(seen["finish"]), text(seen["finish"])

    assert server.wait() == 3, server.stderr()  # the client left: no correct version, optimize's code 3
    (run_dir,) = list(server.out.iterdir())
    records = read_trajectory(run_dir / "trajectory.jsonl")
    assert isinstance(records[0], Header) and records[0].model == "mcp:test-client/9.1"
    assert [r.name for r in records if isinstance(r, ToolResultRecord)] == ["list_files", "view_file", "finish"]
    assert isinstance(records[-1], Closing) and records[-1].stop_reason == "finished"
    assert "serving over MCP streamable HTTP at http://127.0.0.1:" in server.stderr()


def test_the_run_ends_when_its_clients_session_does(served):
    server = served("--max-steps", "5")

    async def one_call():
        async with Client(server.url, client_info=CLIENT, read_timeout_seconds=120) as c:
            assert not (await c.call_tool("list_files", {})).is_error
        # leaving the block deletes the session: the client has gone

    anyio.run(one_call)
    assert server.wait() == 3, server.stderr()
    (run_dir,) = list(server.out.iterdir())
    assert read_trajectory(run_dir / "trajectory.jsonl")[-1].stop_reason == "client_disconnected"
    assert json.loads((run_dir / "outcome.json").read_text())["stop_reason"] == "client_disconnected"


def rebinding_post(url: str) -> int:
    """An initialize as a web page reached through a name of its own would send it: the HTTP status."""
    body = json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "page", "version": "1"},
            },
        }
    )
    request = urllib.request.Request(
        url,
        data=body.encode(),
        method="POST",
        headers={
            "Host": "evil.example:80",
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        },
    )
    try:
        return urllib.request.urlopen(request, timeout=30).status
    except urllib.error.HTTPError as e:
        return e.code


def test_ctrl_c_stops_a_server_no_client_used_and_leaves_nothing(served):
    server = served()

    async def look():
        async with Client(server.url, client_info=CLIENT) as c:
            await c.list_tools()
            # on loopback a foreign Host is refused (DNS rebinding), and displaces no session
            assert await anyio.to_thread.run_sync(rebinding_post, server.url) == 421
            await c.list_tools()

    anyio.run(look)
    assert server.proc.poll() is None  # a client that only looked: still serving, for the next one
    server.proc.send_signal(signal.SIGINT)
    assert server.wait() == 0, server.stderr()
    assert not server.out.exists() or not any(server.out.iterdir())


def test_ctrl_c_during_a_run_stops_it_as_in_optimize_and_the_server_with_it(served):
    server = served()

    async def call_then_interrupt():
        async with Client(server.url, client_info=CLIENT, read_timeout_seconds=120) as c:
            assert not (await c.call_tool("list_files", {})).is_error
            server.proc.send_signal(signal.SIGINT)  # the client still attached, its GET stream open
            with anyio.fail_after(60):
                while server.proc.poll() is None:
                    await anyio.sleep(0.2)

    anyio.run(call_then_interrupt)
    assert server.wait() == 3, server.stderr()
    assert "Traceback" not in server.stderr(), server.stderr()  # the open stream was closed, not cut off
    (run_dir,) = list(server.out.iterdir())
    assert json.loads((run_dir / "outcome.json").read_text())["stop_reason"] == "interrupted"


@pytest.mark.parametrize(
    "value, words",
    [
        ("nope", "not a number"),
        ("localhost:", "not a number"),
        ("127.0.0.1:70000", "0 to 65535"),
        ("a:b:8000", "HOST:PORT"),
        (":8000", "HOST:PORT"),
        ("", "not a number"),
    ],
)
def test_a_bad_http_value_is_one_line(tmp_path, value, words):
    from cuda_agent.cli import app

    r = CliRunner().invoke(app, ["mcp", str(TASK / "model.py"), "--out", str(tmp_path / "runs"), "--http", value])
    assert r.exit_code == 2 and r.stdout == "", r.output
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"error: --http {value!r}: ") and words in line, line
    assert not (tmp_path / "runs").exists()


def test_a_port_in_use_is_one_line_and_makes_no_run_folder(tmp_path):
    from cuda_agent.cli import app

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = CliRunner().invoke(
            app, ["mcp", str(TASK / "model.py"), "--out", str(tmp_path / "runs"), "--http", str(port)]
        )  # a bare port: 127.0.0.1
    assert r.exit_code == 2, r.output
    (line,) = r.stderr.strip().splitlines()
    assert f"cannot listen on 127.0.0.1 port {port}" in line, line
    assert not (tmp_path / "runs").exists()


def test_addresses_and_which_are_loopback(tmp_path):
    assert parse_address("8000") == ("127.0.0.1", 8000)
    assert parse_address("0.0.0.0:0") == ("0.0.0.0", 0)
    assert parse_address("[::1]:9") == ("::1", 9) and parse_address("localhost:80") == ("localhost", 80)
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "192.168.1.5", "gpu-box.example.com"))
    # a bind beyond loopback says so before anything else (here the task is missing: nothing is served)
    from cuda_agent.cli import app

    r = CliRunner().invoke(
        app, ["mcp", str(tmp_path / "missing.py"), "--out", str(tmp_path / "runs"), "--http", "0.0.0.0:0"]
    )
    assert r.exit_code == 2
    first = r.stderr.splitlines()[0]
    assert first.startswith("warning: --http 0.0.0.0:0 listens beyond this machine") and "jail" in first, r.stderr
