"""Compare one candidate output with the reference, judged against float64 truth.

The gate for element i (docs/correctness.md):

    |out - ref64| <= atol + rtol * |ref64| + ref_error_factor * max(|ref32 - ref64|, rms(ref32 - ref64))

ref32 is the reference in the task's own dtype (what KernelBench compares against), ref64
the same module run in float64. Judging against ref64 lets a kernel that sums in another
order pass where it disagrees with ref32's own rounding, while a real downgrade (fp16,
tf32) is orders of magnitude above the slack. The rms term is there because the honest
kernel's rounding error is independent of the reference's: against |ref32 - ref64| alone,
about 4% of elements (|Cauchy| > 16) would fail wherever rounding error exceeds atol. Pure torch,
CPU or CUDA, and chunked: at most a few chunk-sized float64 temporaries exist at once, whatever the
output size (tensor_walk.py). Whether the error is also a precision downgrade is precision.py's
call; zero_trap.py tightens atol where a trivial output would pass.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from cuda_agent.eval.tensor_walk import chunks, index_of, is_exact, real_view, walk_order
from cuda_agent.eval.tolerance import Tolerances
from cuda_agent.eval.verdict import OutputCheck

CHUNK_ELEMS = 1 << 22  # 32 MiB per float64 temporary


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _layout_problem(out: object, ref: torch.Tensor) -> str | None:
    """Why `out` can't be compared elementwise with `ref`, or None."""
    if type(out) is not torch.Tensor:  # subclasses can defer or fake their values
        return f"output is a {type(out).__name__}, not a plain torch.Tensor; return the tensor itself"
    if out.layout != torch.strided or out.is_meta:
        return f"output has layout {out.layout} (meta={out.is_meta}); return a dense strided tensor"
    if tuple(out.shape) != tuple(ref.shape):
        return f"shape {tuple(out.shape)} != reference {tuple(ref.shape)}"
    if out.dtype != ref.dtype:
        return f"dtype {_dtype_name(out.dtype)} != reference {_dtype_name(ref.dtype)}"
    # Strides of size-1 dims carry no meaning, so they may differ.
    mine = [s for s, n in zip(out.stride(), out.shape) if n > 1]
    theirs = [s for s, n in zip(ref.stride(), ref.shape) if n > 1]
    if mine != theirs:
        return (
            f"strides {tuple(out.stride())} != reference {tuple(ref.stride())}; "
            "allocate the output with the reference's layout (e.g. torch.empty_like on a contiguous input)"
        )
    return None


@dataclass
class _Acc:
    """Running statistics over chunks, as Python floats."""

    n: int = 0
    mismatched: int = 0
    nonfinite_bad: int = 0
    max_abs: float = 0.0
    max_rel: float = 0.0
    sq_err: float = 0.0
    sq_truth: float = 0.0
    sq_ref_err: float = 0.0
    worst_ratio: float = -1.0
    worst: tuple[int, float, float, float] | None = None  # walk position, got, expected, allowed
    first_nonfinite: tuple[int, float, float] | None = None


def ref_err_rms(ref32: torch.Tensor, ref64: torch.Tensor | None, limit: int) -> float:
    """Root mean square of the reference's own error, over elements finite in both."""
    if ref64 is None or is_exact(ref32.dtype):
        return 0.0
    r32, r64 = real_view(ref32), real_view(ref64)
    sq, n = 0.0, 0
    for a, b in chunks([r32, r64], walk_order(r32), limit):
        d = a.to(torch.float64) - b.to(device=a.device, dtype=torch.float64)
        d = d[torch.isfinite(d)]
        sq += float((d * d).sum())
        n += d.numel()
    return math.sqrt(sq / n) if n else 0.0


def scan(
    out: torch.Tensor | float,
    ref32: torch.Tensor,
    ref64: torch.Tensor | None,
    rtol: float,
    atol: float,
    k: float,
    floor: float,
    limit: int,
    stop_early: bool = False,
) -> tuple[_Acc, list[int]]:
    """Walk the gate over every element; `out` may be a constant (the trivial outputs).
    `floor` is the rms of the reference's error. Returns the statistics and the walk
    order (for turning positions into indices)."""
    const = None if isinstance(out, torch.Tensor) else float(out)
    exact = is_exact(ref32.dtype)
    tensors = ([] if const is not None else [real_view(out)]) + [real_view(ref32)]
    if ref64 is not None and not exact:  # integer outputs: ref32 is the truth
        tensors.append(real_view(ref64))
    device = tensors[0].device
    perm = walk_order(tensors[0])
    acc, pos = _Acc(), 0
    for parts in chunks(tensors, perm, limit):
        o_raw = parts.pop(0) if const is None else None
        r = parts[0].to(device=device, dtype=torch.float64)
        t = parts[1].to(device=device, dtype=torch.float64) if len(parts) > 1 else r
        o = torch.full_like(r, const) if o_raw is None else o_raw.to(torch.float64)
        # int64 beyond 2**53 doesn't survive float64, so integers compare in their own dtype
        neq = (o_raw != parts[0].to(device)) if (exact and o_raw is not None) else None
        _accumulate(acc, pos, o, r, t, rtol, atol, k, floor, neq)
        pos += r.numel()
        if stop_early and (acc.mismatched or acc.nonfinite_bad):
            break
    return acc, perm


