"""The parent's checks on what a judge's call left in the parent's memory: outputs, inputs, timed
outputs, and the judge's thread count (read from /proc, outside the jail). Everything here runs in
the parent, on memory it allocated itself.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from cuda_agent.eval.compare import compare_output
from cuda_agent.eval.precision import downgrade_signature, precision_finding
from cuda_agent.eval.tolerance import Tolerances
from cuda_agent.eval.verdict import Finding, OutputCheck, SetResult
from cuda_agent.eval.zero_trap import zero_trap as _zero_trap


class OutputMeta(BaseModel):
    """What the checked plan says of one output forward returns (batch.output_meta): checked
    against the reference's own shape, dtype and strides before its values are compared."""

    model_config = ConfigDict(extra="forbid")

    plain: bool = False
    type: str = "?"
    shape: list[int] | None = None
    stride: list[int] | None = None
    dtype: str | None = None


def build(candidate_dir: Path, cache_dir: Path, arch: str | None) -> tuple[Any, str | None]:
    """Build the candidate's kernels/ (if any); returns (BuildResult or None, error text or None)."""
    from cuda_agent.kernels.build import build_kernels

    kdir = candidate_dir / "kernels"
    if not kdir.is_dir() or not any(kdir.glob("*.cu")):
        return None, None
    try:
        result = build_kernels(kdir, cache_dir, arch=arch)
    except Exception as e:  # nvcc missing, a launcher signature we cannot bind...
        return None, f"{type(e).__name__}: {e}"
    return result, (None if result.ok else (result.errors or "the build failed"))


def judged_files(candidate_dir: Path, build: Any) -> dict[str, str]:
    """Verdict.judged_files: model_new.py and each file of the candidate's that the build read
    (relative to candidate_dir; the toolkit's and system headers are not the candidate's) -> sha256."""
    from cuda_agent.kernels.depfile import file_sha

    inputs = build.inputs if build is not None else {}
    files = {name: sha for name, sha in inputs.items() if not Path(name).is_absolute()}
    try:
        files["model_new.py"] = file_sha(candidate_dir / "model_new.py", candidate_dir)
    except OSError:  # none, or no plain file: the recorder says so
        pass
    return files


def spec(build: Any) -> dict:
    """The launchers.json the build wrote (the harness parsed it from the sources)."""
    import json

    if build is None or not build.spec_path:
        return {}
    return json.loads(Path(build.spec_path).read_text())


def own_kernels(build: Any) -> list[str]:
    return list(spec(build).get("kernels", []))


def audit_native(build: Any, extra_symbols: list[str]) -> list[Finding]:
    """What the built library may do natively: symbols, load-time code, static state."""
    from cuda_agent.eval.guards.native import audit_library

    return audit_library(build, extra_symbols=extra_symbols)


def new_threads(before: int, after: int) -> list[Finding]:
    """Threads the judge's process tree gained, counted from outside the jail (/proc)."""
    from cuda_agent.eval.dynamic_guards import thread_findings

    return thread_findings(after - before)


def libraries(build: Any) -> set[str]:
    """Vendor libraries the candidate links (cuBLAS / cuDNN kernels are then allowed)."""
    flags = " ".join(getattr(build, "commands", None) or []).split()
    return {
        "cudnn" if m.group(1) == "cudnn" else "cublas"
        for flag in flags
        if (m := re.match(r"-l(cublas|cublasLt|cudnn)$", flag))
    }


def memory_problem(eager_bytes: int, budget_bytes: int) -> str | None:
    """Why a task cannot be evaluated within the budget, before any candidate runs. The parent's
    float64 reference takes about twice an eager forward's memory (its parameters, one input set,
    its temporaries and outputs), while the judge waits empty; then the judge runs the candidate
    (about one eager forward) beside the fp32 reference outputs: three eager forwards bound both."""
    need = 3 * eager_bytes
    if need <= budget_bytes:
        return None
    return (
        f"unscorable: needs about {need / 2**30:.1f} GiB of GPU memory (three times the task's eager "
        f"forward, {eager_bytes / 2**30:.1f} GiB: the float64 reference twice, the candidate once), budget "
        f"{budget_bytes / 2**30:.1f} GiB; free the GPU or raise --memory-budget"
    )


