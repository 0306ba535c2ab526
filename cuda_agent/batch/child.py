"""A task's process: `python -m cuda_agent.batch.child JOB.json`. Runs the agent on one task the
way `optimize` does (cuda_agent/run.py, the same run folder), or scores one candidate (eval mode),
with evaluations through the pool; writes its TaskRow to job.result_path. SIGINT (the batch was
stopped) ends the loop with a closing record and skips re-verification: the task is resumed and
finalized next time. A run whose trajectory already ends with a closing that is not `interrupted`
is only finalized (it was stopped while re-verifying)."""

from __future__ import annotations

import os
import sys
import time
import traceback
from pathlib import Path

from cuda_agent.batch.job import TaskJob, write_json_atomic
from cuda_agent.batch.rows import TaskRow
from cuda_agent.run_folder import RunFolder


def main(argv: list[str]) -> int:
    job = wait_for_job() if argv[1:] == ["--wait"] else TaskJob.model_validate_json(Path(argv[1]).read_text())
    if job is None:
        return 0  # the batch ended before it had a job for this process
    try:
        row = run_eval(job) if job.mode == "eval" else run_agent_task(job)
    except KeyboardInterrupt:
        row = job.row("interrupted", error="stopped by the batch (Ctrl-C); runs again with the batch")
    except BaseException as e:  # noqa: BLE001 - whatever it was, the batch records it and goes on
        traceback.print_exc()
        row = job.row("crashed", error=f"{type(e).__name__}: {e}".splitlines()[0][:500])
    write_json_atomic(job.result_path, row.model_dump(mode="json"))
    return 0


def wait_for_job() -> TaskJob | None:
    """Started ahead (proc.WaitingTaskProcess): import what every task needs, then wait for the job's path on
    stdin; from then on this process's output goes to the task's log, as a plain start's does."""
    t0 = time.time()
    import torch  # noqa: F401  the slow part of a task's start-up

    import cuda_agent.eval.evaluator  # noqa: F401
    import cuda_agent.pool  # noqa: F401
    import cuda_agent.run  # noqa: F401

    ready = time.time()
    job_file = sys.stdin.readline().strip()
    if not job_file:
        return None
    job = TaskJob.model_validate_json(Path(job_file).read_text())
    with open(job.log_path, "a") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    print(
        f"[cuda-agent batch] this task's process started {t0:.3f}, imports done {ready:.3f} (ahead of its job), "
        f"job received {time.time():.3f}",
        flush=True,
    )
    return job


def _settings(job: TaskJob):
    """The job's settings on the device the pool gave it."""
    return job.settings.model_copy(update={"eval": job.settings.eval.model_copy(update={"device": job.device})})


def run_agent_task(job: TaskJob) -> TaskRow:
    from cuda_agent.pool import make_pool
    from cuda_agent.progress import Progress
    from cuda_agent.run import RunError, RunHooks, RunSpec, run_task
    from cuda_agent.workspace.trailers import metrics_of

    pool = make_pool(job.pool)
    spec = (
        RunSpec(resume=job.run_dir, script=job.script)
        if job.resume
        else RunSpec(task=str(job.task_path), workspace=RunFolder(job.run_dir).workspace, script=job.script)
    )
    # every evaluation of the run goes through the pool, re-verification in a slot of its own; a run the
    # batch stops is finalized when it runs again; its long steps are lines in the task's log
    hooks = RunHooks(
        evaluators=lambda env: lambda: pool.evaluator(env.reference_task(), env.eval_config),
        finalize_slot=lambda: pool.slot(job.device),
        finalize_interrupted=False,
        closed_only_finalize=True,
        progress=Progress(),
    )
    try:
        done = run_task(spec, _settings(job), hooks)
    except RunError as e:
        return job.row("load_error", error=str(e))
    if done.stop_reason == "interrupted":  # re-verified when the batch runs again
        raise KeyboardInterrupt
    v = done.verified  # the re-verified result's times and reward; none: -1
    metrics = metrics_of(v).model_dump(exclude={"status"}) if v else {"reward": -1}
    return job.row(
        "done",
        correct=v is not None,
        **metrics,
        steps=done.steps,
        tokens=done.tokens,
        cost=done.cost,
        stop_reason=done.stop_reason,
        error=done.error.splitlines()[0][:500] if done.error else None,
        wall_s=round(done.wall_s, 1),
        report=str(done.report) if done.report else None,
        dropin=str(done.dropin) if done.dropin else None,
        trajectory=str(done.run_folder.trajectory),
    )


def run_eval(job: TaskJob) -> TaskRow:
    from cuda_agent.pool import make_pool
    from cuda_agent.task import TaskError, load_task
    from cuda_agent.workspace.trailers import metrics_of

    try:
        task = load_task(str(job.task_path))
    except TaskError as e:
        return job.row("load_error", error=str(e))
    ev = make_pool(job.pool).evaluator(task, _settings(job).eval, ahead="first")
    try:
        verdict = ev.evaluate(job.candidate)
    finally:
        ev.close()
    job.run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(
        RunFolder(job.run_dir).verdict,
        {"candidate": str(job.candidate), "device": job.device, "verdict": verdict.model_dump(mode="json")},
    )
    return job.row(
        "done",
        correct=verdict.correct,
        **metrics_of(verdict).model_dump(),
        stop_reason=verdict.status,
        error=verdict.error.splitlines()[0][:500] if verdict.error else None,
        wall_s=round(verdict.seconds.get("total", 0.0), 1),
    )


if __name__ == "__main__":
    sys.exit(main(sys.argv))
