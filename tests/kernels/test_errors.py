"""Compiler output trimmed to what a model can act on, checked on REAL nvcc output."""

from __future__ import annotations

import subprocess

from cuda_agent.kernels.errors import trim_compile_output
from cuda_agent.kernels.toolkit import find_nvcc


def test_undefined_identifier_names_file_line_and_source(candidate, build):
    candidate.write(
        "relu.cu",
        """\
        #include <cuda_runtime.h>
        __global__ void relu_kernel(float* y, int n) {
          int i = blockIdx.x * blockDim.x + threadIdx.x;
          if (i < n) y[i] = fmaxf(undefined_thing, 0.0f);
        }
        extern "C" void relu(float* y, int n, cudaStream_t s) { relu_kernel<<<1, 32, 0, s>>>(y, n); }
        """,
    )
    result = build()
    assert not result.ok
    assert result.errors.splitlines()[:2] == [
        'kernels/relu.cu:4: error: identifier "undefined_thing" is undefined',
        "    if (i < n) y[i] = fmaxf(undefined_thing, 0.0f);",
    ]
    assert "detected in the compilation" not in result.errors


def test_syntax_error_and_missing_header(candidate, build):
    candidate.write("syntax.cu", "__global__ void k(float* y) {\n  int i = threadIdx.x\n  y[i] = 1.0f;\n}\n")
    candidate.write("include.cu", '#include "nope.cuh"\n')  # the preprocessor is gcc: gcc's format
    result = build()
    assert not result.ok
    assert 'kernels/syntax.cu:3: error: expected a ";"' in result.errors
    assert "kernels/include.cu:1: error: nope.cuh: No such file or directory" in result.errors
    assert '    #include "nope.cuh"' in result.errors


def test_header_error_is_reported_once_with_a_count(candidate, build):
    candidate.write("broken.cuh", "__device__ inline float h(float x) { return x + missing_var; }\n")
    for name in ("a.cu", "b.cu"):
        candidate.write(name, '#include "broken.cuh"\n')
    result = build()
    assert not result.ok
    assert result.errors.splitlines() == [
        'kernels/broken.cuh:1: error: identifier "missing_var" is undefined (x2)',
        "    __device__ inline float h(float x) { return x + missing_var; }",
    ]


def test_template_error_keeps_the_instantiation_note(candidate, build):
    candidate.write(
        "tmpl.cu",
        """\
        template <typename T> __global__ void k(T* y) { y[0] = T::bad_member; }
        extern "C" void go(float* y, cudaStream_t s) { k<float><<<1, 1, 0, s>>>(y); }
        """,
    )
    result = build()
    assert "kernels/tmpl.cu:1: error: name followed by" in result.errors
    assert 'detected during instantiation of "void k(T *) [with T=float]" at line 2' in result.errors


def test_ptxas_error_points_at_the_source_file(candidate, build):
    candidate.write(
        "smem.cu",
        """\
        __global__ void too_big(float* y) {
          __shared__ float s[100000];  // 400 KB: past the 227 KB an H100/H200 block can have
          s[threadIdx.x] = y[0];
          __syncthreads();
          y[threadIdx.x] = s[threadIdx.x + 1];
        }
        """,
    )
    result = build(arch="sm_90a")
    assert not result.ok
    assert result.errors.startswith(
        "kernels/smem.cu: error: ptxas: Entry function 'too_big(float*)' uses too much shared data"
    )


def test_undefined_reference_is_a_link_error(candidate, build):
    candidate.write(
        "link.cu",
        """\
        #include <cuda_runtime.h>
        extern "C" void not_defined_anywhere(float*);
        extern "C" void calls_it(float* y, cudaStream_t s) { not_defined_anywhere(y); }
        """,
    )
    result = build()
    assert not result.ok and result.compiled == ["kernels/link.cu"]
    assert result.errors == "link: error: undefined reference to 'not_defined_anywhere' (in calls_it)"


def test_warnings_do_not_fail_the_build(candidate, build):
    candidate.write(
        "warn.cu",
        """\
        #include <cuda_runtime.h>
        __global__ void k(float* y) { int unused = 3; y[0] = 1.0f; }
        extern "C" void go(float* y, cudaStream_t s) { k<<<1, 1, 0, s>>>(y); }
        """,
    )
    result = build()
    assert result.ok and result.errors == ""
    assert result.warnings.splitlines()[:2] == [
        'kernels/warn.cu:2: warning: variable "unused" was declared but never referenced',
        "    __global__ void k(float* y) { int unused = 3; y[0] = 1.0f; }",
    ]
    assert build().warnings == result.warnings  # kept with the cached object


def test_long_output_is_bounded_with_a_note(candidate, build):
    body = "\n".join(f"  y[{i}] = undefined_{i};" for i in range(150))
    candidate.write("many.cu", f"__global__ void k(float* y) {{\n{body}\n}}\n")
    result = build()
    assert not result.ok
    assert len(result.errors) <= 4000
    assert result.errors.startswith('kernels/many.cu:2: error: identifier "undefined_0" is undefined')
    assert result.errors.splitlines()[-1].endswith("more errors not shown")


def test_gcc_host_and_assembler_diagnostics(tmp_path):
    # Host code goes through gcc: its warnings (-Wall) and the assembler's errors use gcc's format.
    src = tmp_path / "kernels" / "host.cu"
    src.parent.mkdir()
    src.write_text(
        'extern "C" int f(int a) { asm("bogusinsn %0" : "+r"(a)); return a; }\nstatic void unused_helper() {}\n'
    )
    proc = subprocess.run(
        [str(find_nvcc()), "-Xcompiler", "-Wall", "-c", "host.cu", "-o", str(tmp_path / "host.o")],
        cwd=src.parent, capture_output=True, text=True,
    )  # fmt: skip
    assert proc.returncode != 0
    errors, warnings = trim_compile_output(proc.stdout + proc.stderr, tmp_path, cwd=src.parent)
    assert errors.splitlines()[0].startswith("kernels/host.cu:1: error: no such instruction")
    assert "kernels/host.cu:2: warning:" in warnings and "unused_helper" in warnings


def test_paths_outside_root_are_kept_without_an_excerpt(tmp_path):
    text = "/opt/cuda/include/x.h(3): error: something odd\n"
    errors, warnings = trim_compile_output(text, tmp_path / "candidate")
    assert errors == "/opt/cuda/include/x.h:3: error: something odd" and warnings == ""
