"""Start the agent as its own process, steered through the run folder's control channel. The
agent gets its own session (setsid), so closing the app can leave it running (detach) and
`cuda-agent tui RUN_DIR` can attach again later."""

from __future__ import annotations

import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from cuda_agent.run import RunRequest

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


def start_agent(request: RunRequest, log: Path) -> tuple[AgentProcess, Path]:
    """Run `python -m cuda_agent.run REQUEST.json` in the background, steered through the run folder; return it and
    its run folder once that exists. RuntimeError with the agent's own last words when it fails to start."""
    with tempfile.NamedTemporaryFile(prefix="cuda-agent-run-", suffix=".txt", delete=False) as f:
        announce = Path(f.name)  # empty until the agent writes it
    with tempfile.NamedTemporaryFile("w", prefix="cuda-agent-request-", suffix=".json", delete=False) as req:
        req.write(request.model_copy(update={"control": True, "announce": announce}).model_dump_json())
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "cuda_agent.run", req.name],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    handle = AgentProcess(proc, log)
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while time.monotonic() < deadline:
            if text := announce.read_text().strip():
                return handle, Path(text)
            if not handle.running():
                tail = log.read_text(errors="replace").strip().splitlines()[-3:]
                raise RuntimeError("the agent did not start: " + (" | ".join(tail) or f"exit code {proc.returncode}"))
            time.sleep(0.1)
        proc.terminate()
        raise RuntimeError(f"the agent did not make its run folder within {START_TIMEOUT_S:.0f} s; see {log}")
    finally:
        announce.unlink(missing_ok=True)
        Path(req.name).unlink(missing_ok=True)  # read by then, or the agent is gone
