"""The runtime module's surface (only load_kernels for model_new.py) and the harness's own binding
(cuda_agent.kernels.binding: load_spec + bind_library through the runtime's private entry)."""

from __future__ import annotations

import importlib.util
import json
import types
from pathlib import Path

import pytest
import torch

from cuda_agent.kernels import binding
from cuda_agent.kernels.launchers import SPEC_NAME

RUNTIME_PATH = Path(__file__).resolve().parents[2] / "cuda_agent" / "kernels" / "runtime.py"


def fresh_runtime(name: str = "kernel_runtime_surface"):
    spec = importlib.util.spec_from_file_location(name, RUNTIME_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_runtime_namespace_holds_load_kernels_and_no_modules():
    runtime = fresh_runtime()
    names = [n for n in vars(runtime) if not n.startswith("__")]
    assert names == ["load_kernels", "_load_spec", "_bind_library", "_DTYPES", "_SCALARS"]
    assert [n for n in names if not n.startswith("_")] == ["load_kernels"]
    for attr in ("ctypes", "os", "json", "torch", "Path", "Kernels", "SPEC_NAME", "_bind", "_check", "_runtime"):
        with pytest.raises(AttributeError):
            getattr(runtime, attr)
    assert not [n for n, v in vars(runtime).items() if isinstance(v, (types.ModuleType, type))]
    assert all(isinstance(t, str) for t in runtime._DTYPES | runtime._SCALARS)


def test_kernels_object_holds_only_its_launchers(prebuilt, saxpy_source, kernel_runtime):
    kernels = kernel_runtime.load_kernels(prebuilt("saxpy.cu", saxpy_source).out_dir)
    assert list(vars(kernels)) == ["saxpy"]  # no library path, spec or ctypes handle to reach
    assert repr(kernels).startswith("Kernels(libkernels-") and repr(kernels).endswith(": saxpy)")
    assert "saxpy" in dir(kernels) and list(kernels) == ["saxpy"] and len(kernels) == 1
    with pytest.raises(AttributeError, match="no launcher named '_library'"):
        kernels._library


def test_load_spec_then_bind_library(prebuilt, saxpy_source):
    out = prebuilt("saxpy.cu", saxpy_source).out_dir
    library, spec = binding.load_spec(out)
    assert library.is_file() and library.parent == out and [f["name"] for f in spec["launchers"]] == ["saxpy"]
    assert binding.load_spec(out / SPEC_NAME) == (library, spec)  # the spec file itself works too
    launchers = binding.bind_library(library, spec, cuda=False)
    assert list(launchers) == ["saxpy"]
    x, y = torch.ones(8), torch.zeros(8)
    launchers["saxpy"](x, y, 2.0, 8)
    torch.testing.assert_close(y, torch.full((8,), 2.0))
    with pytest.raises(TypeError, match=r"saxpy\(x, y, a, n\) takes 4 arguments"):
        launchers["saxpy"](x, y, 2.0)


def test_the_harness_binding_is_not_the_candidates_module(prebuilt, saxpy_source, monkeypatch):
    # A candidate's kernel_runtime is a module of its own: nothing done to it reaches the harness's.
    candidate_runtime = fresh_runtime("kernel_runtime")
    monkeypatch.setattr(candidate_runtime, "_bind_library", lambda *a: {"saxpy": print})
    library, spec = binding.load_spec(prebuilt("saxpy.cu", saxpy_source).out_dir)
    assert binding.bind_library(library, spec, cuda=False)["saxpy"] is not print


def test_load_spec_errors_match_load_kernels(tmp_path, prebuilt, saxpy_source):
    with pytest.raises(FileNotFoundError, match="no launchers.json in .*: compile the kernels first"):
        binding.load_spec(tmp_path / "nowhere")
    spec = json.loads((prebuilt("saxpy.cu", saxpy_source).out_dir / SPEC_NAME).read_text())
    (tmp_path / SPEC_NAME).write_text(json.dumps({**spec, "version": 99}))
    with pytest.raises(RuntimeError, match="has version 99, this runtime reads 1: compile again"):
        binding.load_spec(tmp_path)
    (tmp_path / SPEC_NAME).write_text(json.dumps(spec))
    with pytest.raises(FileNotFoundError, match="is missing .*compile the kernels again"):
        binding.load_spec(tmp_path)


GPU_ADD_ONE = """\
#include <cuda_runtime.h>
#include <cstdint>
__global__ void add_one_kernel(float* y, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] += 1.0f;
}
extern "C" void add_one(float* y, int64_t n, cudaStream_t s) {
  add_one_kernel<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(y, n);
}
"""


@pytest.mark.gpu
def test_bind_library_on_cuda_launches_on_the_current_stream(prebuilt):
    library, spec = binding.load_spec(prebuilt("add_one_gpu.cu", GPU_ADD_ONE).out_dir)
    add_one = binding.bind_library(library, spec, cuda=True)["add_one"]
    y = torch.zeros(1000, device="cuda")
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        add_one(y, y.numel())
    side.synchronize()
    assert torch.equal(y, torch.ones_like(y))
    with pytest.raises(ValueError, match="expects a contiguous CUDA tensor of torch.float32, got a tensor on cpu"):
        add_one(torch.zeros(4), 4)
