"""Nsight Compute on one forward of a candidate: the command, the run, and what went wrong in one
line when it did. Only the kernels inside the `candidate_forward` NVTX range are profiled (never
the warm-up, input generation or weight copies), clocks are left as they are (`--clock-control
none`, so durations match what benchmark measures), and a curated set of sections keeps the
replay short. The CSV is parsed by ncu_csv."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from cuda_agent.eval.single_run import NVTX_RANGE
from cuda_agent.profiling.ncu_csv import KernelProfile, parse_ncu_csv
from cuda_agent.profiling.runner import Wrapped, find_profiler, run_wrapped, single_run_argv, tail

__all__ = ["KernelProfile", "NcuResult", "find_ncu", "interpret", "ncu_command", "parse_ncu_csv", "profile_candidate"]

# the same sections as the GPU suite's capture phase (gpu_suite.sh), so its CSV is this command's output
SECTIONS = (
    "SpeedOfLight",
    "Occupancy",
    "LaunchStats",
    "MemoryWorkloadAnalysis",
    "WarpStateStats",
    "ComputeWorkloadAnalysis",
    "SpeedOfLight_RooflineChart",
)
NVTX_FILTER = f"{NVTX_RANGE}/"  # a push/pop range by that name
DEFAULT_TIMEOUT = 300.0  # seconds: each kernel is replayed once per pass (tens of passes)

MISSING = (
    "ncu (Nsight Compute) not found: install Nsight Compute or set the tools.ncu_path setting; "
    "until then use benchmark timings and compile's register/shared-memory report"
)
NOT_PERMITTED = (
    "ncu is not permitted to read this GPU's performance counters (ERR_NVGPUCTRPERM): it runs "
    "in the jail, without admin rights; an admin must allow profiling for all users (driver option "
    "NVreg_RestrictProfilingToAdminUsers=0); until then use benchmark timings"
)
_PERM = re.compile(r"ERR_NVGPUCTRPERM|^==ERROR==.*(permission|not permitted)", re.I | re.M)


class NcuResult(BaseModel):
    ok: bool
    kernels: list[KernelProfile] = []
    error: str | None = None  # what the model reads when ok is False
    seconds: float = 0.0


def find_ncu(override: str | None = None) -> Path | None:
    return find_profiler("ncu", override)


def ncu_command(ncu: Path | str, task_ref: str, candidate: Path, warmup: int = 1) -> list[str]:
    sections = [arg for section in SECTIONS for arg in ("--section", section)]
    return [
        str(ncu),
        "--clock-control",
        "none",
        "--nvtx",
        "--nvtx-include",
        NVTX_FILTER,
        "--csv",
        "--page",
        "details",
        *sections,
        "--print-details",
        "all",
        "--print-rule-details",
        *single_run_argv(task_ref, candidate, warmup),
    ]


def profile_candidate(
    ncu: Path,
    task_ref: str,
    candidate: Path,
    kernels_dir: Path,
    timeout: float = DEFAULT_TIMEOUT,
    sandbox: bool | None = None,
) -> NcuResult:
    """Run ncu on one forward of `candidate` whose kernels are already built in `kernels_dir`."""
    try:
        run = run_wrapped(
            ncu_command(ncu, task_ref, candidate),
            cwd=candidate,
            timeout=timeout,
            env={"CUDA_AGENT_KERNELS": str(kernels_dir)},
            sandbox=sandbox,
        )
    except OSError as e:
        return NcuResult(
            ok=False,
            error=f"ncu at {ncu} could not be started ({e.strerror or e}): "
            "reinstall Nsight Compute or set the tools.ncu_path setting",
        )
    return interpret(run, timeout)


def interpret(run: Wrapped, timeout: float) -> NcuResult:
    """Kernels when ncu produced any; otherwise the one reason the model needs."""
    text, done = run.text, dict(seconds=run.seconds)
    if run.timed_out:
        return NcuResult(
            ok=False,
            error=f"ncu timed out after {timeout:.0f} s and was killed: a kernel that "
            "never ends, or very many launches in one forward; run verify first",
            **done,
        )
    if _PERM.search(text):
        return NcuResult(ok=False, error=NOT_PERMITTED, **done)
    kernels = parse_ncu_csv(run.stdout) or parse_ncu_csv(text)
    if kernels:
        return NcuResult(ok=True, kernels=kernels, **done)
    if run.returncode != 0:
        progress_free = "\n".join(line for line in text.splitlines() if not line.startswith("==PROF=="))
        why = tail(progress_free, 6) or "no output"
        return NcuResult(
            ok=False,
            error=f"the forward failed under ncu (exit {run.returncode}); run verify "
            f"for the full error. Last lines:\n{why}",
            **done,
        )
    if re.search(r"no kernels were profiled", text, re.I):
        return NcuResult(
            ok=False,
            error=f"ncu saw no kernel inside the {NVTX_RANGE} range: forward must launch "
            "your kernels (kernels.<launcher>(...)) on the GPU",
            **done,
        )
    return NcuResult(
        ok=False, error="ncu printed no kernel metrics; last lines:\n" + (tail(text, 6) or "(none)"), **done
    )
