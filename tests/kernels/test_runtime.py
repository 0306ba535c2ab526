"""runtime.py end to end on CPU: nvcc builds host-loop launchers, load_kernels binds them, calls check args.

The `kernel_runtime` fixture forces host-only mode (as on CI), so these also run on a GPU machine;
the tests marked gpu cover the CUDA path.
"""

from __future__ import annotations

import ast
import importlib.util
import shutil
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from cuda_agent.kernels import runtime as runtime_source

CHECKS = """\
#include <cuda_runtime.h>
#include <cstdint>
extern "C" int status(int code, cudaStream_t s) { return code; }
extern "C" cudaError_t cuda_status(int code, cudaStream_t s) { return static_cast<cudaError_t>(code); }
extern "C" int is_null(const float* p, cudaStream_t s) { return p == nullptr ? 0 : 7; }
extern "C" void byte_count(const void* any, int64_t* out, int64_t nbytes, cudaStream_t s) { out[0] = nbytes; }
extern "C" void pack(int8_t a, uint8_t b, bool c, double d, uint64_t e, int64_t* out, cudaStream_t s) {
  out[0] = a; out[1] = b; out[2] = c; out[3] = (int64_t)d; out[4] = (int64_t)(e >> 60);
}
"""


@pytest.fixture
def saxpy(prebuilt, saxpy_source, kernel_runtime):
    return kernel_runtime.load_kernels(prebuilt("saxpy.cu", saxpy_source).out_dir).saxpy


@pytest.fixture
def checks(prebuilt, kernel_runtime):
    return kernel_runtime.load_kernels(prebuilt("checks.cu", CHECKS).out_dir)


def test_saxpy_end_to_end_on_cpu(saxpy):
    x = torch.randn(1000)
    y = torch.randn(1000)
    expected = 2.5 * x + y
    assert saxpy(x, y, 2.5, x.numel()) is None
    torch.testing.assert_close(y, expected)
    assert saxpy.__name__ == "saxpy" and saxpy.__doc__ == "saxpy(x, y, a, n): kernels/saxpy.cu:10"


def test_scalars_accept_python_and_numpy_numbers(saxpy):
    x, y = torch.ones(4), torch.zeros(4)
    saxpy(x, y, 2, np.int64(4))  # int for float, numpy int for int64_t
    saxpy(x, torch.nn.Parameter(y, requires_grad=False), np.float32(1.5), 4)  # a Parameter is a tensor
    torch.testing.assert_close(y, torch.full((4,), 3.5))


@pytest.mark.parametrize(
    ("args", "error", "message"),
    [
        (lambda x, y: (x, y, 2.0), TypeError,
         "saxpy(x, y, a, n) takes 4 arguments (the stream is passed for you), got 3"),
        (lambda x, y: (x.double(), y, 2.0, 4), TypeError,
         "saxpy: parameter 'x' (const float*) expects a contiguous CPU tensor of torch.float32, got torch.float64"),
        (lambda x, y: (x, y.view(2, 2).t(), 2.0, 4), ValueError,
         "saxpy: parameter 'y' (float*) expects a contiguous CPU tensor of torch.float32, got a non-contiguous"),
        (lambda x, y: (x, [1.0], 2.0, 4), TypeError, "parameter 'y' (float*) expects a contiguous CPU tensor"),
        (lambda x, y: (x, y.to("meta"), 2.0, 4), ValueError, "(no CUDA here: host-only mode), got meta"),
        (lambda x, y: (x, y, 2.0, 4.0), TypeError,
         "saxpy: parameter 'n' (int64_t) expects a Python int, got float 4.0"),
        (lambda x, y: (x, y, 2.0, 2**63), OverflowError,
         "parameter 'n' (int64_t) expects an integer in [-9223372036854775808"),
        (lambda x, y: (x, y, torch.tensor(2.0), 4), TypeError,
         "parameter 'a' (float) expects a Python float, got a tensor"),
        (lambda x, y: (x, y, "2", 4), TypeError, "parameter 'a' (float) expects a Python float, got str '2'"),
    ],
)  # fmt: skip
def test_bad_arguments_raise_one_clear_line(saxpy, args, error, message):
    x, y = torch.ones(4), torch.zeros(4)
    with pytest.raises(error) as info:
        saxpy(*args(x, y))
    assert message in str(info.value)
    assert "\n" not in str(info.value)
    assert torch.equal(y, torch.zeros(4))  # nothing ran


