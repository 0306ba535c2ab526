"""build_kernels: one library per version, cached per object, rebuilt only where something changed."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time

import pytest

from cuda_agent.kernels import objects, toolkit
from cuda_agent.kernels.build import build_kernels

KERNEL_A = """\
#include <cuda_runtime.h>
#include "common.cuh"
__global__ void scale_kernel(float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = twice(y[i]); }
extern "C" void scale(float* y, int n, cudaStream_t s) { for (int i = 0; i < n; ++i) y[i] = twice(y[i]); }
"""
KERNEL_B = """\
#include <cuda_runtime.h>
extern "C" void fill(float* y, float v, int n, cudaStream_t s) { for (int i = 0; i < n; ++i) y[i] = v; }
"""
COMMON = """\
#pragma once
#include "detail/inner.cuh"
__host__ __device__ inline float twice(float v) { return FACTOR * v; }
"""


def _no_nvcc(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"nvcc ran on what should be a cache hit: {args[0]}")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)  # nvcc_run starts nvcc in the jail with Popen


def test_first_build_makes_library_and_spec(saxpy_source, candidate, build):
    candidate.write("saxpy.cu", saxpy_source)
    result = build()
    assert result.ok, result.errors
    assert result.compiled == ["kernels/saxpy.cu"]
    assert not result.cached
    assert result.lib_path.name.startswith("libkernels-") and result.lib_path.suffix == ".so"
    assert result.lib_path.parent == result.out_dir == result.spec_path.parent
    spec = json.loads(result.spec_path.read_text())
    assert spec["library"] == result.lib_path.name
    assert [launcher["name"] for launcher in spec["launchers"]] == result.launchers == ["saxpy"]
    assert spec["kernels"] == result.kernels == ["saxpy_kernel"]
    assert any(" -c saxpy.cu " in cmd and "-gencode arch=compute_90a,code=sm_90a" in cmd for cmd in result.commands)
    assert any("-shared" in cmd for cmd in result.commands)


def test_unchanged_rebuild_runs_no_nvcc_and_is_fast(saxpy_source, candidate, build, monkeypatch):
    candidate.write("saxpy.cu", saxpy_source)
    first = build(arch="sm_90a")
    assert first.ok, first.errors
    _no_nvcc(monkeypatch)
    started = time.perf_counter()
    again = build(arch="sm_90a")
    elapsed = time.perf_counter() - started
    assert again.ok and again.cached and again.compiled == []
    assert again.lib_path == first.lib_path
    assert elapsed < 0.1, f"cache hit took {elapsed:.3f} s"


def test_editing_one_file_recompiles_only_that_file(candidate, build):
    candidate.write("a.cu", KERNEL_A)
    candidate.write("common.cuh", COMMON)
    candidate.write("detail/inner.cuh", "#define FACTOR 2.0f\n")
    candidate.write("b.cu", KERNEL_B)
    first = build()
    assert first.ok, first.errors
    assert sorted(first.compiled) == ["kernels/a.cu", "kernels/b.cu"]

    candidate.write("b.cu", KERNEL_B.replace("y[i] = v;", "y[i] = v + 0.0f;"))
    second = build()
    assert second.ok, second.errors
    assert second.compiled == ["kernels/b.cu"]
    assert second.lib_path != first.lib_path


def test_header_change_recompiles_its_includers_only(candidate, build):
    candidate.write("a.cu", KERNEL_A)
    candidate.write("common.cuh", COMMON)
    candidate.write("detail/inner.cuh", "#define FACTOR 2.0f\n")
    candidate.write("b.cu", KERNEL_B)
    assert build().ok

    candidate.write("detail/inner.cuh", "#define FACTOR 3.0f\n")  # included through common.cuh
    result = build()
    assert result.ok, result.errors
    assert result.compiled == ["kernels/a.cu"]


def test_arch_and_flags_are_part_of_the_key(candidate, build):
    candidate.write("b.cu", KERNEL_B)
    base = build(arch="sm_90a")
    assert base.ok
    other_arch = build(arch="sm_80")
    assert "kernels/b.cu" in other_arch.compiled and other_arch.lib_path != base.lib_path
    assert any("arch=compute_80,code=sm_80" in cmd for cmd in other_arch.commands)
    with_lineinfo = build(arch="sm_90a", lineinfo=True)
    assert with_lineinfo.compiled == ["kernels/b.cu"]
    assert any("-lineinfo" in cmd for cmd in with_lineinfo.commands)
    with_define = build(arch="sm_90a", extra_flags=["-DEXTRA=1"])
    assert with_define.compiled == ["kernels/b.cu"]
    linked = build(arch="sm_90a", extra_flags=["-lm"])  # a link flag: same objects, another library
    assert linked.cached and linked.lib_path != base.lib_path
    assert "-lm" in linked.commands[-1] and not any("-lm" in cmd for cmd in linked.commands[:-1])
    assert build(arch="sm_90a").lib_path == base.lib_path


def test_out_dir_gets_the_library_and_spec(saxpy_source, candidate, build, tmp_path):
    candidate.write("saxpy.cu", saxpy_source)
    out = tmp_path / "workspace-build"
    result = build(out_dir=out)
    assert result.ok, result.errors
    assert result.out_dir == out.resolve()
    assert result.lib_path.parent == out.resolve() and result.lib_path.is_file()
    assert json.loads((out / "launchers.json").read_text())["library"] == result.lib_path.name


def test_ptxas_report_per_kernel(candidate, build):
    candidate.write(
        "res.cu",
        """\
        #include <cuda_runtime.h>
        template <int B> __global__ void block_sum(const float* x, float* y) {
          __shared__ float s[B];
          s[threadIdx.x] = x[threadIdx.x];
          __syncthreads();
          if (threadIdx.x == 0) { float t = 0; for (int i = 0; i < B; ++i) t += s[i]; y[0] = t; }
        }
        __global__ void local_array(float* y, int k) {
          float a[256];  // indexed at run time: lives in local memory (a stack frame)
          for (int i = 0; i < 256; ++i) a[i] = y[i * k];
          y[threadIdx.x] = a[(int)y[0] & 255];
        }
        extern "C" void run(const float* x, float* y, cudaStream_t s) {
          block_sum<256><<<1, 256, 0, s>>>(x, y);
          local_array<<<1, 32, 0, s>>>(y, 1);
        }
        """,
    )
    plain = build()
    assert plain.ok and plain.ptxas == {}
    result = build(ptxas_verbose=True)
    assert result.ok, result.errors
    assert result.compiled == ["kernels/res.cu"]  # recompiled once to get the report
    assert set(result.ptxas) == {"block_sum<256>", "local_array"}
    block = result.ptxas["block_sum<256>"]
    assert block.shared_bytes == 256 * 4 and block.registers > 0 and block.file == "kernels/res.cu"
    assert result.ptxas["local_array"].stack_bytes == 256 * 4
    assert any("-Xptxas -v" in cmd for cmd in result.commands)
    again = build(ptxas_verbose=True)
    assert again.cached and again.ptxas == result.ptxas  # the report is cached with the object


def test_concurrent_builds_share_the_cache_safely(candidate, build):
    candidate.write("b.cu", KERNEL_B)
    results = []
    threads = [threading.Thread(target=lambda: results.append(build())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r.ok for r in results), [r.errors for r in results]
    assert len({r.lib_path for r in results}) == 1
    assert not list((results[0].lib_path.parent).glob(".tmp-*"))


def test_launcher_signature_problem_fails_the_build(candidate, build):
    candidate.write("bad.cu", 'extern "C" void no_stream(float* y, int n) { }\n')
    result = build()
    assert not result.ok and result.lib_path is None
    assert result.errors.startswith("kernels/bad.cu:1: launcher 'no_stream' must take exactly one cudaStream_t")


def test_no_sources_is_one_clear_line(candidate, build):
    result = build()
    assert not result.ok
    assert "no .cu files" in result.errors and "\n" not in result.errors


def test_missing_nvcc_is_one_clear_line(candidate, cache_dir, monkeypatch, tmp_path):
    candidate.write("b.cu", KERNEL_B)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-cuda"))
    monkeypatch.delenv("CUDA_PATH", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    monkeypatch.setattr(toolkit, "DEFAULT_CUDA_BIN", tmp_path / "none")
    result = build_kernels(candidate.kernels, cache_dir)
    assert not result.ok
    assert "nvcc not found" in result.errors and "CUDA_HOME" in result.errors
    assert "\n" not in result.errors


def test_nvcc_version_is_asked_once_per_binary(monkeypatch):
    nvcc = toolkit.find_nvcc()
    toolkit._nvcc_version.cache_clear()
    calls = []
    real_run = subprocess.run

    def counting(cmd, *args, **kwargs):
        calls.append(cmd)
        return real_run(cmd, *args, **kwargs)

    monkeypatch.setattr(toolkit.subprocess, "run", counting)
    first = toolkit.nvcc_version(nvcc)
    assert toolkit.nvcc_version(nvcc) == first and "release" in first
    assert len(calls) == 1


def test_vendor_libraries_are_linked_only_when_included(candidate):
    candidate.write("blas.cuh", "#include <cublas_v2.h>\n")
    uses = candidate.write("uses.cu", '#include "blas.cuh"\n#include <cudnn.h>\n')
    plain = candidate.write("plain.cu", "#include <cuda_runtime.h>\n// #include <cublasLt.h> is not an include\n")
    headers, libs = objects.local_headers(uses, candidate.kernels)
    assert libs == {"-lcublas", "-lcudnn"}
    assert headers == [(candidate.kernels / "blas.cuh").resolve()]
    assert objects.local_headers(plain, candidate.kernels) == ([], set())


@pytest.mark.parametrize(
    ("capability", "arch"),
    [((9, 0), "sm_90a"), ((10, 0), "sm_100a"), ((12, 0), "sm_120a"), ((8, 6), "sm_86"), ((8, 0), "sm_80")],
)
def test_arch_for_capability(capability, arch):
    assert toolkit.arch_for_capability(*capability) == arch


def test_detect_arch_reads_gpu_zero_and_falls_back_without_one(monkeypatch):
    import pynvml

    def no_driver():
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    toolkit.detect_arch.cache_clear()
    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    assert toolkit.detect_arch() == "sm_90a"

    toolkit.detect_arch.cache_clear()
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlShutdown", lambda: None)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: f"gpu{i}")
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCudaComputeCapability", lambda h: (8, 9) if h == "gpu0" else (0, 0))
    assert toolkit.detect_arch() == "sm_89"
    toolkit.detect_arch.cache_clear()


def test_build_does_not_import_torch():
    code = "import sys, cuda_agent.kernels.build; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("raw", [b"a,b.cu", b"a b.cu", b"new\nline.cu", b"byte\xff.cu", b".hidden.cu", b"-x.cu"])
def test_a_source_name_the_tools_refuse_is_a_one_line_error_and_later_builds_work(candidate, build, monkeypatch, raw):
    import os

    candidate.write("b.cu", KERNEL_B)
    bad = os.path.join(os.fsencode(candidate.kernels), raw)
    with open(bad, "wb") as f:  # as the shell would make it
        f.write(KERNEL_B.replace("fill", "fill2").encode())
    with monkeypatch.context() as m:
        _no_nvcc(m)  # refused before nvcc or the cache ever see it
        result = build()
    assert not result.ok and len(result.errors.splitlines()) == 1, result.errors
    assert result.errors.startswith("kernels/") and "delete_file" in result.errors and "rename_file" in result.errors
    result.errors.encode("utf-8")  # the name is escaped: no lone surrogate
    os.remove(bad)
    again = build(arch="sm_90a")
    assert again.ok, again.errors
    assert again.launchers == ["fill"]
