"""`cuda-agent mcp`: one task's run served over the Model Context Protocol (stdio here; streamable HTTP
in http.py), with the official `mcp` SDK's low-level server. The run is cuda_agent/run.py's, as in
`optimize`; the model is the client, through the bridge (bridge.py). The server runs in its own
thread; the run stays on the main thread, where `optimize` runs it (signals, ^C, the task code's
deadline).

What a client sees: the tools the built-in loop gives its model (names, descriptions, JSON schemas),
SKILL.md as a resource, the task message as a prompt, and a short `instructions` text. The run and
its run folder start with the first tools/call (the handshake has named the client by then), so a
client that only connects and lists leaves nothing behind. `finish` (or any call that ends the run:
a limit, an unscorable task) returns once the run is finalized: the re-verified result, report.md
and the drop-in. A client that disconnects ends the run (stop reason client_disconnected), which is
then finalized as well. Every call sends progress notifications while it runs (progress.py).

Over stdio, the process's own stdin and stdout are the wire and nothing else: fd 1 is pointed at
stderr and fd 0 at /dev/null for the whole process before anything runs, so what the run and its
workers print can never tear a JSON-RPC frame, before or after the client is gone.
"""

from __future__ import annotations

import io
import json
import os
import threading
from dataclasses import dataclass
from itertools import count

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

from cuda_agent.agent.protocol import ToolCall
from cuda_agent.mcp_server.bridge import Answer, ClientBridge
from cuda_agent.mcp_server.progress import with_progress
from cuda_agent.records import EXTERNAL_MODEL_PREFIX

SKILL_URI = "cuda-agent://skill/SKILL.md"
PROMPT, SYSTEM = "task", "system"


@dataclass
class Offer:
    """What the server shows before the run starts: the task's name, the tools (OpenAI function
    schemas, as the loop gives its model), the task and system messages and SKILL.md."""

    task_name: str
    tools: list[dict]
    prompt: str
    system: str
    skill: str


def client_name(info) -> str:
    """`mcp:<client name>/<version>`, from the handshake's clientInfo (an Implementation or None)."""
    name = getattr(info, "name", None) or "unknown"
    version = getattr(info, "version", None)
    return f"{EXTERNAL_MODEL_PREFIX}{name}/{version}" if version else f"{EXTERNAL_MODEL_PREFIX}{name}"


def http_session_id(ctx) -> str | None:
    """The Mcp-Session-Id of the HTTP request a call came in (None on stdio: no HTTP request)."""
    headers = getattr(getattr(ctx, "request", None), "headers", None)
    return headers.get("mcp-session-id") if headers is not None else None


def instructions(offer: Offer) -> str:
    return (
        f"cuda-agent: write a CUDA kernel for the task {offer.task_name!r} that is verified correct and "
        f"faster than torch.compile. Read the prompt {PROMPT!r} (the task), the prompt {SYSTEM!r} (the role, "
        "the reward and the rules the judge enforces) and the resource SKILL.md (the workspace's "
        "conventions); then edit files, compile, verify, benchmark and profile with these "
        "tools, and call finish when done. Every call is judged and recorded; the best verified version "
        "is re-verified at the end."
    )


def call_result(answer: Answer) -> types.CallToolResult:
    content = [types.TextContent(type="text", text=t) for t in answer.texts() or ["(no result)"]]
    return types.CallToolResult(content=content, is_error=answer.is_error, structured_content=answer.summary)


