"""The scheduler on a Ray cluster (`--ray`): each task is a Ray actor that starts the same task
process the local runner starts (batch/proc.py, `python -m cuda_agent.batch.child`) on the node
Ray picks, with the task's share of a GPU (pool/raypool.py). Everything goes through the shared
run folder: the job file in, the row (result.json), trajectory and log out, so the results, the
resume and the failure rows are the local batch's.

An actor rather than a plain Ray task so that the batch can reach a running task: Ctrl-C asks each
actor to SIGINT its task's process (which writes its `interrupted` row, as locally), and kills it
after `grace_s`. The timeout is enforced on the node, from when the task really started (tasks may
queue in Ray for a GPU). A node or worker that dies makes the task `crashed`; Ray never retries a
task by itself (a second agent run would pay the model twice): `--retry-failed` does.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass

from cuda_agent.batch.job import TaskJob
from cuda_agent.batch.proc import start_child
from cuda_agent.batch.rows import TaskRow
from cuda_agent.batch.runner import Runner, read_result
from cuda_agent.jail import kill_group
from cuda_agent.pool.ray_cluster import import_ray

POLL_S = 0.2
CONTROL_TIMEOUT_S = 30.0  # for the small calls that stop a task's process


class TaskHost:
    """Runs one task's process on a Ray node (the class is made a Ray actor by RayRunner)."""

    def __init__(self):
        self.proc: subprocess.Popen | None = None
        self.stopping = False

    def run(self, job_json: str, timeout: float | None) -> dict:
        """Start the task's process and wait for it; {"outcome": None (it exited: read its row) |
        "hung" | "not_started", "wall_s": ...}."""
        job = TaskJob.model_validate_json(job_json)
        if self.stopping:
            return {"outcome": "not_started", "wall_s": 0.0}
        started = time.monotonic()
        job.log_path.parent.mkdir(parents=True, exist_ok=True)
        gpus = os.environ.get("CUDA_VISIBLE_DEVICES")  # set by Ray for the task's share of a GPU
        with open(job.log_path, "a") as f:  # where and when it ran: the log is on the shared run folder
            f.write(
                f"[cuda-agent batch --ray] started {time.time():.3f} on {socket.gethostname()}, device "
                f"{job.device}" + (f", CUDA_VISIBLE_DEVICES={gpus}" if gpus is not None else "") + "\n"
            )
        self.proc, log = start_child(job)
        try:
            self.proc.wait(timeout=timeout)
            outcome = None
        except subprocess.TimeoutExpired:
            kill_group(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
            outcome = "hung"
        finally:
            log.close()
        with open(job.log_path, "a") as f:
            f.write(f"[cuda-agent batch --ray] ended {time.time():.3f}\n")
        return {"outcome": outcome, "wall_s": round(time.monotonic() - started, 1)}

    def interrupt(self, force: bool = False) -> None:
        """SIGINT the task's process (it closes its run and writes its row); SIGKILL with `force`."""
        self.stopping = True
        if self.proc is not None and self.proc.poll() is None:
            kill_group(self.proc.pid, signal.SIGKILL if force else signal.SIGINT)


@dataclass
class _Running:
    job: TaskJob
    actor: object
    ref: object


class RayRunner(Runner):
    """Runner's loop and admission, on a Ray cluster the batch has joined; its own start, wait, end
    and signals."""

    def __init__(self, pool, concurrency: int, task_timeout: float | None, **kw):
        super().__init__(pool, concurrency, task_timeout, **kw)
        self.ray = import_ray()
        # two threads: `interrupt` must get through while `run` waits for the task's process
        self.host = self.ray.remote(max_concurrency=2, max_restarts=0)(TaskHost)

    def _start(self, job: TaskJob, more: bool = False) -> None:  # the node starts the task's process
        job.device = self.pool.place()
        actor = self.host.options(**self.pool.task_resources()).remote()
        self.running.append(_Running(job, actor, actor.run.remote(job.model_dump_json(), self.task_timeout)))
        if self.on_start:
            self.on_start(job)

    def _reap(self, enforce_timeout: bool = False) -> None:
        """End the tasks whose run returned (the timeout is enforced on the node)."""
        ready, _ = self.ray.wait([r.ref for r in self.running], num_returns=1, timeout=POLL_S)
        for r in [r for r in self.running if r.ref in ready]:
            self._end(r)

    def _signal(self, r: _Running, force: bool) -> None:
        if not force:
            r.actor.interrupt.remote()
            return
        try:  # kill the task's process group first: killing the actor alone would orphan it
            self.ray.get(r.actor.interrupt.remote(force=True), timeout=CONTROL_TIMEOUT_S)
        except self.ray.exceptions.RayError:
            pass

    def _end(self, r: _Running, row: TaskRow | None = None) -> None:
        self.running.remove(r)
        row = row or self._row(r)
        self.ray.kill(r.actor)  # its run returned (or is given up on): free its GPU share
        if self.on_end:
            self.on_end(row)

    def _row(self, r: _Running) -> TaskRow:
        try:
            done = self.ray.get(r.ref)
        except self.ray.exceptions.RayError as e:  # the worker or its node died
            first = (str(e).strip().splitlines() or [type(e).__name__])[0][:300]
            return r.job.row("crashed", error=f"the task's Ray worker died ({type(e).__name__}): {first}")
        if done["outcome"] == "hung":
            row = self._hung(r.job)
        elif done["outcome"] == "not_started":
            row = r.job.row("interrupted", error="the batch was stopped before it started")
        else:
            row = read_result(r.job)
        row.wall_s = row.wall_s or done["wall_s"]
        return row
