"""Static guards: every static hack in tests/adversarial is caught with its guard id, and
honest code (the catalog's, the examples', look-alikes in comments and strings) is not."""

import ast
import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from cuda_agent.eval.guards import DEFAULT_ALLOWED_IMPORTS, check_candidate_static
from cuda_agent.eval.guards.static_cu import check_cuda_source
from cuda_agent.eval.guards.static_py import check_model_new
from cuda_agent.kernels.launchers import parse_sources

ROOT = Path(__file__).resolve().parents[2]
CATALOG = ROOT / "tests" / "adversarial"
ENTRIES = sorted(p.parent for p in CATALOG.rglob("expect.json"))
EXAMPLES = sorted((ROOT / "examples").glob("*/candidate"))
GUARD_IDS = {
    "import_not_allowed",
    "reference_access",
    "fallback",
    "memoization",
    "side_stream",
    "timer_patch",
    "precision",
    "forbidden_call",
    "tensor_subclass",
    "module_escape",
    "interpreter_internals",
    "tensor_crossing",
    # the built library's audit
    "native_symbol",
    "load_time_code",
    "static_state",
    # dynamic ones: the recorded plan, the judge's replay, the parent's checks
    "aten_in_forward",
    "plan",
    "no_kernel",
    "foreign_kernel",
    "input_mutation",
    "timed_output_mismatch",
    "timing_mismatch",
}


def expect(entry: Path) -> dict:
    return json.loads((entry / "expect.json").read_text())


def ids(entries):
    return [e.relative_to(CATALOG).as_posix() for e in entries]


def fails(findings):
    return {f.guard for f in findings if f.severity == "fail"}


def py(src: str, fp32: bool = True):
    return check_model_new(src, task_fp32=fp32)


def cu(src: str, fp32: bool = True):
    return check_cuda_source(src.encode(), "kernels/k.cu", task_fp32=fp32)


# -- the catalog ---------------------------------------------------------------------


def test_catalog_is_well_formed():
    assert len(ENTRIES) >= 20
    for entry in ENTRIES:
        e = expect(entry)
        assert set(e) == {"status", "guard", "caught_by", "gpu_only", "why"}, entry
        honest = entry.parent.name == "honest"
        assert (
            e["status"] == "correct" if honest else e["status"] in {"guard_violation", "incorrect", "runtime_error"}
        ), entry
        assert e["caught_by"] in ({None} if honest else {"static", "native", "dynamic", "numeric"}), entry
        assert e["guard"] is None or e["guard"] in GUARD_IDS, entry
        assert (e["guard"] is None) == (e["status"] != "guard_violation"), entry
        assert (entry / "model_new.py").is_file() and list((entry / "kernels").glob("*.cu")), entry


@pytest.mark.parametrize(
    "entry",
    [e for e in ENTRIES if expect(e)["caught_by"] == "static"],
    ids=ids([e for e in ENTRIES if expect(e)["caught_by"] == "static"]),
)
def test_static_hack_is_caught_with_its_guard(entry):
    findings = check_candidate_static(entry, task_fp32=True)
    assert expect(entry)["guard"] in fails(findings), [f.model_dump() for f in findings]
    for f in findings:
        assert f.where and f.message and "\n" not in f.message


@pytest.mark.parametrize(
    "entry",
    [e for e in ENTRIES if expect(e)["caught_by"] != "static"],
    ids=ids([e for e in ENTRIES if expect(e)["caught_by"] != "static"]),
)
def test_other_entries_pass_the_static_guards(entry):
    """Honest candidates must pass; dynamic/numeric hacks must get past static checks,
    or their expect.json would name the wrong layer."""
    assert fails(check_candidate_static(entry, task_fp32=True)) == set()


@pytest.mark.parametrize("candidate", EXAMPLES, ids=[c.parent.name for c in EXAMPLES])
def test_example_candidates_pass(candidate):
    findings = check_candidate_static(candidate, task_fp32=True)
    assert fails(findings) == set(), [f.model_dump() for f in findings]


