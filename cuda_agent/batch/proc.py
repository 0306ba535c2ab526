"""A task's process, started and stopped the same way by the local runner and by a Ray task on
another machine: `python -m cuda_agent.batch.child JOB.json` in a session of its own (the batch
decides when it is interrupted, and kills its whole group), its output appended to the task's log.

The local runner starts them one ahead (WaitingTaskProcess): the next task's process imports torch and the
harness while the current one starts up, then waits for its job on stdin. Still one process per
task; only its start-up is no longer on the batch's path.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from cuda_agent.batch.job import TaskJob


def write_job(job: TaskJob) -> Path:
    """Write the job next to its log (the result of an earlier attempt removed); its path."""
    job.result_path.unlink(missing_ok=True)
    job.log_path.parent.mkdir(parents=True, exist_ok=True)
    job_file = job.log_path.with_name(job.log_path.name.removesuffix(".log") + ".job.json")
    job_file.write_text(job.model_dump_json(indent=1))
    return job_file


def start_child(job: TaskJob) -> tuple[subprocess.Popen, object]:
    """Write the job, start the task's process; (the process, its open log)."""
    job_file = write_job(job)
    log = open(job.log_path, "a")
    proc = subprocess.Popen(
        [sys.executable, "-m", "cuda_agent.batch.child", str(job_file)],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )
    return proc, log


class WaitingTaskProcess:
    """One task process waiting, its imports done, for the next job (child.py --wait)."""

    def __init__(self) -> None:
        self.waiting: subprocess.Popen | None = None

    def start(self, job: TaskJob, more: bool) -> tuple[subprocess.Popen, object]:
        """Hand `job` to the waiting process (or start one); with `more` jobs to come, the next waits."""
        proc, self.waiting = self.waiting, None
        if proc is None or proc.poll() is not None:  # none yet, or it died waiting: a plain start says why in the log
            result = start_child(job)
        else:
            job_file = write_job(job)
            try:
                proc.stdin.write(f"{job_file}\n".encode())
                proc.stdin.close()
                result = proc, open(job.log_path, "a")
            except OSError:  # it died just now
                proc.kill()
                result = start_child(job)
        if more:
            self.waiting = subprocess.Popen(
                [sys.executable, "-m", "cuda_agent.batch.child", "--wait"],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )
        return result

    def close(self) -> None:
        """The batch is over: the waiting process reads the end of its stdin and exits."""
        if self.waiting is not None:
            try:
                self.waiting.stdin.close()
                self.waiting.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.waiting.kill()
            self.waiting = None