LAUNCHING = """\
#include <cuda_runtime.h>
#include <cstdint>
__global__ void saxpy_kernel(const float* x, float* y, float a, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
extern "C" void launch_saxpy(const float* x, float* y, float a, int64_t n, cudaStream_t stream) {
  saxpy_kernel<<<(unsigned)((n + 255) / 256), 256, 0, stream>>>(x, y, a, n);
}
extern "C" void host_saxpy(const float* x, float* y, float a, int64_t n, cudaStream_t stream) {
  for (int64_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}
"""


@pytest.mark.skipif(torch.cuda.is_available(), reason="a launch on host memory could fault a GPU's context")
def test_host_only_a_kernel_launch_raises_saying_why_and_a_host_loop_beside_it_runs(prebuilt, kernel_runtime):
    """Host-only mode: a launcher that launches a __global__ kernel did nothing (no GPU), and says so
    in one line, without CUDA's error string (it blames the driver there); a host loop in the same
    library runs, before and after."""
    kernels = kernel_runtime.load_kernels(prebuilt("launching.cu", LAUNCHING).out_dir)
    x, y = torch.ones(8), torch.zeros(8)
    kernels.host_saxpy(x, y, 2.0, 8)
    expected = (
        r"^launch_saxpy launched a CUDA kernel: it needs a GPU \(host-only mode, no GPU or --device cpu, "
        r"runs launchers on the host, where no kernel runs\); launchers must loop on the host here$"
    )
    for a in (2.0, np.float32(2.0)):  # the fast path, and the checked one
        with pytest.raises(RuntimeError, match=expected):
            kernels.launch_saxpy(x, y, a, 8)
    kernels.host_saxpy(x, y, 2.0, 8)  # the count starts again at each call
    assert torch.equal(y, torch.full((8,), 4.0))


def test_unknown_launcher_lists_the_known_ones(checks):
    with pytest.raises(AttributeError, match=r"no launcher named 'relu' in libkernels-\w+\.so \(launchers: status,"):
        checks.relu
    assert list(checks) == ["status", "cuda_status", "is_null", "byte_count", "pack"]
    assert "pack" in checks and checks["pack"] is checks.pack and len(checks) == 5


def test_non_zero_returns_raise(checks):
    checks.status(0)
    with pytest.raises(RuntimeError, match=r"^status returned 3 \(3\)$"):
        checks.status(3)
    checks.cuda_status(0)
    with pytest.raises(RuntimeError, match=r"cuda_status returned 1 \(cudaErrorInvalidValue: invalid argument\)"):
        checks.cuda_status(1)


def test_none_is_null_and_void_pointer_takes_any_dtype(checks):
    checks.is_null(None)
    with pytest.raises(RuntimeError, match="is_null returned 7"):
        checks.is_null(torch.zeros(1))
    with pytest.raises(TypeError, match="'p' \\(const float\\*\\) expects a contiguous CPU tensor of torch.float32"):
        checks.is_null(torch.zeros(1, dtype=torch.int32))
    out = torch.zeros(1, dtype=torch.int64)
    for t in (torch.zeros(3, dtype=torch.uint8), torch.zeros(3, dtype=torch.bfloat16)):
        checks.byte_count(t, out, t.nbytes)
        assert out.item() == t.nbytes


def test_integer_ranges_follow_the_c_type(checks):
    out = torch.zeros(5, dtype=torch.int64)
    checks.pack(-128, 255, True, 2.0, 2**64 - 1, out)
    assert out.tolist() == [-128, 255, 1, 2, 15]
    for bad in [(128, 0), (-129, 0), (0, 256), (0, -1)]:
        with pytest.raises(OverflowError):
            checks.pack(*bad, False, 0.0, 0, out)
    with pytest.raises(OverflowError, match=r"'e' \(uint64_t\) expects an integer in \[0, 18446744073709551615\]"):
        checks.pack(0, 0, False, 0.0, -1, out)
    with pytest.raises(TypeError, match="'c' \\(bool\\) expects a bool, got int 2"):
        checks.pack(0, 0, 2, 0.0, 0, out)


def test_missing_build_dir_says_to_compile_first(kernel_runtime, tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="no launchers.json in .*: compile the kernels first"):
        kernel_runtime.load_kernels(tmp_path / "nowhere")
    monkeypatch.setenv("CUDA_AGENT_KERNELS", str(tmp_path / "from-env"))
    with pytest.raises(FileNotFoundError, match="from-env"):
        kernel_runtime.load_kernels()