class McpSession:
    """The server's state: the bridge to the loop, whether the first call came, and the name the
    client gave. `started` is set by the first tools/call or by the end of serving, whichever is first."""

    def __init__(self, offer: Offer, bridge: ClientBridge):
        self.offer, self.bridge = offer, bridge
        self.started = threading.Event()
        self.called = False  # a tools/call came: the main thread runs the task
        self.owner: str | None = None  # over HTTP: the session that made the first call (None on stdio)
        self._lock: anyio.Lock | None = None
        self._ids = count(1)

    def server(self) -> Server:
        return Server(
            "cuda-agent",
            version=_version(),
            instructions=instructions(self.offer),
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
            on_list_resources=self._list_resources,
            on_read_resource=self._read_resource,
            on_list_prompts=self._list_prompts,
            on_get_prompt=self._get_prompt,
        )

    async def _list_tools(self, ctx, params) -> types.ListToolsResult:
        return types.ListToolsResult(
            tools=[
                types.Tool(
                    name=f["name"],
                    description=f.get("description", ""),
                    input_schema=f.get("parameters") or {"type": "object"},
                )
                for f in (s["function"] for s in self.offer.tools)
            ]
        )

    async def _call_tool(self, ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        async def report(progress: float, message: str) -> None:  # a no-op unless the call carried a progressToken
            await ctx.session.report_progress(progress, None, message)

        return await with_progress(lambda: self._run_call(ctx, params), report, params.name)

    async def _run_call(self, ctx, params: types.CallToolRequestParams) -> types.CallToolResult:
        if self._lock is None:
            self._lock = anyio.Lock()
        async with self._lock:  # one call at a time, in the order they came: the loop runs them in turn
            session_id = http_session_id(ctx)
            if not self.called:
                client = ctx.session.client_params.client_info if ctx.session.client_params else None
                self.bridge.name = client_name(client)
                self.owner = session_id
                self.called = True
                self.started.set()
            elif session_id != self.owner:  # over HTTP only one session ever drives the run (http.py)
                raise MCPError(
                    types.INVALID_REQUEST,
                    "this run is driven by another client's session; start another `cuda-agent mcp` for another run",
                )
            call = ToolCall(
                id=f"mcp-{next(self._ids)}",
                name=params.name,
                arguments=json.dumps(params.arguments or {}, ensure_ascii=False),
            )
            future = self.bridge.submit(call)
            return call_result(await anyio.to_thread.run_sync(future.result, abandon_on_cancel=True))

    async def _list_resources(self, ctx, params) -> types.ListResourcesResult:
        return types.ListResourcesResult(
            resources=[
                types.Resource(
                    name="SKILL.md",
                    uri=SKILL_URI,
                    mime_type="text/markdown",
                    description="The conventions the kernel follows in the workspace: layout, launchers, the "
                    "tools' workflow and what the judge rejects.",
                )
            ]
        )

    async def _read_resource(self, ctx, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        if str(params.uri) != SKILL_URI:
            raise MCPError(types.INVALID_PARAMS, f"no resource {params.uri}; the one resource is {SKILL_URI}")
        return types.ReadResourceResult(
            contents=[types.TextResourceContents(uri=SKILL_URI, mime_type="text/markdown", text=self.offer.skill)]
        )

    def _prompts(self) -> dict[str, tuple[str, str]]:
        return {
            PROMPT: (f"The task {self.offer.task_name!r}: its source, inputs, goal and limits.", self.offer.prompt),
            SYSTEM: (
                "The system message the built-in agent loop gives its model: the role, the reward, "
                "how the tools are used and the rules the judge enforces.",
                self.offer.system,
            ),
        }

    async def _list_prompts(self, ctx, params) -> types.ListPromptsResult:
        return types.ListPromptsResult(
            prompts=[types.Prompt(name=name, description=about) for name, (about, _) in self._prompts().items()]
        )

    async def _get_prompt(self, ctx, params: types.GetPromptRequestParams) -> types.GetPromptResult:
        prompts = self._prompts()
        if params.name not in prompts:
            raise MCPError(types.INVALID_PARAMS, f"no prompt {params.name!r}; the prompts are {', '.join(prompts)}")
        about, text = prompts[params.name]
        return types.GetPromptResult(
            description=about,
            messages=[types.PromptMessage(role="user", content=types.TextContent(type="text", text=text))],
        )


class StdioServed:
    """The session served over the process's stdio in a thread of its own. fd 0 and 1 are taken
    over first (see the module's docstring). When the client is gone: the bridge is told, and
    `session.started` is set (a session with no call has nothing to run). `wait` until the client
    closes its end; `stop` leaves it to the process's exit (a thread blocked reading stdin cannot be
    stopped from outside)."""

    def __init__(self, session: McpSession):
        wire_in, wire_out = os.dup(0), os.dup(1)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.close(null)
        os.dup2(2, 1)
        stdin = io.TextIOWrapper(os.fdopen(wire_in, "rb"), encoding="utf-8", errors="replace")
        stdout = io.TextIOWrapper(os.fdopen(wire_out, "wb"), encoding="utf-8", write_through=True)

        async def serve() -> None:
            server = session.server()
            async with stdio_server(anyio.wrap_file(stdin), anyio.wrap_file(stdout)) as (read, write):
                await server.run(read, write, server.create_initialization_options())

        def main() -> None:
            try:
                anyio.run(serve)
            finally:
                session.bridge.disconnect()
                session.started.set()

        self.thread = threading.Thread(target=main, name="mcp-server", daemon=True)
        self.thread.start()

    def wait(self) -> None:
        self.thread.join()

    def stop(self) -> None:
        pass


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("cuda-agent")
    except PackageNotFoundError:
        return "0"