@pytest.mark.parametrize("entry", ENTRIES, ids=ids(ENTRIES))
def test_every_launcher_called_exists_with_that_many_arguments(entry):
    launchers = {f.name: f for f in parse_sources(sorted((entry / "kernels").glob("*.cu")), entry).launchers}
    for node in ast.walk(ast.parse((entry / "model_new.py").read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "kernels"
        ):
            launcher = launchers[node.func.attr]
            assert len(node.args) == len([p for p in launcher.params if p.kind != "stream"]), node.func.attr


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_catalog_kernels_compile(tmp_path):
    sources = sorted(CATALOG.rglob("*.cu"))

    def build(i_src):
        i, src = i_src
        r = subprocess.run(
            ["nvcc", "-arch=sm_90", "-c", str(src), "-o", str(tmp_path / f"{i}.o")], capture_output=True, text=True
        )
        return src, r.returncode, r.stderr

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        results = list(pool.map(build, enumerate(sources)))
    assert [(str(s), err) for s, rc, err in results if rc != 0] == []


# -- options -------------------------------------------------------------------------


def test_precision_is_only_for_fp32_tasks_and_can_be_a_warning():
    half_cu = CATALOG / "half_cu"
    assert "precision" not in fails(check_candidate_static(half_cu, task_fp32=False))
    warned = check_candidate_static(half_cu, task_fp32=True, allow_precision=True)
    assert {f.severity for f in warned if f.guard == "precision"} == {"warn"}
    assert "precision" not in fails(warned)


def test_allowed_imports_are_configurable():
    triton = CATALOG / "triton_import"
    assert "import_not_allowed" not in fails(
        check_candidate_static(
            triton, task_fp32=True, allowed_imports=DEFAULT_ALLOWED_IMPORTS | {"triton", "triton.language"}
        )
    )


def test_layout_problems(tmp_path):
    with pytest.raises(FileNotFoundError):
        check_candidate_static(tmp_path, task_fp32=True)
    shutil.copytree(CATALOG / "honest" / "elementwise", tmp_path / "c")
    (tmp_path / "c" / "kernels" / "fast.so").write_bytes(b"\x7fELF")
    (tmp_path / "c" / "kernels" / "ref.cu").symlink_to(ROOT / "tests" / "adversarial" / "task.py")
    findings = check_candidate_static(tmp_path / "c", task_fp32=True)
    assert {f.where for f in findings if f.guard == "forbidden_call"} == {"kernels/fast.so", "kernels/ref.cu"}


def test_syntax_error_is_reported_not_raised():
    findings = py("def forward(:\n")
    assert [(f.guard, f.severity) for f in findings] == [("static_parse", "info")]


# -- model_new.py rules ----------------------------------------------------------------


@pytest.mark.parametrize(
    "src, guard",
    [
        ("import os", "import_not_allowed"),
        ("import numba", "import_not_allowed"),
        ("from . import helpers", "import_not_allowed"),
        ("from torch import *", "import_not_allowed"),
        ("import model", "reference_access"),
        ("from model import Model", "reference_access"),
        ("class ModelNew(Model):\n    pass", "reference_access"),
        ("ref = Model()", "reference_access"),
        ("src = '../model.py'", "reference_access"),
        ("def f(x):\n    try:\n        return g(x)\n    except Exception:\n        return x", "fallback"),
        ("import torch\ndef f():\n    with suppress(RuntimeError):\n        pass", "fallback"),
        ("from functools import cache\n@cache\ndef f(x):\n    return x", "memoization"),
        ("C = {}\ndef f(k, v):\n    C.setdefault(k, v)", "memoization"),
        ("def f(x, _memo={}):\n    return x", "memoization"),
        ("class M:\n    def forward(self, x):\n        self.last = g(x)\n        return self.last", "memoization"),
        ("class M:\n    def forward(self, x):\n        self.calls += 1", "memoization"),
        ("class M:\n    _c = {}\n    def forward(self, x):\n        M._c[1] = x", "memoization"),
        ("def f():\n    global N", "memoization"),
        ("import torch\ns = torch.cuda.Stream()", "side_stream"),
        ("import torch\nfrom torch.cuda import stream", "side_stream"),
        ("import torch\ng = torch.cuda.CUDAGraph()", "side_stream"),
        ("import torch\ntorch.cuda.synchronize = lambda: None", "timer_patch"),
        ("import torch.cuda as tc\ntc.synchronize = print", "timer_patch"),
        ("import torch\ncu = torch.cuda\ncu.synchronize = print", "timer_patch"),
        ("import torch\nsetattr(torch.cuda, 'synchronize', print)", "timer_patch"),
        ("import torch\nclass E(torch.cuda.Event):\n    pass", "timer_patch"),
        ("import torch\nimport torch.nn.functional as F\nF.relu = print", "timer_patch"),
        ("import torch\ny = x.to(torch.float16)", "precision"),
        ("import torch\ny = x.bfloat16()", "precision"),
        ("import torch\ntorch.set_float32_matmul_precision('high')", "precision"),
        ("import torch\nwith torch.autocast('cuda'):\n    pass", "precision"),
        ("import torch\nsetattr(torch.backends.cudnn, 'allow_tf32', True)", "precision"),
        ("import torch\ntorch.backends.cuda.matmul.fp32_precision = 'tf32'", "precision"),
        ("exec('x = 1')", "forbidden_call"),
        ("e = eval\n", "forbidden_call"),
        ("__import__('os')", "forbidden_call"),
        ("f = open('w.bin')", "forbidden_call"),
        ("import torch\ntorch.ops.aten.relu(x)", "forbidden_call"),
        ("import torch\nf = torch.compile(g)", "forbidden_call"),
        ("import torch\ntorch.library.Library('x', 'DEF')", "forbidden_call"),
        ("import torch.utils.cpp_extension", "forbidden_call"),
        ("from torch.utils.cpp_extension import load_inline", "forbidden_call"),
        ("import torch\nfrom torch import _C", "forbidden_call"),
        ("import torch\ngetattr(torch, '_C')._set_dispatch_mode(None)", "forbidden_call"),
        ("import torch\nname = 're' + 'lu'\ngetattr(torch, name)(x)", "interpreter_internals"),
        ("import torch\ntorch.backends.cudnn.benchmark = True", "forbidden_call"),
        ("import torch\ntorch._dynamo.reset()", "forbidden_call"),
        ("f = g.__globals__", "interpreter_internals"),
        ("T = type('T', (object,), {})", "forbidden_call"),
        ("import kernel_runtime\nkernels = kernel_runtime.load_kernels('/tmp/prebuilt')", "forbidden_call"),
        ("import torch\nclass T(torch.Tensor):\n    pass", "tensor_subclass"),
        ("def __torch_dispatch__(cls, func, types, args, kwargs):\n    pass", "tensor_subclass"),
    ],
)
def test_python_rule(src, guard):
    assert guard in fails(py(src)), [f.model_dump() for f in py(src)]


@pytest.mark.parametrize(
    "src",
    [
        (
            "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
            "import math\nfrom typing import Optional"
        ),
        "from __future__ import annotations\nimport kernel_runtime\nkernels = kernel_runtime.load_kernels()",
        '"""Faster than model.py: no try/except, no .half(), no torch.cuda.synchronize patching."""',
        "# torch.cuda.synchronize = lambda: None\n# import os\n# x.half()",
        "msg = 'allow_tf32 torch.half eval( exec( open( lru_cache'",
        "class M:\n    def __init__(self):\n        self.half_n = 4\n        self.cache = None\n"
        "    def forward(self, x):\n        half_n = self.half_n\n        return x",
        "import torch\ntorch.set_grad_enabled(False)\nok = torch.backends.cudnn.enabled",
        "import torch\ny = torch.empty(3, dtype=torch.float32, device='cuda')\ns = torch.cuda.current_stream()",
        "class M:\n    def forward(self, x):\n        self.training_flag = False\n        return x",
        "def compile(x):\n    return x\ny = compile(1)",
    ],
)
def test_python_look_alikes_do_not_fire(src):
    assert fails(py(src)) == set(), [f.model_dump() for f in py(src)]


def test_python_precision_rules_only_for_fp32_tasks():
    assert fails(py("import torch\ny = x.half()\nz = x.to(torch.bfloat16)", fp32=False)) == set()


def test_python_findings_say_where():
    (f,) = [f for f in py("import torch\n\n\ntorch.cuda.synchronize = print") if f.guard == "timer_patch"]
    assert f.where == "model_new.py:4"


def test_buffer_kept_on_self_is_a_warning():
    findings = py("import torch\nclass M:\n    def forward(self, x):\n        self.ws = torch.empty_like(x)\n")
    assert [(f.guard, f.severity) for f in findings] == [("memoization", "warn")]


# -- .cu rules -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "src, guard",
    [
        ("void f() { cudaStream_t s; cudaStreamCreate(&s); }", "side_stream"),
        ("void f(cudaStream_t s) { cudaLaunchHostFunc(s, cb, 0); }", "side_stream"),
        ("#include <thread>\nvoid f() { std::thread t(g); t.detach(); }", "side_stream"),
        ("void f() { auto r = std::async(g); }", "side_stream"),
        ("void f() { pthread_t t; pthread_create(&t, 0, g, 0); }", "side_stream"),
        ("void f(cudaStream_t s) { cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal); }", "side_stream"),
        ("void f() { k<<<1, 1, 0, cudaStreamPerThread>>>(); }", "side_stream"),
        ("__global__ void k(half* x) {}", "precision"),
        ("__global__ void k(float* x) { x[0] = static_cast<float>(static_cast<half>(x[0])); }", "precision"),
        ("__global__ void k(float* x) { x[0] = float(half(x[0])); }", "precision"),
        (
            "template <typename T> __global__ void k(T* x) {}\nvoid f(void* p) { k<half><<<1, 1>>>((half*)p); }",
            "precision",
        ),
        ("__global__ void k(float* x) { __half2 h = __floats2half2_rn(x[0], x[1]); }", "precision"),
        ("__global__ void k(float* x) { x[0] = __bfloat162float(__float2bfloat16(x[0])); }", "precision"),
        ("__global__ void k(float* x) { unsigned u = __float_to_tf32(x[0]); }", "precision"),
        (
            "#include <mma.h>\nusing namespace nvcuda;\n__global__ void k() {\n"
            "  wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a; }",
            "precision",
        ),
        (
            '__global__ void k() { asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 '
            '{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%10,%11,%12,%13};" : "=f"(d0)); }',
            "precision",
        ),
        ('__global__ void k() { asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(o) : "f"(i)); }', "precision"),
        (
            '#define MMA(d, a, b) asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 ..." : "=f"(d))\n'
            "__global__ void k() {}",
            "precision",
        ),
        ("void f(cublasHandle_t h) { cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH); }", "precision"),
        (
            "void f() { cublasGemmEx(h, a, b, m, n, k, &al, A, CUDA_R_32F, m, B, CUDA_R_32F, k, &be, C, "
            "CUDA_R_32F, m, CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT); }",
            "precision",
        ),
        ("#define ACC_T __half\n__global__ void k(float* x) { ACC_T a; }", "precision"),
        ("#include <torch/extension.h>\nvoid f() {}", "forbidden_call"),
        ('#include "ATen/ATen.h"\nvoid f() {}', "forbidden_call"),
        ("#include <Python.h>\nvoid f() {}", "forbidden_call"),
        ('#include "../../model.py"\n', "forbidden_call"),
        ('void f() { void* h = dlopen("libtorch.so", 2); }', "forbidden_call"),
        ('void f() { system("nvidia-smi"); }', "forbidden_call"),
        ('void f() { FILE* fp = fopen("/tmp/ref.bin", "rb"); }', "forbidden_call"),
        ('void f() { std::ofstream o("x"); }', "forbidden_call"),
        ('void f() { const char* e = getenv("HOME"); }', "forbidden_call"),
        ("void f() { cudaIpcMemHandle_t h; cudaIpcOpenMemHandle(&p, h, 0); }", "forbidden_call"),
        ("void f() { at::Tensor t; }", "forbidden_call"),
        ("void f() { PyGILState_Ensure(); }", "forbidden_call"),
    ],
)
def test_cuda_rule(src, guard):
    assert guard in fails(cu(src)), [f.model_dump() for f in cu(src)]


