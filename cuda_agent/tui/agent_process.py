"""Start the agent as its own process, steered through the run folder's control channel. The
agent gets its own session (setsid), so closing the app can leave it running (detach) and
`cuda-agent tui RUN_DIR` can attach again later."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

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
