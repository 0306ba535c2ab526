"""Edit -> callable latency: build_kernels (rebuild after an edit, cache hit) vs torch's load_inline.

DESIGN decision 1 rests on these numbers: load_inline compiles torch headers every time (~45 s on
the H200 machine), plain nvcc on one small .cu takes about a second, a cache hit none at all.
Each measurement includes loading the result into this process, so both sides end with a callable.

    python benchmarks/build_latency.py                      # all three (load_inline needs CUDA torch)
    python benchmarks/build_latency.py --reps 10 --skip-load-inline
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from cuda_agent.kernels.build import build_kernels
from cuda_agent.kernels.toolkit import detect_arch

KERNEL = """\
#include <cuda_runtime.h>
#include <cstdint>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * SCALE;
}

extern "C" void scale(const float* x, float* y, int64_t n, cudaStream_t stream) {
  scale_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, n);
}
"""

INLINE_CUDA = """\
#include <torch/extension.h>

__global__ void scale_kernel(const float* __restrict__ x, float* __restrict__ y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] * SCALE;
}

torch::Tensor scale(torch::Tensor x) {
  auto y = torch::empty_like(x);
  int64_t n = x.numel();
  scale_kernel<<<(unsigned)((n + 255) / 256), 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
  return y;
}
"""


def source(rep: int) -> str:
    # The one-line change: a different constant each rep, so nvcc must really recompile.
    return f"#define SCALE {1.0 + rep * 1e-3:.4f}f\n" + KERNEL


def build_and_load(kernel_dir: Path, cache: Path, arch: str, runtime) -> tuple[float, bool]:
    start = time.perf_counter()
    result = build_kernels(kernel_dir, cache, arch=arch)
    if not result.ok:
        raise SystemExit(f"build failed:\n{result.errors}")
    if runtime is not None:
        runtime.load_kernels(result.out_dir)
    return time.perf_counter() - start, result.cached


def load_inline_once(rep: int, workdir: Path) -> float:
    from torch.utils.cpp_extension import load_inline

    build_dir = workdir / f"inline-{rep}"
    build_dir.mkdir()
    start = time.perf_counter()
    load_inline(
        name=f"scale_inline_{rep}",
        cpp_sources="torch::Tensor scale(torch::Tensor x);",
        cuda_sources=f"#define SCALE {1.0 + rep * 1e-3:.4f}f\n" + INLINE_CUDA,
        functions=["scale"],
        build_directory=str(build_dir),
        extra_cuda_cflags=["-O3"],
        verbose=False,
    )
    return time.perf_counter() - start


def load_runtime():
    try:
        import importlib.util

        path = Path(__file__).resolve().parents[1] / "cuda_agent" / "kernels" / "runtime.py"
        spec = importlib.util.spec_from_file_location("kernel_runtime", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    except ImportError:
        return None  # no torch: time the build alone


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5, help="reps of each build_kernels measurement")
    parser.add_argument("--inline-reps", type=int, default=2, help="reps of load_inline (each ~45 s)")
    parser.add_argument("--skip-load-inline", action="store_true")
    args = parser.parse_args()

    arch = detect_arch()
    runtime = load_runtime()
    rows: list[tuple[str, list[float]]] = []
    with tempfile.TemporaryDirectory(prefix="build-latency-") as tmp:
        work = Path(tmp)
        kernel_dir = work / "candidate" / "kernels"
        kernel_dir.mkdir(parents=True)
        cache = work / "cache"

        (kernel_dir / "scale.cu").write_text(source(0))
        cold, _ = build_and_load(kernel_dir, cache, arch, runtime)  # also compiles the support object
        rows.append(("build_kernels, cold cache (kernel + support object)", [cold]))

        edited = []
        for rep in range(1, args.reps + 1):
            (kernel_dir / "scale.cu").write_text(source(rep))
            seconds, cached = build_and_load(kernel_dir, cache, arch, runtime)
            assert not cached, "an edited kernel must recompile"
            edited.append(seconds)
        rows.append(("(a) build_kernels, one-line edit", edited))

        hits = []
        for _ in range(args.reps):
            seconds, cached = build_and_load(kernel_dir, cache, arch, runtime)
            assert cached, "an unchanged kernel must be a cache hit"
            hits.append(seconds)
        rows.append(("(b) build_kernels, unchanged (cache hit)", hits))

        if args.skip_load_inline:
            pass
        elif runtime is None or not _cuda_torch():
            print("load_inline skipped: it needs a CUDA build of torch (this torch has none)")
        else:
            inline = [load_inline_once(rep, work) for rep in range(args.inline_reps)]
            rows.append(("(c) torch load_inline, fresh build dir", inline))

    report(rows, arch)


def _cuda_torch() -> bool:
    import torch

    return torch.version.cuda is not None


def report(rows: list[tuple[str, list[float]]], arch: str) -> None:
    medians = {label: statistics.median(values) for label, values in rows}
    print(f"\nbuild latency, arch {arch}, each including the load into this process\n")
    print("| build | reps | median s | min s | max s |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, values in rows:
        print(f"| {label} | {len(values)} | {medians[label]:.4f} | {min(values):.4f} | {max(values):.4f} |")
    edit = next(m for label, m in medians.items() if label.startswith("(a)"))
    hit = next(m for label, m in medians.items() if label.startswith("(b)"))
    inline = next((m for label, m in medians.items() if label.startswith("(c)")), None)
    print()
    if inline is not None:
        print(f"load_inline / edit rebuild: {inline / edit:.1f}x   load_inline / cache hit: {inline / hit:.0f}x")
    print(f"edit rebuild / cache hit: {edit / hit:.0f}x")


if __name__ == "__main__":
    main()
