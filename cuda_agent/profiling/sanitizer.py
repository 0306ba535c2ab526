"""compute-sanitizer (memcheck, racecheck, initcheck) on one forward of a candidate, without
warm-up. PyTorch's caching allocator is switched off for the run (PYTORCH_NO_CUDA_MEMORY_CACHING):
with it, an off-by-one write lands inside a larger cached block and memcheck sees nothing.
initcheck sees global memory only (compute-sanitizer 2025.3 has no option for
shared memory); racecheck covers shared memory's hazards. The report is parsed by sanitizer_parse."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from cuda_agent.profiling.runner import Wrapped, find_profiler, run_wrapped, single_run_argv, tail
from cuda_agent.profiling.sanitizer_parse import Finding, SanitizerReport, parse_sanitizer

__all__ = [
    "Finding",
    "SanitizeResult",
    "SanitizerReport",
    "interpret",
    "parse_sanitizer",
    "sanitize_candidate",
    "sanitizer_command",
    "find_sanitizer",
]

TOOLS = ("memcheck", "racecheck", "initcheck")
PRINT_LIMIT = 20
ENV = {"PYTORCH_NO_CUDA_MEMORY_CACHING": "1"}
DEFAULT_TIMEOUT = 300.0  # seconds; racecheck and initcheck slow every memory access down
MISSING = (
    "compute-sanitizer not found: it ships with the CUDA toolkit (bin/ or compute-sanitizer/); install "
    "the toolkit or set the tools.sanitizer_path setting"
)


class SanitizeResult(BaseModel):
    ok: bool  # the tool ran to its summary
    report: SanitizerReport | None = None
    error: str | None = None  # why there is no report (or why it is incomplete)
    seconds: float = 0.0


def find_sanitizer(override: str | None = None) -> Path | None:
    return find_profiler("compute-sanitizer", override)


def sanitizer_command(sanitizer: Path | str, tool: str, task_ref: str, candidate: Path) -> list[str]:
    if tool not in TOOLS:
        raise ValueError(f"unknown sanitizer tool {tool!r}: use one of {', '.join(TOOLS)}")
    argv = [str(sanitizer), "--tool", tool, "--print-limit", str(PRINT_LIMIT)]
    return argv + single_run_argv(task_ref, candidate, warmup=0)


def sanitize_candidate(
    sanitizer: Path,
    tool: str,
    task_ref: str,
    candidate: Path,
    kernels_dir: Path,
    timeout: float = DEFAULT_TIMEOUT,
    sandbox: bool | None = None,
) -> SanitizeResult:
    """Run `tool` on one forward of `candidate` whose kernels are already built in `kernels_dir`."""
    try:
        run = run_wrapped(
            sanitizer_command(sanitizer, tool, task_ref, candidate),
            cwd=candidate,
            timeout=timeout,
            env={**ENV, "CUDA_AGENT_KERNELS": str(kernels_dir)},
            sandbox=sandbox,
        )
    except OSError as e:
        return SanitizeResult(
            ok=False,
            error=f"compute-sanitizer at {sanitizer} could not be started "
            f"({e.strerror or e}): reinstall the CUDA toolkit or set the tools.sanitizer_path setting",
        )
    return interpret(run, tool, timeout)


def interpret(run: Wrapped, tool: str, timeout: float) -> SanitizeResult:
    report = parse_sanitizer(run.text, tool)
    done = dict(report=report, seconds=run.seconds)
    if run.timed_out:
        return SanitizeResult(
            ok=False,
            error=f"{tool} timed out after {timeout:.0f} s and was killed: a kernel "
            "that never ends, or one very slow under the sanitizer",
            **done,
        )
    if report.complete:
        return SanitizeResult(ok=True, **done)
    why = "; ".join(report.notes) or tail(run.text, 6) or f"exit code {run.returncode}, no output"
    return SanitizeResult(ok=False, error=f"{tool} did not reach its summary: {why}", **done)
