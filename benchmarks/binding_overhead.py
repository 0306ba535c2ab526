"""Per-call cost of a runtime.py launcher vs a bare ctypes call of the same (empty) function.

The launcher checks dtype, contiguity and device of each tensor, range-checks the integers, gets
the current stream and, on CUDA, reads the library's last CUDA error: this measures what that
costs on top of ctypes itself. On a machine without CUDA it runs in host-only mode (CPU tensors).

    python benchmarks/binding_overhead.py [--calls 200000] [--repeat 7]
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import statistics
import tempfile
import time
from pathlib import Path

import torch

from cuda_agent.kernels.build import build_kernels

EMPTY = """\
#include <cuda_runtime.h>
#include <cstdint>
extern "C" void noop(const float* x, float* y, int64_t n, float alpha, cudaStream_t stream) {}
"""


def per_call_us(fn, calls: int, repeat: int) -> float:
    """Median over `repeat` timings of `calls` calls, in microseconds per call."""
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        samples.append((time.perf_counter() - start) / calls * 1e6)
    return statistics.median(samples)


def load_runtime():
    path = Path(__file__).resolve().parents[1] / "cuda_agent" / "kernels" / "runtime.py"
    spec = importlib.util.spec_from_file_location("kernel_runtime", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    cuda = torch.cuda.is_available()
    device = "cuda" if cuda else "cpu"
    with tempfile.TemporaryDirectory(prefix="binding-overhead-") as tmp:
        kernel_dir = Path(tmp) / "kernels"
        kernel_dir.mkdir()
        (kernel_dir / "noop.cu").write_text(EMPTY)
        result = build_kernels(kernel_dir, Path(tmp) / "cache")
        if not result.ok:
            raise SystemExit(f"build failed:\n{result.errors}")
        kernels = load_runtime().load_kernels(result.out_dir)

        x = torch.zeros(1024, device=device)
        y = torch.zeros(1024, device=device)
        n = x.numel()
        bare = ctypes.CDLL(str(result.lib_path)).noop
        bare.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_float, ctypes.c_void_p]
        bare.restype = None
        px, py = x.data_ptr(), y.data_ptr()
        stream = torch.cuda.current_stream().cuda_stream if cuda else None
        noop = kernels.noop

        calls = {
            "bare ctypes (pointers and stream precomputed)": lambda: bare(px, py, n, 2.0, stream),
            "ctypes + data_ptr() per call": lambda: bare(x.data_ptr(), y.data_ptr(), n, 2.0, stream),
            "runtime.py launcher (checked)": lambda: noop(x, y, n, 2.0),
        }
        rows = [(label, per_call_us(fn, args.calls, args.repeat)) for label, fn in calls.items()]
        if cuda:
            torch.cuda.synchronize()

    mode = f"CUDA ({torch.cuda.get_device_name()})" if cuda else "host-only (no CUDA: CPU tensors, NULL stream)"
    print(f"\nper-call overhead of an empty launcher, {mode}, torch {torch.__version__}\n")
    print("| call | median us/call |")
    print("| --- | ---: |")
    for label, us in rows:
        print(f"| {label} | {us:.2f} |")
    print(f"\nruntime.py adds {rows[2][1] - rows[0][1]:.2f} us a call over bare ctypes")


if __name__ == "__main__":
    main()
