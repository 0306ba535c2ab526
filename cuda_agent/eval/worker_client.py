"""The parent's handle on one worker process: start, ask, wait with a deadline, kill.

A worker is started ahead of need (torch imported, CUDA context up) so an evaluation does not
pay the seconds of start-up; each candidate still gets its own, discarded afterwards.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
import time
from pathlib import Path


class WorkerError(RuntimeError):
    """The worker died, hung or could not start; `kind` is 'timeout', 'crash' or 'start'."""

    def __init__(self, kind: str, message: str):
        super().__init__(message)
        self.kind = kind


class Worker:
    def __init__(self, device: str, start_timeout: float = 120.0, isolate: bool = True):
        import torch.multiprocessing as mp

        from cuda_agent.eval import worker as worker_mod

        self.device = device
        self.scratch = Path(tempfile.mkdtemp(prefix="cuda-agent-worker-"))
        self.log_path = self.scratch / "worker.log"
        ctx = mp.get_context("spawn")
        self._requests = ctx.Queue()
        self._reply_r, reply_w = ctx.Pipe(duplex=False)
        self.proc = ctx.Process(
            target=worker_mod.main,
            args=(device, str(self.scratch), self._requests, reply_w, str(self.log_path), isolate),
            daemon=True,
        )
        self.started_at = time.perf_counter()
        self.proc.start()
        reply_w.close()
        self._start_timeout = start_timeout
        self._ready = False

    def wait_ready(self) -> None:
        if self._ready:
            return
        msg = self._receive(self._start_timeout, "starting")
        if not msg.get("ok"):
            raise WorkerError("start", msg.get("error", "worker failed to start"))
        self._ready = True

    def request(self, msg: dict, timeout: float) -> dict:
        """Send one request and wait for its JSON answer (never unpickled)."""
        self.wait_ready()
        self._requests.put(msg)
        return self._receive(timeout, msg.get("op", "?"))

    def _receive(self, timeout: float, what: str) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerError("timeout", f"the worker exceeded its {timeout:.0f} s limit while {what}")
            if self._reply_r.poll(min(left, 0.5)):
                try:
                    data = self._reply_r.recv_bytes()
                except (EOFError, OSError):
                    break
                return json.loads(data)
            if not self.proc.is_alive():
                break
        code = self.proc.exitcode
        self.kill()
        raise WorkerError("crash", f"the worker died while {what} (exit code {code}){self._log_tail()}")

    def _log_tail(self, n: int = 1500) -> str:
        try:
            text = self.log_path.read_text(errors="replace")[-n:].strip()
        except OSError:
            return ""
        return f"; its output ended with:\n{text}" if text else ""

    def log_tail(self) -> str:
        return self._log_tail()

    def kill(self) -> None:
        """Kill the worker's whole process group; remove its scratch folder."""
        if self.proc.pid and self.proc.is_alive():
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                self.proc.kill()
            self.proc.join(5)
        shutil.rmtree(self.scratch, ignore_errors=True)

    def close(self) -> None:
        if self.proc.is_alive():
            try:
                self._requests.put({"op": "exit"})
                self.proc.join(2)
            except Exception:
                pass
        self.kill()
