"""Launcher discovery with tree-sitter: what binds, what is rejected (with file:line), what is skipped."""

from __future__ import annotations

import textwrap

import pytest

from cuda_agent.kernels import launchers as L


def parse(text: str, file: str = "kernels/k.cu") -> L.Found:
    return L.parse_source(textwrap.dedent(text).encode(), file)


def params(launcher: L.Launcher) -> list[tuple]:
    return [(p.name, p.kind, p.type, p.const) for p in launcher.params]


def test_types_constness_and_unnamed_params():
    found = parse(
        """\
        #include <cuda_runtime.h>
        #include <cuda_fp16.h>
        extern "C" void f(const float* __restrict__ x, float *y, const __half* h, __nv_bfloat16* b,
                          double const* d, void* any, const float v[], unsigned int u, long long q,
                          size_t z, int n, bool flag, std::int64_t m, char c, cudaStream_t) {}
        """
    )
    assert found.problems == [] and found.warnings == []
    (f,) = found.launchers
    assert (f.name, f.returns, f.file, f.line) == ("f", "void", "kernels/k.cu", 3)
    assert params(f) == [
        ("x", "pointer", "float", True), ("y", "pointer", "float", False),
        ("h", "pointer", "__half", True), ("b", "pointer", "__nv_bfloat16", False),
        ("d", "pointer", "double", True), ("any", "pointer", "void", False),
        ("v", "pointer", "float", True), ("u", "scalar", "uint32_t", None),
        ("q", "scalar", "int64_t", None), ("z", "scalar", "uint64_t", None),
        ("n", "scalar", "int32_t", None), ("flag", "scalar", "bool", None),
        ("m", "scalar", "int64_t", None), ("c", "scalar", "int8_t", None),
        ("arg14", "stream", "cudaStream_t", None),
    ]  # fmt: skip


def test_extern_c_block_templates_and_triple_chevrons():
    found = parse(
        """\
        #include <cuda_runtime.h>
        namespace detail {
        template <typename T, int B>
        __global__ void __launch_bounds__(256) tiled(const T* __restrict__ x, T* y, int n) { y[0] = x[0]; }
        }
        extern "C" __global__ void c_kernel(float* y) {}
        __device__ float helper(float v) { return v; }
        extern "C" {
        cudaError_t go(const float* x, float* y, int n, cudaStream_t stream) {
          detail::tiled<float, 256><<<dim3((n + 255) / 256), 256, 0, stream>>>(x, y, n);
          c_kernel<<<1, 1, 0, stream>>>(y);
          return cudaGetLastError();
        }
        int status(int code, cudaStream_t stream) { return code; }
        static void not_exported(float* y, cudaStream_t s) {}
        __device__ float device_only(float v) { return v; }
        void declared_only(float* y, cudaStream_t s);
        }
        """
    )
    assert found.problems == [] and found.warnings == []  # <<<>>> parses without ERROR nodes
    assert [(f.name, f.returns, f.line) for f in found.launchers] == [("go", "cudaError_t", 9), ("status", "int", 14)]
    assert found.kernels == ["tiled", "c_kernel"]
    assert L._PARSER.parse(b"void f(){ k<<<1,2,3,s>>>(a, b); }").root_node.has_error is False


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('extern "C" void f(float* y, int n) {}', "launcher 'f' must take exactly one cudaStream_t, as its last"),
        ('extern "C" void f(cudaStream_t s, float* y) {}', "must take exactly one cudaStream_t, as its last"),
        ('extern "C" void f(void) {}', "must take exactly one cudaStream_t"),
        ('extern "C" void f(float& r, cudaStream_t s) {}', "parameter 'float& r' is a reference"),
        ('extern "C" void f(float** p, cudaStream_t s) {}', "parameter 'float** p' is a pointer to a pointer"),
        ('struct P { int a; };\nextern "C" void f(P p, cudaStream_t s) {}', "parameter 'P p' has unsupported type 'P'"),
        ('extern "C" void f(struct P p, cudaStream_t s) {}', "has unsupported type 'struct P'"),
        ('extern "C" void f(float4* p, cudaStream_t s) {}', "has unsupported type 'float4'"),
        ('extern "C" void f(__half h, cudaStream_t s) {}', "passes __half by value"),
        ('extern "C" void f(void (*cb)(int), cudaStream_t s) {}', "is a function pointer"),
        ('extern "C" float* f(cudaStream_t s) { return 0; }', "returns float*; launchers return void, int or"),
        ('extern "C" double f(cudaStream_t s) { return 0; }', "returns double; launchers return void"),
    ],
)
def test_rejected_signatures_name_file_and_line(source, expected):
    found = parse(source)
    assert found.launchers == []
    assert len(found.problems) == 1
    line = source.count("\n", 0, source.index('extern "C"')) + 1
    assert found.problems[0].startswith(f"kernels/k.cu:{line}: launcher 'f'")
    assert expected in found.problems[0]


def test_duplicate_launchers_across_files(tmp_path):
    kdir = tmp_path / "kernels"
    kdir.mkdir()
    (kdir / "a.cu").write_text('extern "C" void same(float* y, cudaStream_t s) {}\n')
    (kdir / "b.cu").write_text('\n\nextern "C" void same(float* y, cudaStream_t s) {}\n')
    found = L.parse_sources(sorted(kdir.glob("*.cu")), tmp_path)
    assert found.problems == [
        "kernels/b.cu:3: launcher 'same' is also defined at kernels/a.cu:1; give each launcher a unique name"
    ]


def test_unparsable_region_is_a_warning_not_an_error():
    found = parse('extern "C" void ok(float* y, cudaStream_t s) {}\n@@@ garbage ((;\n')
    assert [f.name for f in found.launchers] == ["ok"]
    assert found.problems == []
    assert found.warnings and found.warnings[0].startswith("kernels/k.cu:2: could not parse")


def test_spec_round_trip(tmp_path):
    found = parse('extern "C" int f(const float* x, int64_t n, cudaStream_t s) { return 0; }')
    spec = L.LauncherSpec(library="libkernels-abc.so", launchers=found.launchers, kernels=["k"])
    path = tmp_path / L.SPEC_NAME
    L.write_spec(spec, path)
    assert L.read_spec(path) == spec
    import json

    raw = json.loads(path.read_text())
    assert raw["version"] == 1
    assert raw["launchers"][0]["params"] == [
        {"name": "x", "kind": "pointer", "type": "float", "const": True},
        {"name": "n", "kind": "scalar", "type": "int64_t"},
        {"name": "s", "kind": "stream", "type": "cudaStream_t"},
    ]
    assert not list(tmp_path.glob(".*"))  # no temp file left behind


def test_runtime_knows_every_type_the_parser_accepts():
    import importlib.util
    from pathlib import Path

    path = Path(L.__file__).with_name("runtime.py")
    spec = importlib.util.spec_from_file_location("kernel_runtime_types", path)
    runtime = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runtime)
    assert set(L.POINTER_TYPES) == set(runtime._DTYPES)
    assert set(L.SCALAR_TYPES) == set(runtime._SCALARS)
