"""A task's process, started and stopped the same way by the local runner and by a Ray task on
another machine: `python -m cuda_agent.batch.child JOB.json` in a session of its own (the batch
decides when it is interrupted, and kills its whole group), its output appended to the task's log."""

from __future__ import annotations

import subprocess
import sys

from cuda_agent.batch.job import TaskJob


def start_child(job: TaskJob) -> tuple[subprocess.Popen, object]:
    """Write the job next to the log, start the task's process; (the process, its open log)."""
    job.result_path.unlink(missing_ok=True)
    job.log_path.parent.mkdir(parents=True, exist_ok=True)
    job_file = job.log_path.with_name(job.log_path.name.removesuffix(".log") + ".job.json")
    job_file.write_text(job.model_dump_json(indent=1))
    log = open(job.log_path, "a")
    proc = subprocess.Popen([sys.executable, "-m", "cuda_agent.batch.child", str(job_file)], stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    return proc, log
