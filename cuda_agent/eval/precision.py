"""The precision downgrade: an fp32 task's output further from float64 truth, normwise, than fp32
arithmetic gets (what TF32/fp16/bf16 math looks like), or whose error follows the rounding of its
matmul/conv operands to fewer mantissa bits (what TF32 looks like where the normwise error is small).

Why two tests: on zero-mean data a TF32 GEMM's normwise error (~3e-4) is far above fp32's; on
all-positive data (torch.rand) a K-long dot product averages the input rounding down by sqrt(K), and
at K in the thousands TF32's error falls below what honest sequential fp32 accumulation gets. No
normwise budget separates the two there; the error's direction does. downgrade_probe.py gives the
TF32 rounding's own effect on the truth, p; an honest kernel's error is independent of p (it used
every bit of the operands), a downgraded one carries it: share = <e, p>/<p, p> is 1 for TF32 or
fp16 operands, ~0.5 for one operand rounded, and 0 ± z-noise for honest fp32 in any order.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from cuda_agent.eval.tensor_walk import chunks, walk_order
from cuda_agent.eval.tolerance import Tolerances
from cuda_agent.eval.verdict import Finding, OutputCheck

_FP32_NAMES = {"float32", "complex64"}
CHUNK_ELEMS = 1 << 22


def precision_budget(check: OutputCheck, tol: Tolerances) -> float:
    """The normwise error an fp32 output may have: the floor, or a multiple of the fp32
    reference's own error for tasks where fp32 itself is that far from the truth."""
    return max(tol.precision_budget, tol.ref_error_factor * (check.ref_norm_rel_err or 0.0))


def precision_exceeded(check: OutputCheck, tol: Tolerances) -> bool:
    if check.dtype not in _FP32_NAMES or check.norm_rel_err is None:
        return False
    return check.norm_rel_err > precision_budget(check, tol)


@dataclass(frozen=True)
class Signature:
    """How much of a candidate's error lies along the downgrade's own error p: `share` is the
    regression coefficient <e, p>/<p, p>, `z` the same sum over its standard error if e were
    independent of p (what honest fp32 rounding is)."""

    share: float
    z: float


def downgrade_signature(
    out: torch.Tensor, ref64: torch.Tensor, probe: torch.Tensor, limit: int = CHUNK_ELEMS
) -> Signature | None:
    """The signature over the elements finite in all three; None when p carries nothing there."""
    if out.shape != ref64.shape or probe.shape != ref64.shape or out.is_complex():
        return None
    ep = pp = eepp = 0.0
    for o, t, p in chunks([out, ref64, probe], walk_order(out), limit):
        device = o.device
        o, t, p = o.double(), t.to(device=device, dtype=torch.float64), p.to(device=device, dtype=torch.float64)
        e = o - t
        fin = torch.isfinite(e) & torch.isfinite(p)
        e, p = torch.where(fin, e, 0.0), torch.where(fin, p, 0.0)
        ep += float(torch.dot(e, p))
        pp += float(torch.dot(p, p))
        eepp += float(torch.dot(e * p, e * p))
    if pp == 0.0:
        return None
    return Signature(share=ep / pp, z=ep / math.sqrt(eepp) if eepp > 0.0 else 0.0)


def signature_found(sig: Signature | None, tol: Tolerances) -> bool:
    return sig is not None and abs(sig.z) >= tol.downgrade_z and abs(sig.share) >= tol.downgrade_share


def precision_finding(
    check: OutputCheck,
    tol: Tolerances,
    *,
    task_fp32: bool,
    allow_precision: bool = False,
    signature: Signature | None = None,
) -> Finding | None:
    """A `precision` finding when an fp32 task's output is further from float64 truth than fp32
    arithmetic gets, or its error carries the reduced-precision rounding of its operands (`signature`,
    from downgrade_signature); reported even when the elementwise tolerance let it pass."""
    if not task_fp32 or check.dtype not in _FP32_NAMES:
        return None
    severity = "warn" if allow_precision else "fail"
    if precision_exceeded(check, tol):
        return Finding(
            guard="precision",
            severity=severity,
            message=(
                f"output {check.index}: normwise relative error {check.norm_rel_err:.2e} vs float64 "
                f"exceeds the fp32 budget {precision_budget(check, tol):.2e} (the fp32 reference's own "
                f"error is {check.ref_norm_rel_err or 0.0:.2e}); this is what TF32/fp16/bf16 math "
                "looks like: compute and accumulate in fp32"
            ),
        )
    if signature_found(signature, tol):
        return Finding(
            guard="precision",
            severity=severity,
            message=(
                f"output {check.index}: its error vs float64 follows the rounding of the matmul/conv operands "
                f"to a 10-bit mantissa (share {signature.share:.2f}, z = {signature.z:.0f}; honest fp32 "
                "gives 0): this is what TF32 tensor cores, fp16 or bf16 operands look like, whatever the "
                "normwise error; keep the operands in fp32 (CUBLAS_COMPUTE_32F, CUBLAS_DEFAULT_MATH, fp32 FMA)"
            ),
        )
    return None
