"""The end of `optimize`: re-verify the result, write the drop-in for it, write report.md."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from cuda_agent.eval.verdict import Verdict
from cuda_agent.progress import Progress
from cuda_agent.results.dropin import write_dropin
from cuda_agent.results.final import Reverification, reverify
from cuda_agent.results.report import write_report
from cuda_agent.run_folder import RunFolder


@dataclass
class FinalOutputs:
    verified: Verdict | None  # the result's verdict with more input sets; None: no verified result
    report: Path
    dropin: Path | None
    reverification: Reverification  # every version tried, and why one failed


def finalize_run(env, run: RunFolder, result, *, n_sets: int = 10, progress: Progress | None = None) -> FinalOutputs:
    """Re-verify with `n_sets` input sets (always more than the run used), then write the run folder's
    dropin/ for the verified version (if any) and its report.md; `progress` shows each step."""
    progress = progress or Progress(quiet=True)
    rv = reverify(env, n_sets, progress=progress)
    dropin, dropin_error = None, None
    with progress.job("writing the results", lines=False) as job:
        if rv.verified is not None and rv.task is not None:
            job.phase(f"{run.dropin.name}/ (the verified kernels, rebuilt)")
            try:
                dropin = write_dropin(
                    run,
                    env.workspace,
                    rv.verified.version.sha,
                    rv.verified.verdict,
                    rv.task,
                    cache_dir=env.eval_config.cache_dir,
                    arch=env.eval_config.arch,
                )
            except (RuntimeError, ValueError, OSError) as e:  # the report still gets written, and says why
                dropin_error = str(e)
        elif rv.best is not None:
            dropin_error = "no version passed re-verification"
        job.phase(f"{run.report.name} and {run.plot.name}")
        report = write_report(run, env.workspace, run.trajectory, rv, result, dropin=dropin, dropin_error=dropin_error)
    return FinalOutputs(rv.verdict, report, dropin, rv)
