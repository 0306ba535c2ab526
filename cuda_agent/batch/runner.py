"""The scheduler: up to `concurrency` task processes at once, each placed on a device by the pool.
A task process that exits without a result crashed (its log says why); one that runs past
`task_timeout` is killed with its process group and recorded as hung; the batch goes on either
way. Ctrl-C: every task process gets SIGINT (each closes its trajectory and writes an
`interrupted` row), stragglers are killed after `grace_s`, and every row is written before the
KeyboardInterrupt goes on to the caller."""

from __future__ import annotations

import signal
import subprocess
import time
from collections import deque
from contextlib import suppress
from dataclasses import dataclass
from typing import Callable

from cuda_agent.batch.job import TaskJob
from cuda_agent.batch.proc import WaitingTaskProcess
from cuda_agent.batch.rows import TaskRow
from cuda_agent.jail import kill_group

POLL_S = 0.1
LOG_TAIL = 400


@dataclass
class _Running:
    job: TaskJob
    proc: subprocess.Popen
    started: float
    log: object


class Runner:
    def __init__(
        self,
        pool,
        concurrency: int,
        task_timeout: float | None,
        *,
        grace_s: float = 60.0,
        on_start: Callable[[TaskJob], None] | None = None,
        on_end: Callable[[TaskRow], None] | None = None,
        admit: Callable[[TaskJob], bool] | None = None,
    ):
        self.pool, self.concurrency, self.task_timeout, self.grace_s = pool, concurrency, task_timeout, grace_s
        self.on_start, self.on_end = on_start, on_end
        self.admit = admit  # asked before each start; False leaves it and every later job unstarted
        self.running: list[_Running] = []
        self.ahead = WaitingTaskProcess()  # the next task's process, started while this one starts up

    def run(self, jobs: deque) -> None:
        """Run `jobs` (TaskJobs whose device is filled in here) until none is left."""
        try:
            while jobs or self.running:
                self._fill(jobs)
                self._reap(enforce_timeout=True)
        except KeyboardInterrupt:
            self._stop_all()
            raise
        finally:
            self.ahead.close()

    def _fill(self, jobs: deque) -> None:
        while jobs and len(self.running) < self.concurrency:
            job = jobs.popleft()
            if self.admit is not None and not self.admit(job):
                jobs.clear()  # the batch's cost cap is reached: nothing more starts
                return
            self._start(job, more=bool(jobs))

    def _start(self, job: TaskJob, more: bool = False) -> None:
        job.device = self.pool.place()
        proc, log = self.ahead.start(job, more)
        self.running.append(_Running(job, proc, time.monotonic(), log))
        if self.on_start:
            self.on_start(job)

    def _reap(self, enforce_timeout: bool = False) -> None:
        """End the tasks whose process exited (and, enforcing the timeout, those that ran past it); wait a poll."""
        for r in list(self.running):
            if r.proc.poll() is not None:
                self._end(r)
            elif enforce_timeout and self.task_timeout and time.monotonic() - r.started > self.task_timeout:
                self._signal(r, force=True)
                self._end(r, self._hung(r.job))
        time.sleep(POLL_S)

    def _signal(self, r: _Running, force: bool) -> None:
        """SIGINT the task's process group (it closes its run and writes its row); with `force`, kill it."""
        kill_group(r.proc.pid, signal.SIGKILL if force else signal.SIGINT)
        if force:
            r.proc.wait()

    def _end(self, r: _Running, row: TaskRow | None = None) -> None:
        self.running.remove(r)
        r.log.close()
        self.pool.release(r.job.device)
        row = row or read_result(r.job)
        row.wall_s = row.wall_s or round(time.monotonic() - r.started, 1)
        if self.on_end:
            self.on_end(row)

    def _hung(self, job: TaskJob) -> TaskRow:
        return job.row("hung", error=f"ran past --task-timeout {self.task_timeout:g} s and was killed; see its log")

    def _stop_all(self) -> None:
        for r in self.running:
            self._signal(r, force=False)
        deadline = time.monotonic() + self.grace_s
        with suppress(KeyboardInterrupt):  # a second Ctrl-C: no more waiting
            while self.running and time.monotonic() < deadline:
                self._reap()
        for r in list(self.running):
            self._signal(r, force=True)
            self._end(r, r.job.row("interrupted", error="killed while stopping the batch; runs again with the batch"))


def read_result(job: TaskJob) -> TaskRow:
    """The row the task's process wrote, or a `crashed` row with the last line of its log."""
    try:
        return TaskRow.model_validate_json(job.result_path.read_text())
    except (OSError, ValueError):
        tail = _tail(job.log_path)
        return job.row("crashed", error=f"the task's process exited without a result: {tail or 'no output'}")


def _tail(path) -> str:
    try:
        lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1][-LOG_TAIL:] if lines else ""
