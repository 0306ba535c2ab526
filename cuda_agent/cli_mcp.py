"""`cuda-agent mcp TASK`: serve one task's run over the Model Context Protocol (stdio, or streamable
HTTP with --http), so an agent such as Claude Code or Codex CLI drives the same tools, judge, limits
and records as `optimize`'s model does (cuda_agent/mcp_server; docs/mcp.md; the `mcp` extra).

Over stdio, stdout is the protocol's; every line for a person goes to stderr (the client's server log).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Optional

import typer

from cuda_agent.cli_flags import JUDGE, SettingFlags, setting_flags
from cuda_agent.cli_settings import fail, keep_run_device, require_device, resolve_or_exit


# no model flags: the client is the model; its steps and wall time are limits, its spending is its own
@setting_flags("out", "eval.device", "limits.max_steps", "limits.max_wall_s", *JUDGE)
def mcp_command(
    task: Optional[str] = typer.Argument(
        None, help="The task: path/to/file.py or path/to/file.py::ClassName (not with --resume)."
    ),
    resume: Optional[Path] = typer.Option(
        None,
        "--resume",
        metavar="RUN_DIR",
        help=(
            "Continue a stopped run (one the client left, a limit stopped) in its workspace and trajectory. A "
            "finished run is left as it is: one line, and its exit code."
        ),
    ),
    inputs: Optional[Path] = typer.Option(
        None, "--inputs", help="File defining get_inputs()/get_init_inputs() when the task lacks them."
    ),
    flags: SettingFlags = SettingFlags(),  # --out, --device, --max-steps...: the settings named above
    http: Optional[str] = typer.Option(
        None,
        "--http",
        metavar="[HOST:]PORT",
        help=(
            "Serve over streamable HTTP at http://HOST:PORT/mcp instead of stdio, for a remote client (a bare PORT "
            "listens on 127.0.0.1; 0 picks a free port, named on stderr). One client: the one that makes the first "
            "tool call drives the run, a second is refused, and the run ends when its session does. No "
            "authentication: anything that reaches the port can edit files and run code in the run's jail, so a "
            "non-loopback HOST gets a warning."
        ),
    ),
) -> None:
    """The run starts with the client's first tool call and ends with `finish`, a limit, or the client
    disconnecting; it is then re-verified and reported as `optimize`'s is. Exit codes (when the client
    disconnects): as optimize's (0 improved, 1 correct, 3 none, 4 failed, 5 unscorable), 0 when no tool
    was ever called (nothing is left: no run folder, nor the --out folder if this made it), 2 bad usage
    (one line before anything is made: a bad --http, a port that cannot be bound, a tracked --out...)."""
    from cuda_agent import install_hint
    from cuda_agent.cli_runs import crashed, new_run_folder, open_or_exit
    from cuda_agent.run import RunSpec, finished_line, finished_run

    try:
        import mcp  # noqa: F401  (the SDK: only this command needs it)
    except ImportError:
        fail(f"the MCP server needs the official mcp SDK: {install_hint('mcp')}")
    if (task is None) == (resume is None):
        fail("give a TASK to start a run, or --resume RUN_DIR to continue one, not both")
    if resume is not None and (inputs is not None or "tools.allow_shell" in flags or "eval.baselines" in flags):
        fail("--inputs, --allow-shell and --no-compile-baseline come from the run being resumed; leave them out")
    listening = _listen_or_exit(http) if http is not None else None  # before any run folder is made
    if resume is not None and (saved := finished_run(resume)) is not None:
        typer.echo(finished_line(saved), err=True)
        raise typer.Exit(saved.exit_code)
    resolved = resolve_or_exit(flags.layer())
    settings = resolved.settings
    keep_run_device(resolved, resume)
    require_device(settings.eval.device)
    made = _missing(settings.out) if resume is None else []  # what a run that never starts must not leave
    spec = RunSpec(
        task=task,
        inputs=inputs,
        resume=resume,  # the run folder is made as optimize makes it
        workspace=None if resume is not None else new_run_folder(settings.out, task, inputs),
    )
    opened = open_or_exit(spec, settings)
    from cuda_agent.mcp_server.session import serve_task

    try:
        done = serve_task(spec, settings, opened, settings_record=resolved.record(), http=listening)
    except Exception as e:  # a fault no part of the run made a verdict of: one line, the traceback in error.log
        crashed(e, opened[0].workspace.run_folder.path)
    if done is None:  # no tool was called: the run folder is gone (serve_task), and --out if this made it
        for folder in made:
            with contextlib.suppress(OSError):  # not empty: something else writes there now
                folder.rmdir()
    raise typer.Exit(done.exit_code if done is not None else 0)


def _missing(folder: Path) -> list[Path]:
    """`folder` and those of its parents that do not exist yet, deepest first."""
    folder = folder.absolute()
    return [f for f in (folder, *folder.parents) if not f.exists()]


def _listen_or_exit(value: str):
    """The --http socket, listening; a bad value or a port that cannot be bound is one line, exit 2."""
    from cuda_agent.mcp_server.http import is_loopback, listen, parse_address

    try:
        host, port = parse_address(value)
    except ValueError as e:
        fail(f"--http {value!r}: {e}")
    try:
        sock = listen(host, port)
    except OSError as e:
        fail(f"--http {value!r}: cannot listen on {host} port {port}: {e.strerror or e}")
    if not is_loopback(host):
        typer.echo(
            f"warning: --http {value} listens beyond this machine, with no authentication: whoever reaches "
            "it can edit files and run code in the run's jail (prefer 127.0.0.1 and an SSH tunnel)",
            err=True,
        )
    return sock