def zero_trap(ref32: Any, ref64: Any, tol: Tolerances) -> tuple[Tolerances, str | None]:
    """Tolerances for one output, tightened when all-zero or constant outputs would pass; the note
    says so, or that the output cannot tell a kernel from a constant at all."""
    trap = _zero_trap(ref32, ref64, tol)
    note = trap.note
    if note and not trap.informative:
        note += " (its check proves little: the other outputs and input sets carry the verdict)"
    return trap.tol, note


def check_set(
    seed: int,
    meta: list[OutputMeta],
    bufs: list,
    ref32: list,
    ref64: list | None,
    out_tols: dict,
    tol: Tolerances,
    fp32: bool,
    allow_precision: bool,
    probe: list | None = None,
) -> tuple[SetResult, list[Finding]]:
    """Compare the outputs in `bufs` (views of the parent's own block, or copies of them) with the
    references, after checking what the checked plan says of them (`meta`, one per output);
    `probe` is Reference.downgrade_probe's for this set (the TF32 signature), or None. Returns the
    set's result and what it found (a subclass output, a precision downgrade)."""
    outputs: list[OutputCheck] = []
    found: list[Finding] = []
    if len(meta) != len(ref32) or len(bufs) != len(ref32):
        return SetResult(
            seed=seed, ok=False, error=f"forward returned {len(meta)} output(s); the reference returns {len(ref32)}"
        ), found
    for j, (m, buf, r) in enumerate(zip(meta, bufs, ref32)):
        want_shape, want_dtype = list(r.shape), str(r.dtype).removeprefix("torch.")
        reason = None
        if not m.plain:
            reason = f"output is a {m.type}, not a plain torch.Tensor"
            found.append(
                Finding(
                    guard="tensor_subclass",
                    message=(f"output {j} is a {m.type}: return plain tensors your kernels wrote"),
                )
            )
        elif m.shape != want_shape:
            reason = f"shape {m.shape} != reference {want_shape}"
        elif m.dtype != want_dtype:
            reason = f"dtype {m.dtype} != reference {want_dtype}"
        elif r.is_contiguous() and m.stride != list(r.stride()):
            reason = f"strides {m.stride} != reference {list(r.stride())} (return contiguous outputs)"
        if reason:
            outputs.append(OutputCheck(index=j, ok=False, shape=m.shape or [], dtype=m.dtype or "?", reason=reason))
            continue
        r64 = ref64[j] if ref64 else None
        check = compare_output(j, buf, r, r64, out_tols.get(j, tol))
        outputs.append(check)
        p = probe[j] if fp32 and probe and r64 is not None else None
        sig = downgrade_signature(buf, r64, p) if p is not None and r64 is not None else None
        finding = precision_finding(check, tol, task_fp32=fp32, allow_precision=allow_precision, signature=sig)
        if finding and finding not in found:
            found.append(finding)
    return SetResult(seed=seed, ok=all(o.ok for o in outputs), outputs=outputs), found


def timed_output_mismatch(
    k: int, bufs: list, ref32: list, ref64: list | None, out_tols: dict[int, Tolerances], tol: Tolerances
) -> Finding | None:
    """The timed reps must compute what the checked runs computed: timing set k's last outputs."""
    for j, (buf, r) in enumerate(zip(bufs, ref32)):
        check = compare_output(j, buf, r, ref64[j] if ref64 else None, out_tols.get(j, tol))
        if not check.ok:
            return Finding(
                guard="timed_output_mismatch",
                message=(
                    f"output {j} of the timed runs on input set {k} was wrong ({check.reason}) although the "
                    "checked runs were right: a kernel must compute the same result on every call"
                ),
            )
    return None
