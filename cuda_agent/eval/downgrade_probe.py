"""What a TF32/fp16-input downgrade would do to the truth on these very inputs.

The float64 reference is run once more with the operands of every matmul, convolution and attention
rounded to a 10-bit mantissa (TF32's, and fp16's within its range) before the op, in float64. The
difference from the plain float64 truth is the downgrade's own error on this data: precision.py
measures how much of a candidate's error lies along it. On all-positive inputs a long dot product
averages rounding away, so TF32's normwise error can fall below honest fp32 accumulation error, but
the candidate's error still carries the rounding pattern itself, element for element.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

_aten = torch.ops.aten
# Which positional arguments of each op tensor cores take in reduced precision (not bias / C).
ROUNDED_OPERANDS: dict[Any, tuple[int, ...]] = {
    _aten.mm.default: (0, 1),
    _aten.bmm.default: (0, 1),
    _aten.mv.default: (0, 1),
    _aten.dot.default: (0, 1),
    _aten.vdot.default: (0, 1),
    _aten.addmm.default: (1, 2),
    _aten.baddbmm.default: (1, 2),
    _aten.addbmm.default: (1, 2),
    _aten.addmv.default: (1, 2),
    _aten._addmm_activation.default: (1, 2),
    _aten.convolution.default: (0, 1),
    _aten._convolution.default: (0, 1),
    _aten._scaled_dot_product_flash_attention_for_cpu.default: (0, 1, 2),
    _aten._scaled_dot_product_efficient_attention.default: (0, 1, 2),
    _aten._scaled_dot_product_flash_attention.default: (0, 1, 2),
    _aten._scaled_dot_product_cudnn_attention.default: (0, 1, 2),
}
MANTISSA_BITS = 10  # TF32 and fp16
_DROP = {torch.float64: 52 - MANTISSA_BITS, torch.float32: 23 - MANTISSA_BITS}
_INT = {torch.float64: torch.int64, torch.float32: torch.int32}


def round_mantissa(t: torch.Tensor) -> torch.Tensor:
    """Round to nearest (ties away, as cvt.rna.tf32.f32) to a 10-bit mantissa; NaN/Inf kept.
    Other dtypes come back unchanged."""
    drop = _DROP.get(t.dtype)
    if drop is None:
        return t
    bits = t.contiguous().view(_INT[t.dtype])  # sign-magnitude: adding half an ulp rounds the magnitude
    rounded = ((bits + (1 << (drop - 1))) & ~((1 << drop) - 1)).view(t.dtype).view(t.shape)
    return torch.where(torch.isfinite(t), rounded, t)


class _RoundOperands(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.rounded = 0  # how many ops had operands rounded: none means the probe says nothing

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        which = ROUNDED_OPERANDS.get(func)
        if which:
            args = tuple(
                round_mantissa(a) if i in which and isinstance(a, torch.Tensor) else a for i, a in enumerate(args)
            )
            self.rounded += 1
        return func(*args, **(kwargs or {}))


def rounded_forward(forward: Callable[[], list]) -> tuple[list, int]:
    """What `forward` (the float64 model on one input set) returns with matmul/conv/attention operands
    rounded; and how many ops were rounded (0: the task has none, the outputs prove nothing)."""
    mode = _RoundOperands()
    with torch.no_grad(), mode:
        out = [o.detach() if isinstance(o, torch.Tensor) else o for o in forward()]
    return out, mode.rounded


def perturbation(low64: Any, ref64: Any) -> torch.Tensor | None:
    """low64 - ref64 in float32 (a few digits of the downgrade's error is all precision.py needs),
    or None where the output is not a real float tensor or the rounding did not change it."""
    if (
        not (isinstance(low64, torch.Tensor) and isinstance(ref64, torch.Tensor))
        or not ref64.is_floating_point()
        or low64.shape != ref64.shape
    ):
        return None
    p = (low64.to(ref64.dtype) - ref64).float()
    p = torch.where(torch.isfinite(p), p, 0.0)
    return p if bool(p.any()) else None
