"""One MCP session from start to end: what the client is offered, the server in its thread (stdio, or
streamable HTTP: http.py), and the run on the main thread once the first tools/call has come
(run.run_task, with the client's bridge as the model and a trajectory writer that shows the bridge
each record). After the run is finalized the server keeps answering (a later tools/call is told the
run has ended) until the client disconnects.
"""

from __future__ import annotations

import shutil
import socket
import sys
from typing import Callable

from cuda_agent.agent.prompts import env_task_message, skill_text, system_message
from cuda_agent.mcp_server.bridge import BridgeWriter, ClientBridge
from cuda_agent.mcp_server.server import McpSession, Offer, StdioServed
from cuda_agent.run import RunHooks, RunOutcome, RunSpec, run_task
from cuda_agent.run_folder import RunFolder
from cuda_agent.settings import Settings


def make_offer(env, settings: Settings) -> Offer:
    """What a client is shown: the environment's own tool schemas (a resumed run's tools are its own),
    the task and system messages the loop would give a model, SKILL.md."""
    prompt = env_task_message(env, limits=settings.limits.model_dump())  # what the loop gives its model
    return Offer(
        task_name=env.workspace.record.task.name,
        tools=env.tool_schemas(),
        prompt=prompt,
        system=system_message(native_tools=True),
        skill=skill_text(),
    )


def ending_lines(done: RunOutcome) -> list[str]:
    """How the run ended, as the call that ended it (finish, mostly) reports it to the client."""
    v = done.verified
    lines = [f"the run ended: {done.stop_reason} after {done.steps} steps; run folder: {done.run_dir}"]
    if v and done.best:
        speedups = [
            f"{x:.2f}x vs {name}"
            for x, name in ((v.speedup_vs_compile, "torch.compile"), (v.speedup_vs_eager, "eager"))
            if x is not None
        ]
        lines.append(
            ", ".join(
                [
                    f"best: version {done.best.version}, re-verified, reward {v.reward}",
                    f"{v.timing.median_ms if v.timing else 0:.4f} ms",
                    *speedups,
                ]
            )
        )
    else:
        lines.append("no correct version passed re-verification")
    if done.report:
        lines.append(f"report: {done.report}")
    if done.dropin:
        lines.append(f"drop-in: {done.dropin} (see its README.md)")
    if done.error:
        lines.append(f"error: {done.error}")
    return lines


def serve_task(
    spec: RunSpec,
    settings: Settings,
    opened,
    *,
    settings_record: dict | None = None,
    http: socket.socket | None = None,
    say: Callable[[str], None] = lambda line: print(line, file=sys.stderr),
) -> RunOutcome | None:
    """Serve the run `opened` (run.open_run's result for `spec`) until the client disconnects; the
    loop starts with the first tools/call. Over stdio, or over streamable HTTP on the listening
    socket `http`. None when no call ever came: nothing ran, and the run folder of a new run is
    removed again (a client that connects at every start leaves no trace)."""
    env = opened[0]
    run = env.workspace.run_folder
    bridge = ClientBridge()
    session = McpSession(make_offer(env, settings), bridge)
    if http is not None:
        from cuda_agent.mcp_server.http import HttpServed

        served = HttpServed(session, http)
        say(f"serving over MCP streamable HTTP at {served.url} (one client; Ctrl-C stops)")
    else:
        served = StdioServed(session)
    try:
        session.started.wait()
    except KeyboardInterrupt:  # over HTTP, Ctrl-C is how a server no client started a run on is stopped
        bridge.close(["the server was stopped before the run started"], failed=True)
        served.stop()
        return _nothing_ran(spec, env, run)
    if not session.called:
        served.wait()
        return _nothing_ran(spec, env, run)
    say(f"run folder: {run.path} (driven by {bridge.name})")
    try:
        done = run_task(
            spec,
            settings,
            RunHooks(model=bridge, writer=lambda path, _: BridgeWriter(path, bridge)),
            opened=opened,
            settings_record=settings_record,
        )
    except BaseException as e:  # the client hears it; the command says it and keeps the traceback
        bridge.close([f"the run failed: {type(e).__name__}: {e}"], failed=True)
        served.stop()
        raise
    bridge.close(ending_lines(done), summary=done.summary(), failed=done.error is not None)
    say("; ".join(ending_lines(done)))
    try:
        if http is not None and done.stop_reason == "interrupted":
            served.stop()  # a person stopped it here: no waiting for the client to leave
        else:
            served.wait()
    except KeyboardInterrupt:
        served.stop()
    return done


def _nothing_ran(spec: RunSpec, env, run: RunFolder) -> None:
    env.close()
    if spec.resume is None and not run.trajectory.exists():
        shutil.rmtree(run.path, ignore_errors=True)
