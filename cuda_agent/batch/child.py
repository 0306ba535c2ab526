"""A task's process: `python -m cuda_agent.batch.child JOB.json`. Runs the agent on one task the
way `optimize` does (same run folder; cli_optimize.finalize and run_summary), or scores one
candidate (eval mode), with evaluations through the pool; writes its TaskRow to job.result_path.

SIGINT (the batch was stopped) ends the loop with a closing record and skips re-verification:
the task is resumed and finalized next time. A run whose trajectory already ends with a closing
that is not `interrupted` is only finalized (it was stopped while re-verifying).
"""

from __future__ import annotations

import sys
import traceback
from pathlib import Path

from cuda_agent.batch.job import TaskJob, write_json_atomic
from cuda_agent.batch.rows import TaskRow


def main(argv: list[str]) -> int:
    job = TaskJob.model_validate_json(Path(argv[1]).read_text())
    try:
        row = run_eval(job) if job.mode == "eval" else run_agent_task(job)
    except KeyboardInterrupt:
        row = job.row("interrupted", error="stopped by the batch (Ctrl-C); runs again with the batch")
    except BaseException as e:  # noqa: BLE001 - whatever it was, the batch records it and goes on
        traceback.print_exc()
        row = job.row("crashed", error=f"{type(e).__name__}: {e}".splitlines()[0][:500])
    write_json_atomic(job.result_path, row.model_dump(mode="json"))
    return 0


def _eval_config(job: TaskJob):
    from cuda_agent.eval.settings import EvalConfig

    return EvalConfig.model_validate({**job.eval_config, "device": job.device})


def _load(job: TaskJob):
    from cuda_agent.task import TaskError, load_task

    try:
        return load_task(str(job.task_path)), None
    except TaskError as e:
        return None, job.row("load_error", error=str(e))


def run_agent_task(job: TaskJob) -> TaskRow:
    from cuda_agent.agent.loop import AgentConfig, RunResult, run_agent
    from cuda_agent.agent.resume import resume_run
    from cuda_agent.cli_optimize import _model, finalize, run_summary
    from cuda_agent.environment import Environment
    from cuda_agent.pool import make_pool
    from cuda_agent.records import Closing
    from cuda_agent.trajectory import TrajectoryWriter, read_trajectory
    from cuda_agent.workspace import Workspace

    pool = make_pool(job.pool)
    trajectory = job.run_dir / "trajectory.jsonl"
    state, closing = None, None
    if job.resume:
        env, _, state = resume_run(job.run_dir, eval_overrides={"device": job.device})
        last = read_trajectory(trajectory)[-1]
        closing = last if isinstance(last, Closing) and last.stop_reason != "interrupted" else None
    else:
        task, failed = _load(job)
        if failed:
            return failed
        env = Environment(Workspace.create(task, path=job.run_dir / "workspace"), _eval_config(job),
                          settings={"allow_shell": job.allow_shell})
    # every evaluation of the run goes through the pool (tools reach the evaluator via ctx)
    env.ctx.evaluator_factory = lambda: pool.evaluator(env.reference_task(), env.eval_config)
    final, final_error = None, None
    with env:
        if closing is not None:  # the loop had ended; only the re-verification was cut off
            result = RunResult(closing.stop_reason, env.workspace.best(), closing.steps, closing.tokens,
                               closing.cost, closing.unpriced_turns, closing.wall_s, closing.error)
        else:
            llm = _model(job.model, job.api_base, job.script, skip=state.steps if state else 0)
            limits = AgentConfig(**job.limits)
            with TrajectoryWriter(trajectory) as writer:
                result = run_agent(llm, env, limits, writer, run_id=job.run_dir.name, resume_state=state)
        if result.stop_reason == "interrupted":
            raise KeyboardInterrupt
        with pool.slot(job.device):  # re-verification is an evaluation too
            final, final_error = finalize(env, job.run_dir, result)
    _, s = run_summary(job.run_dir, result, final, final_error)
    v = s["verified"] or {}
    reward = s["verified_reward"]
    return job.row("done", correct=reward is not None, reward=-1 if reward is None else reward,
                   speedup_eager=v.get("speedup_vs_eager"), speedup_compile=v.get("speedup_vs_compile"),
                   time_ms=v.get("time_ms"), eager_ms=v.get("eager_ms"), compile_ms=v.get("compile_ms"),
                   steps=s["steps"], tokens=s["tokens"], cost=s["cost"], stop_reason=s["stop_reason"],
                   error=s["error"].splitlines()[0][:500] if s["error"] else None, wall_s=s["wall_s"],
                   report=s["report"], dropin=s["dropin"], trajectory=str(trajectory))


def run_eval(job: TaskJob) -> TaskRow:
    from cuda_agent.pool import make_pool

    task, failed = _load(job)
    if failed:
        return failed
    ev = make_pool(job.pool).evaluator(task, _eval_config(job), warm=False)
    try:
        verdict = ev.evaluate(job.candidate)
    finally:
        ev.close()
    job.run_dir.mkdir(parents=True, exist_ok=True)
    write_json_atomic(job.run_dir / "verdict.json", {"candidate": str(job.candidate), "device": job.device,
                                                     "verdict": verdict.model_dump(mode="json")})
    ms = lambda t: t.median_ms if t else None  # noqa: E731
    return job.row("done", correct=verdict.correct, reward=verdict.reward, status=verdict.status,
                   stop_reason=verdict.status, speedup_eager=verdict.speedup_vs_eager,
                   speedup_compile=verdict.speedup_vs_compile, time_ms=ms(verdict.timing),
                   eager_ms=ms(verdict.eager), compile_ms=ms(verdict.compiled),
                   error=verdict.error.splitlines()[0][:500] if verdict.error else None,
                   wall_s=round(verdict.seconds.get("total", 0.0), 1))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
