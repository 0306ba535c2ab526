"""The precision downgrade: an fp32 task's output further from float64 truth, normwise, than
fp32 arithmetic gets (what TF32/fp16/bf16 math looks like), from the numbers compare_output reports."""

from __future__ import annotations

from cuda_agent.eval.tolerance import Tolerances
from cuda_agent.eval.verdict import Finding, OutputCheck

_FP32_NAMES = {"float32", "complex64"}


def precision_budget(check: OutputCheck, tol: Tolerances) -> float:
    """The normwise error an fp32 output may have: the floor, or a multiple of the fp32
    reference's own error for tasks where fp32 itself is that far from the truth."""
    return max(tol.precision_budget, tol.ref_error_factor * (check.ref_norm_rel_err or 0.0))


def precision_exceeded(check: OutputCheck, tol: Tolerances) -> bool:
    if check.dtype not in _FP32_NAMES or check.norm_rel_err is None:
        return False
    return check.norm_rel_err > precision_budget(check, tol)


def precision_finding(check: OutputCheck, tol: Tolerances, *, task_fp32: bool,
                      allow_precision: bool = False) -> Finding | None:
    """A `precision` finding when an fp32 task's output is further from float64 truth than
    fp32 arithmetic gets; reported even when the elementwise tolerance let it pass."""
    if not task_fp32 or not precision_exceeded(check, tol):
        return None
    return Finding(
        guard="precision",
        severity="warn" if allow_precision else "fail",
        message=(f"output {check.index}: normwise relative error {check.norm_rel_err:.2e} vs float64 "
                 f"exceeds the fp32 budget {precision_budget(check, tol):.2e} (the fp32 reference's own "
                 f"error is {check.ref_norm_rel_err or 0.0:.2e}); this is what TF32/fp16/bf16 math "
                 "looks like: compute and accumulate in fp32"),
    )
