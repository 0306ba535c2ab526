"""Start the agent as its own process, steered through the run folder's control channel, and
attach the app to it. The agent gets its own session (setsid), so closing the app can leave it
running (detach) and `cuda-agent tui RUN_DIR` can attach again later."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from cuda_agent.control import Launch, write_launch

START_TIMEOUT_S = 600.0  # the agent's start: importing torch, making the workspace, the reference


class AgentProcess:
    """A handle on an agent process started by the app (None of this exists when attaching)."""

    def __init__(self, proc: subprocess.Popen, log: Path):
        self.proc, self.log = proc, log

    def running(self) -> bool:
        return self.proc.poll() is None

    def wait(self, timeout: float | None = None) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None


def start_agent(args: list[str], log: Path, *, approve: bool = False) -> tuple[AgentProcess, Path]:
    """Run `cuda-agent <args> --control` in the background; return it and its run folder once the
    folder exists. Raises RuntimeError with the agent's own last words when it fails to start."""
    fd, name = tempfile.mkstemp(prefix="cuda-agent-run-", suffix=".txt")  # empty until the agent writes it
    os.close(fd)
    announce = Path(name)
    argv = [sys.executable, "-m", "cuda_agent.cli", *args, "--control", "--announce", str(announce), "--quiet",
            *(["--confirm"] if approve else [])]
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    handle = AgentProcess(proc, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            text = announce.read_text().strip()
            if text:
                return handle, Path(text)
            if not handle.running():
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                raise RuntimeError("the agent did not start: " + (" | ".join(tail) or f"exit code {proc.returncode}"))
            time.sleep(0.1)
        proc.terminate()
        raise RuntimeError(f"the agent did not make its run folder within {START_TIMEOUT_S:.0f} s; see {log}")
    finally:
        announce.unlink(missing_ok=True)


def launch_with_tui(child_args: list[str], runs_dir: Path, *, approve: bool, model: str | None,
                    api_base: str | None, script: Path | None, limit_flags: list[str]) -> int:
    """`optimize --tui`: the agent in its own process, the app in this one. Returns the exit code."""
    from rich.console import Console

    from cuda_agent.tui.app import RunApp

    log = Path(runs_dir) / f".agent-{time.strftime('%Y%m%d-%H%M%S')}.log"
    console = Console(stderr=True)
    console.print("starting the agent...", highlight=False)
    try:
        agent, run_dir = start_agent(child_args, log, approve=approve)
    except RuntimeError as e:
        console.print(f"[red]error[/]: {e}", highlight=False)
        return 4
    write_launch(run_dir, Launch(model=model, api_base=api_base, script=str(Path(script).resolve()) if script else None,
                                 options=limit_flags))
    if log.exists():  # the agent keeps writing to it: a rename follows the open file
        log.rename(run_dir / "agent.log")
    RunApp(run_dir, agent=agent).run()
    if agent.running():
        console.print(f"the agent goes on in the background; attach again with: cuda-agent tui {run_dir}",
                      highlight=False)
    else:
        console.print(f"run folder: {run_dir}", highlight=False)
    return 0
