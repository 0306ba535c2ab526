"""What one evaluation concludes: the types every later part reads (records, reports, reward).

Plain pydantic models so a verdict round-trips through JSON (the judge's replies, trajectories,
batch results) without pickling.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Severity = Literal["fail", "warn", "info"]

Status = Literal[
    "correct",  # every output of every input set passed, no failing guard
    "incorrect",  # ran, but an output was wrong
    "guard_violation",  # a guard with severity "fail" fired (reward -1 even if outputs match)
    "compile_error",
    "runtime_error",  # exception, illegal address, OOM in the candidate
    "timeout",  # a jailed process ran past its wall-time limit and was killed
    "unscorable",  # the task itself cannot be scored (non-deterministic reference...)
    "error",  # the harness could not evaluate (bad task, bad candidate layout)
]


class Finding(BaseModel):
    """One guard's observation about a candidate."""

    guard: str  # stable id, e.g. "aten_in_forward", "precision", "import_not_allowed"
    message: str  # one line a model or a person can act on
    severity: Severity = "fail"
    where: str | None = None  # "kernels/foo.cu:12" or "model_new.py:30" when known


class OutputCheck(BaseModel):
    """How one output tensor of one input set compared with the reference."""

    index: int
    ok: bool
    shape: list[int]
    dtype: str
    max_abs_err: float | None = None  # against the float64 reference
    max_rel_err: float | None = None
    norm_rel_err: float | None = None  # ||out - ref64|| / ||ref64||
    ref_norm_rel_err: float | None = None  # the fp32 reference's own error, for scale
    mismatched: int = 0  # elements outside tolerance
    reason: str | None = None  # why it failed, in one line


class SetResult(BaseModel):
    """One input set: its seed and how every output compared."""

    seed: int
    ok: bool
    outputs: list[OutputCheck] = Field(default_factory=list)
    error: str | None = None


class Timing(BaseModel):
    """Milliseconds per call of one implementation, measured as docs/harness.md describes."""

    median_ms: float
    mean_ms: float
    min_ms: float
    max_ms: float
    p20_ms: float
    p80_ms: float
    reps: int
    warmup: int
    input_sets: int
    batches: int = 0  # batches the figures are over (docs/harness.md, timing)
    batch_reps: int = 0  # calls per batch
    parent_median_ms: float | None = None  # the parent's clock alone, per call
    single_call_ms: float | None = None  # the parent's clock for a call alone (batches of one; candidates)
    event_median_ms: float | None = None  # the judge's CUDA events, per call (an estimate, not evidence)
    # how far the calibrated overhead's possible error (clocked.Overhead.error_ms) could make the figure
    # read fast, per call: a candidate's speed-up and reward count median_ms plus this (counted_ms)
    resolution_ms: float = 0.0
    clocks: dict[str, float] = Field(default_factory=dict)  # NVML: sm/mem MHz, temperature C
    device: str = ""

    @property
    def counted_ms(self) -> float:
        """The figure a candidate's speed-up is counted from: as slow as an overhead calibrated too high
        could have made it, so no calibration error buys the reward's margin."""
        return self.median_ms + self.resolution_ms


class Verdict(BaseModel):
    """Everything one evaluation of one candidate concluded."""

    status: Status
    correct: bool = False
    reward: int = -1
    sets: list[SetResult] = Field(default_factory=list)
    findings: list[Finding] = Field(default_factory=list)
    timing: Timing | None = None
    eager: Timing | None = None
    compiled: Timing | None = None
    # how eager and compiled were timed: "cached" (once per task, GPU and torch version, reused),
    # "fresh" (timed now, after the candidate) or "interleaved" (rounds beside the candidate)
    baselines: Literal["cached", "fresh", "interleaved"] | None = None
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None
    error: str | None = None  # compile errors (trimmed) or the runtime error text
    notes: list[str] = Field(default_factory=list)
    seconds: dict[str, float] = Field(default_factory=dict)  # where the wall time went
    # peak GPU memory (GiB, torch's allocator) of each process this evaluation ran on the device:
    # parent (references, comparisons), judge (the candidate), baselines (eager, torch.compile)
    memory_gib: dict[str, float] = Field(default_factory=dict)
    # the candidate's files as judged (relative to its folder) -> sha256: model_new.py and each file of
    # kernels/ the build read. A version that does not hold them byte for byte is not this verdict's
    # (workspace/history.py): a file git leaves out or rewrites was compiled all the same
    judged_files: dict[str, str] = Field(default_factory=dict)

    @property
    def failing_findings(self) -> list[Finding]:
        return [f for f in self.findings if f.severity == "fail"]


def harness_error(e: Exception) -> Verdict:
    """A fault of the harness itself, as a verdict (status error, exit 5), never a traceback."""
    import traceback
    from pathlib import Path

    last = traceback.extract_tb(e.__traceback__)[-1]
    return Verdict(
        status="error",
        error=f"the harness failed: {type(e).__name__}: {str(e)[:500]} ({Path(last.filename).name} line {last.lineno})",
    )
