"""The zero trap: where an all-zero output or a constant would pass the gate, tighten atol to
the output's scale, or call the output uninformative (docs/correctness.md, "Zero trap")."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from cuda_agent.eval.compare import CHUNK_ELEMS, ref_err_rms, scan
from cuda_agent.eval.tensor_walk import chunks, is_exact, real_view, walk_order
from cuda_agent.eval.tolerance import Tolerances


def _trivial_candidates(ref32: torch.Tensor, ref64: torch.Tensor | None, limit: int) -> tuple[float, float]:
    """(mean, rms) of the truth over its finite elements, the mean rounded to the output dtype."""
    total, sq, n = 0.0, 0.0, 0
    truth = real_view(ref64 if ref64 is not None and not is_exact(ref32.dtype) else ref32)
    for (t,) in chunks([truth], walk_order(truth), limit):
        t = t.to(torch.float64)
        t = t[torch.isfinite(t)]
        total += float(t.sum())
        sq += float((t * t).sum())
        n += t.numel()
    if n == 0:
        return 0.0, 0.0
    mean = total / n
    if not ref32.is_complex():  # the constant a kernel would actually write
        mean = float(torch.tensor(mean, dtype=torch.float64).to(ref32.dtype).to(torch.float64))
    return mean, math.sqrt(sq / n)


def _trivial_passing(
    ref32: torch.Tensor, ref64: torch.Tensor | None, tol: Tolerances, mean: float, limit: int
) -> str | None:
    rtol, atol = tol.for_dtype(ref32.dtype)
    floor = ref_err_rms(ref32, ref64, limit)
    for value, name in ((0.0, "an all-zero output"), (mean, f"the constant {mean:.6g} (the mean)")):
        acc, _ = scan(value, ref32, ref64, rtol, atol, tol.ref_error_factor, floor, limit, stop_early=True)
        if acc.n and not (acc.mismatched or acc.nonfinite_bad):
            return name
    return None


def trivial_output_passes(
    ref32: torch.Tensor, ref64: torch.Tensor | None, tol: Tolerances, *, chunk_elems: int = CHUNK_ELEMS
) -> str | None:
    """Would an all-zero output, or a constant (the mean), pass this gate? Says which, or None."""
    mean, _ = _trivial_candidates(ref32, ref64, chunk_elems)
    return _trivial_passing(ref32, ref64, tol, mean, chunk_elems)


@dataclass(frozen=True)
class ZeroTrap:
    """What to compare one output with: `tol` (tightened when a trivial output passed),
    a note for the verdict, and whether the output can tell a kernel from a constant."""

    tol: Tolerances
    note: str | None = None
    informative: bool = True


def zero_trap(
    ref32: torch.Tensor, ref64: torch.Tensor | None, tol: Tolerances, *, chunk_elems: int = CHUNK_ELEMS
) -> ZeroTrap:
    """Tighten atol to the output's scale when zeros or a constant would pass.

    atol_eff = min(atol, rtol * rms(truth)): an absolute floor that is small next to the
    values themselves. If a trivial output still passes, the output is uninformative.
    """
    mean, rms = _trivial_candidates(ref32, ref64, chunk_elems)
    trivial = _trivial_passing(ref32, ref64, tol, mean, chunk_elems)
    if trivial is None:
        return ZeroTrap(tol)
    rtol, atol = tol.for_dtype(ref32.dtype)
    if rms == 0.0:
        return ZeroTrap(
            tol,
            f"zero trap: the reference output is all zeros, so {trivial} passes; this output is uninformative",
            informative=False,
        )
    new_atol = min(atol, rtol * rms)
    tight = tol.with_atol(ref32.dtype, new_atol) if new_atol < atol else tol
    still = _trivial_passing(ref32, ref64, tight, mean, chunk_elems)
    if still is not None:
        return ZeroTrap(
            tight,
            f"zero trap: {still} passes even at atol={new_atol:.3g} (rtol={rtol:g}); "
            "this output is uninformative at this tolerance",
            informative=False,
        )
    return ZeroTrap(
        tight,
        f"zero trap: {trivial} would pass at atol={atol:.3g}; "
        f"atol tightened to {new_atol:.3g} (rtol * rms of the reference)",
    )
