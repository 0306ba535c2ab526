"""Guards that watch the candidate's forward run: the ATen ops it dispatched and the GPU
kernels it launched. The recording happens in the jailed recorder and judge; the checking (these functions on
plain lists of names) happens in the parent, which trusts only what it can re-check.
"""

from __future__ import annotations

import re
from collections import Counter

from cuda_agent.eval.plan import ALLOC_FILL, FILLS, VIEWS
from cuda_agent.eval.verdict import Finding

# Allocation, fills, views and metadata: the ops a launch plan can say (plan.py), one list for
# the recorder that sorts what forward dispatched and for this judgement of it.
ALLOWED_ATEN = frozenset(ALLOC_FILL) | FILLS | VIEWS


def aten_base(op: str) -> str:
    """'aten.relu.default' / 'aten::relu' -> 'relu'."""
    op = op.replace("::", ".")
    parts = op.split(".")
    return parts[1] if parts[0] == "aten" and len(parts) > 1 else parts[0]


def aten_findings(ops: list[str]) -> list[Finding]:
    bad = Counter(aten_base(o) for o in ops if aten_base(o) not in ALLOWED_ATEN)
    if not bad:
        return []
    names = ", ".join(f"{n} (x{c})" if c > 1 else n for n, c in bad.most_common(8))
    return [
        Finding(
            guard="aten_in_forward",
            message=f"forward ran torch compute: {names}; do this work in your own "
            "kernels (forward may only allocate outputs, take views and call launchers)",
        )
    ]


_LIB_PATTERNS = {
    "cublas": re.compile(r"gemm|gemv|cublas|cutlass|xmma|sgemm|dgemm|splitk|reduce_1block|dot_kernel", re.I),
    "cudnn": re.compile(r"cudnn|conv|implicit_gemm|winograd|xmma|fft", re.I),
}
_TORCH_FILL = re.compile(r"FillFunctor|fill_kernel", re.I)
_TORCH = re.compile(
    r"at::native|at::cuda|c10::|elementwise_kernel|reduce_kernel|FillFunctor|fill_kernel|^triton_", re.I
)
LIBRARY_NAMES = {"cublas": "cuBLAS", "cudnn": "cuDNN"}


def library_of(name: str) -> str | None:
    """Whose kernel a launched name looks like: "cuBLAS", "cuDNN", "torch", or None (by its name
    alone: check the candidate's own kernels first, as an own `sgemm_...` looks like cuBLAS)."""
    for lib, pattern in _LIB_PATTERNS.items():
        if pattern.search(name):
            return LIBRARY_NAMES[lib]
    return "torch" if _TORCH.search(name.strip().removeprefix("void ")) else None


def kernel_base(name: str) -> str:
    """Demangled profiler name -> the kernel's identifier ('void ns::k<float>(float*)' -> 'k')."""
    s = re.sub(r"^(void|__global__)\s+", "", name.strip())
    s = s.split("(", 1)[0]
    depth, out = 0, []
    for ch in s:  # drop template arguments, which may nest
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out).split("::")[-1].strip()


def kernel_findings(
    launched: list[str], own_kernels: list[str], libraries: set[str], allowed_torch: bool
) -> list[Finding]:
    """Each launched kernel must be the candidate's own, an allowed library's, or torch's fill
    behind an allowed zeros/fill_ (`allowed_torch`)."""
    own = set(own_kernels)
    foreign: Counter[str] = Counter()
    for name in launched:
        allowed = (
            kernel_base(name) in own
            or (allowed_torch and _TORCH_FILL.search(name))
            or any(_LIB_PATTERNS[lib].search(name) for lib in libraries if lib in _LIB_PATTERNS)
        )
        if not allowed:
            foreign[name[:120]] += 1
    if not foreign:
        return []
    names = "; ".join(foreign)
    return [
        Finding(
            guard="foreign_kernel",
            message=f"forward launched kernels that are not in your kernels/ sources: "
            f"{names}; all GPU work must be your own kernels (or cuBLAS/cuDNN called from them)",
        )
    ]


def thread_findings(threads_delta: int) -> list[Finding]:
    """Threads the judge's process tree gained once the library was loaded: work beside the call."""
    if threads_delta <= 0:
        return []
    return [
        Finding(
            guard="side_stream",
            message=(
                f"the judge's process had {threads_delta} more thread(s) after your code ran: do all work "
                "in the caller's thread, on the stream passed to your launcher"
            ),
        )
    ]