@pytest.mark.parametrize(
    "src",
    [
        "// __half, cudaStreamCreate, dlopen, std::thread, tf32 in a comment\nvoid f() {}",
        "/* __nv_bfloat16 and CUBLAS_TF32_TENSOR_OP_MATH */\nvoid f() {}",
        'void f() { const char* s = "__half dlopen getenv cudaStreamCreate"; }',
        "__global__ void k(float* x, int n) { int half_n = n / 2; int halfway = half_n; float half_sum = 0.f; }",
        "__global__ void k(float* x) { float h = 0.5f; int threads_half = 1; x[0] = h; }",
        "__global__ void k(float* x) { const float half = 0.5f * x[0]; x[1] = half; }",
        '#include <cuda_runtime.h>\n#include <cublas_v2.h>\n#include <cstdint>\n#include "common.cuh"\nvoid f() {}',
        "void f(cublasHandle_t h) { cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH); }",
        '#define CHECK(x) do { if ((x) != cudaSuccess) printf("__half %s", #x); } while (0)\nvoid f() {}',
        '__global__ void k(float* d) { asm volatile("fma.rn.f32 %0, %1, %2, %3;" : "=f"(d[0]) : '
        '"f"(d[1]), "f"(d[2]), "f"(d[3])); }',
    ],
)
def test_cuda_look_alikes_do_not_fire(src):
    assert fails(cu(src)) == set(), [f.model_dump() for f in cu(src)]


def test_cuda_precision_only_for_fp32_tasks_and_findings_say_where():
    src = "#include <cuda_fp16.h>\n\n__global__ void k(__half* x) { x[0] = __float2half(1.f); }"
    assert fails(cu(src, fp32=False)) == set()
    assert {f.where for f in cu(src)} == {"kernels/k.cu:3"}