def _accumulate(
    acc: _Acc,
    pos: int,
    o: torch.Tensor,
    r: torch.Tensor,
    t: torch.Tensor,
    rtol: float,
    atol: float,
    k: float,
    floor: float,
    exact_neq: torch.Tensor | None,
) -> None:
    acc.n += o.numel()
    fin_r, fin_o = torch.isfinite(r), torch.isfinite(o)
    if not (bool(fin_r.all()) and bool(fin_o.all())):
        # Where the reference is NaN/Inf the output must be the same NaN/Inf (Inf with its
        # sign); where it is finite the output must be finite.
        same = (torch.isnan(o) & torch.isnan(r)) | (o == r)
        bad_nf = (~fin_r & ~same) | (fin_r & ~fin_o)
        n_bad_nf = int(bad_nf.sum())
        if n_bad_nf:
            acc.nonfinite_bad += n_bad_nf
            if acc.first_nonfinite is None:
                i = int(bad_nf.nonzero()[0, 0])
                acc.first_nonfinite = (pos + i, float(o[i]), float(r[i]))
        both = fin_r & fin_o  # the error statistics cover these; zeroed elsewhere
        o, r, t = (torch.where(both, v, 0.0) for v in (o, r, t))
        if exact_neq is not None:
            exact_neq = exact_neq & both
    if not bool(torch.isfinite(t).all()):  # ref64 overflowed where ref32 did not: judge by ref32
        t = torch.where(torch.isfinite(t), t, r)
    err, mag, ref_err = (o - t).abs(), t.abs(), (r - t).abs()
    allowed = atol + rtol * mag + k * ref_err.clamp_min(floor)
    bad = exact_neq if exact_neq is not None else err > allowed
    n_bad = int(bad.sum())
    acc.mismatched += n_bad
    acc.max_abs = max(acc.max_abs, float(err.max()))
    acc.max_rel = max(acc.max_rel, float(torch.where(mag > 0, err / mag, 0.0).max()))
    acc.sq_err += float(torch.dot(err, err))
    acc.sq_truth += float(torch.dot(mag, mag))
    acc.sq_ref_err += float(torch.dot(ref_err, ref_err))
    if n_bad:  # the worst offender, for the message; -1 keeps passing elements out of the argmax
        ratio = torch.where(bad, err / allowed.clamp_min(1e-300), -1.0)
        j = int(ratio.argmax())
        if float(ratio[j]) > acc.worst_ratio:
            acc.worst_ratio = float(ratio[j])
            acc.worst = (pos + j, float(o[j]), float(t[j]), float(allowed[j]))


def _norm_rel(sq_err: float, sq_truth: float) -> float:
    if sq_truth == 0.0:
        return 0.0 if sq_err == 0.0 else math.inf
    return math.sqrt(sq_err / sq_truth)


def compare_output(
    index: int,
    out: torch.Tensor,
    ref32: torch.Tensor,
    ref64: torch.Tensor | None,
    tol: Tolerances,
    *,
    chunk_elems: int = CHUNK_ELEMS,
) -> OutputCheck:
    """Judge one output. `ref64` may be None (then ref32 is the truth); integer and bool
    outputs are compared exactly with ref32. Whether the error also counts as a precision
    downgrade is `precision_finding`'s call, from the numbers reported here."""
    shape, dtype = list(ref32.shape), _dtype_name(ref32.dtype)
    problem = _layout_problem(out, ref32)
    if problem:
        return OutputCheck(index=index, ok=False, shape=shape, dtype=dtype, reason=problem)
    if ref64 is not None and tuple(ref64.shape) != tuple(ref32.shape):
        raise ValueError(f"float64 reference shape {tuple(ref64.shape)} != {tuple(ref32.shape)}")
    rtol, atol = tol.for_dtype(out.dtype)
    floor = ref_err_rms(ref32, ref64, chunk_elems)
    acc, perm = scan(out, ref32, ref64, rtol, atol, tol.ref_error_factor, floor, chunk_elems)
    walk_shape = tuple(real_view(ref32).shape)
    reason = None
    if acc.nonfinite_bad:
        p, got, exp = acc.first_nonfinite
        reason = (
            f"{acc.nonfinite_bad} NaN/Inf mismatches with the reference (first at "
            f"{index_of(p, walk_shape, perm)}: got {got:.6g}, expected {exp:.6g})"
        )
    elif acc.mismatched:
        p, got, exp, allowed = acc.worst
        reason = (
            f"{acc.mismatched} of {acc.n} elements outside tolerance (worst at "
            f"{index_of(p, walk_shape, perm)}: got {got:.6g}, expected {exp:.6g}, "
            f"allowed error {allowed:.3g})"
        )
    return OutputCheck(
        index=index,
        ok=reason is None,
        shape=shape,
        dtype=dtype,
        max_abs_err=acc.max_abs,
        max_rel_err=acc.max_rel,
        norm_rel_err=_norm_rel(acc.sq_err, acc.sq_truth),
        ref_norm_rel_err=_norm_rel(acc.sq_ref_err, acc.sq_truth),
        mismatched=acc.mismatched + acc.nonfinite_bad,
        reason=reason,
    )
