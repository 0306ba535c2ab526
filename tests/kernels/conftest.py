"""Fixtures for the kernel build and runtime tests: candidates on disk, a warm cache, the runtime.

nvcc really runs here (CI has the toolkit, no GPU). The support object every library links is
compiled once per session and copied into each test's fresh cache, so a test pays only for the
sources it is about.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from cuda_agent.kernels.build import SUPPORT_SOURCE, build_kernels
from cuda_agent.kernels.toolkit import ToolkitError, find_nvcc

RUNTIME_PATH = Path(__file__).resolve().parents[2] / "cuda_agent" / "kernels" / "runtime.py"

SAXPY = """\
#include <cuda_runtime.h>
#include <cstdint>

__global__ void saxpy_kernel(const float* x, float* y, float a, int64_t n) {
  int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// Host loop: runs on a machine without a GPU (host-only mode).
extern "C" void saxpy(const float* x, float* y, float a, int64_t n, cudaStream_t stream) {
  for (int64_t i = 0; i < n; ++i) y[i] = a * x[i] + y[i];
}
"""


def _nvcc_or_skip() -> None:
    try:
        find_nvcc()
    except ToolkitError as exc:
        pytest.skip(str(exc))


class Candidate:
    """A candidate folder (kernels/*.cu) under a test's tmp_path."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.kernels = root / "kernels"
        self.kernels.mkdir(parents=True, exist_ok=True)

    def write(self, name: str, text: str) -> Path:
        path = self.kernels / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
        return path


@pytest.fixture(scope="session")
def warm_cache(tmp_path_factory) -> Path:
    """A cache holding the support object, compiled once for the session."""
    _nvcc_or_skip()
    cache = tmp_path_factory.mktemp("warm-cache")
    seed = Candidate(tmp_path_factory.mktemp("seed"))
    seed.write("seed.cu", 'extern "C" void seed(cudaStream_t s) {}\n')
    assert build_kernels(seed.kernels, cache).ok
    return cache


@pytest.fixture
def cache_dir(tmp_path, warm_cache) -> Path:
    """A fresh cache for this test, with only the support objects in it."""
    cache = tmp_path / "cache"
    (cache / "obj").mkdir(parents=True)
    for manifest in (warm_cache / "obj").glob("*.json"):
        entries = json.loads(manifest.read_text())["entries"]
        if all(SUPPORT_SOURCE.name in e["source"] for e in entries):
            for path in (manifest, *(manifest.with_name(f"{e['object']}.o") for e in entries)):
                shutil.copy2(path, cache / "obj" / path.name)
    return cache


@pytest.fixture(scope="session")
def prebuilt(warm_cache, tmp_path_factory):
    """prebuilt(file_name, source) -> BuildResult, built once per session (for tests that only call)."""
    built = {}

    def get(name: str, source: str):
        if (name, source) not in built:
            candidate = Candidate(tmp_path_factory.mktemp("prebuilt"))
            candidate.write(name, source)
            result = build_kernels(candidate.kernels, warm_cache)
            assert result.ok, result.errors
            built[name, source] = result
        return built[name, source]

    return get


@pytest.fixture
def saxpy_source() -> str:
    return SAXPY


@pytest.fixture
def candidate(tmp_path) -> Candidate:
    return Candidate(tmp_path / "candidate")


@pytest.fixture
def build(candidate, cache_dir):
    """build(**kwargs) -> BuildResult for the test's candidate and cache."""

    def run(**kwargs):
        return build_kernels(candidate.kernels, cache_dir, **kwargs)

    return run


@pytest.fixture
def kernel_runtime(monkeypatch):
    """runtime.py imported the way the harness does (as `kernel_runtime`), in host-only mode."""
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    spec = importlib.util.spec_from_file_location("kernel_runtime", RUNTIME_PATH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setitem(sys.modules, "kernel_runtime", module)
    return module