def test_spec_naming_a_missing_library(kernel_runtime, candidate, build, saxpy_source, tmp_path):
    candidate.write("saxpy.cu", saxpy_source)
    out = tmp_path / "out"
    result = build(out_dir=out)
    result.lib_path.unlink()
    with pytest.raises(FileNotFoundError, match="is missing .*compile the kernels again"):
        kernel_runtime.load_kernels(out)


def test_copied_runtime_finds_its_build_dir_and_model_new_uses_it(
    candidate, build, saxpy_source, tmp_path, monkeypatch
):
    # A drop-in result: runtime.py copied next to build/, model_new.py importing it as kernel_runtime.
    import torch as torch_module

    monkeypatch.setattr(torch_module.cuda, "is_available", lambda: False)
    monkeypatch.delenv("CUDA_AGENT_KERNELS", raising=False)
    drop = tmp_path / "dropin"
    drop.mkdir()
    shutil.copy(runtime_source.__file__, drop / "kernel_runtime.py")
    candidate.write("saxpy.cu", saxpy_source)
    assert build(out_dir=drop / "build").ok
    (drop / "model_new.py").write_text(
        textwrap.dedent(
            """\
            import torch
            import torch.nn as nn
            import kernel_runtime

            kernels = kernel_runtime.load_kernels()

            class ModelNew(nn.Module):
                def forward(self, x, y):
                    out = y.clone()
                    kernels.saxpy(x, out, 3.0, x.numel())
                    return out
            """
        )
    )
    monkeypatch.syspath_prepend(str(drop))
    for name in ("kernel_runtime", "model_new"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    spec = importlib.util.spec_from_file_location("model_new", drop / "model_new.py")
    model_new = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model_new)
    x, y = torch.randn(64), torch.randn(64)
    torch.testing.assert_close(model_new.ModelNew()(x, y), 3.0 * x + y)


def test_runtime_imports_only_torch_and_the_standard_library():
    tree = ast.parse(Path(runtime_source.__file__).read_text())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add((node.module or "").split(".")[0])
    assert imported <= {"__future__", "ctypes", "json", "os", "pathlib", "torch"}, imported


# --- the CUDA path (the GPU machine) -------------------------------------------------------------

GPU_KERNELS = """\
#include <cuda_runtime.h>
#include <cstdint>
__global__ void add_one_kernel(float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] += 1.0f;
}
__global__ void stream_kernel(int64_t* out, int64_t value) { out[0] = value; }
extern "C" void add_one(float* y, int64_t n, int threads, cudaStream_t s) {
  add_one_kernel<<<(unsigned)((n + threads - 1) / threads), threads, 0, s>>>(y, n);
}
extern "C" void which_stream(int64_t* out, cudaStream_t s) {
  stream_kernel<<<1, 1, 0, s>>>(out, (int64_t)(intptr_t)s);
}
"""


@pytest.fixture
def gpu_kernels(prebuilt):
    spec = importlib.util.spec_from_file_location("kernel_runtime_gpu", runtime_source.__file__)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.load_kernels(prebuilt("gpu.cu", GPU_KERNELS).out_dir)


@pytest.mark.gpu
def test_gpu_launch_uses_the_current_stream(gpu_kernels):
    y = torch.zeros(1000, device="cuda")
    gpu_kernels.add_one(y, y.numel(), 256)
    torch.cuda.synchronize()
    assert torch.equal(y, torch.ones_like(y))
    out = torch.zeros(1, dtype=torch.int64, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        gpu_kernels.which_stream(out)
    side.synchronize()
    assert out.item() == side.cuda_stream


@pytest.mark.gpu
def test_gpu_bad_launch_config_raises_at_the_call(gpu_kernels):
    y = torch.zeros(10, device="cuda")
    # > 1024 threads a block: CUDA 13 reports cudaErrorInvalidValue, older ones InvalidConfiguration
    with pytest.raises(RuntimeError, match=r"^add_one: CUDA error at launch: cudaErrorInvalid(Value|Configuration)"):
        gpu_kernels.add_one(y, y.numel(), 4096)
    gpu_kernels.add_one(y, y.numel(), 32)  # the error was cleared: the next call works
    torch.cuda.synchronize()
    assert torch.equal(y, torch.ones_like(y))


@pytest.mark.gpu
def test_gpu_rejects_cpu_tensors(gpu_kernels):
    expected = "'y' \\(float\\*\\) expects a contiguous CUDA tensor of torch.float32, got a tensor on cpu"
    with pytest.raises(ValueError, match=expected):
        gpu_kernels.add_one(torch.zeros(4), 4, 32)
