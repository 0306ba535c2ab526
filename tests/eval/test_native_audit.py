"""The built-library audit (cuda_agent.eval.guards.native, issue 17): hostile kernels under
tests/adversarial_native are caught in their objects and library with the guard id, and the
finding names the symbol; honest ones (every example candidate, the CPU task's, a __constant__
table, cuBLAS, CUB) pass. nvcc really compiles and links here (CI has the toolkit, no GPU).
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from elftools.elf.elffile import ELFFile

from cuda_agent.eval.guards.native import audit_library
from cuda_agent.eval.guards.native_config import config_statics
from cuda_agent.eval.guards.native_elf import Elf
from cuda_agent.eval.guards.native_names import names_variable, pretty, unexplained_gap
from cuda_agent.eval.guards.native_rules import import_problem, linked_libs
from cuda_agent.eval.guards.static import check_candidate_static
from cuda_agent.eval.guards.static_cu import _parser, check_cuda_source
from cuda_agent.kernels.build import BuildResult, build_kernels
from cuda_agent.kernels.launchers import parse_sources
from cuda_agent.kernels.toolkit import ToolkitError, find_nvcc

ROOT = Path(__file__).resolve().parents[2]
NATIVE = ROOT / "tests" / "adversarial_native"
HOSTILE = sorted(p.parent for p in NATIVE.glob("*/expect.json"))
HONEST = sorted(p for p in (NATIVE / "honest").iterdir() if p.name != "cub_reduce")
# the honest candidates written whole (model_new.py too): the Python and .cu static guards see them as well
HONEST_WHOLE = [p for p in HONEST if (p / "model_new.py").is_file()]
EXAMPLES = sorted((ROOT / "examples").glob("*/candidate"))
# the plain candidates benchmarks/memory_peak.py runs on KernelBench's largest level-1 tasks
BENCH = sorted(p.parent for p in (ROOT / "benchmarks" / "kernelbench_l1").glob("*/kernels"))
CPU_HONEST = ROOT / "tests" / "harness" / "cpu_task" / "honest"
GUARDS = {"native_symbol", "load_time_code", "static_state", "forbidden_call"}

# Stand-ins for the vendor headers and libraries where the toolkit has none (adversarial_native/README.md)
VENDOR_STUB = NATIVE / "vendor_stub"
VENDOR_HEADERS = {
    "cublas_v2.h": ("cublas", "STUB_CUBLAS"),
    "cublasLt.h": ("cublasLt", "STUB_CUBLASLT"),
    "cudnn.h": ("cudnn", "STUB_CUDNN"),
}


def _nvcc() -> Path:
    try:
        return find_nvcc()
    except ToolkitError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def native_cache(tmp_path_factory) -> Path:
    _nvcc()
    return tmp_path_factory.mktemp("native-cache")


@pytest.fixture(scope="session")
def vendor_flags(tmp_path_factory) -> list[str]:
    """[] where the toolkit has cuBLAS, cuBLASLt and cuDNN; else stand-in headers and libraries with the
    same names for those it lacks, so the build links -lcublas... as it would (the audit only reads symbols)."""
    nvcc = _nvcc()
    missing = [h for h in VENDOR_HEADERS if not _has_header(nvcc, h)]
    if not missing:
        return []
    stub = tmp_path_factory.mktemp("vendor-stub")
    (stub / "include").mkdir()
    for header in missing:
        shutil.copy(VENDOR_STUB / "include" / header, stub / "include" / header)
        lib, macro = VENDOR_HEADERS[header]
        subprocess.run(
            [
                str(nvcc),
                "-shared",
                "-Xcompiler",
                "-fPIC",
                f"-D{macro}",
                "-o",
                str(stub / f"lib{lib}.so"),
                str(VENDOR_STUB / "stub.cu"),
            ],
            check=True,
            capture_output=True,
        )
    return [f"-I{stub / 'include'}", f"-L{stub}"]


@pytest.fixture(scope="session")
def built(native_cache, vendor_flags, tmp_path_factory) -> dict[Path, BuildResult]:
    """Every hostile and honest candidate (CUB aside), built once, in parallel."""
    dirs = [*HOSTILE, *HONEST, *EXAMPLES, *BENCH, CPU_HONEST]
    build_kernels(CPU_HONEST / "kernels", native_cache)  # the support object, once, before the crowd

    def one(d: Path) -> tuple[Path, BuildResult]:
        return d, build_kernels(
            d / "kernels", native_cache, extra_flags=vendor_flags, out_dir=tmp_path_factory.mktemp("lib")
        )

    with ThreadPoolExecutor(max_workers=4) as pool:
        results = dict(pool.map(one, dirs))
    return results


def expect(d: Path) -> dict:
    return json.loads((d / "expect.json").read_text())


def ids(dirs):
    return [d.relative_to(ROOT).as_posix() for d in dirs]


def check_well_formed(findings):
    for f in findings:
        assert f.guard in GUARDS and f.severity == "fail", f
        assert f.message and "\n" not in f.message and f.where, f


# -- hostile: each caught with its guard id, naming the symbol --------------------------------


def test_catalog_is_well_formed():
    assert len(HOSTILE) >= 15
    for d in HOSTILE:
        e = expect(d)
        assert set(e) == {"guard", "names", "source_guard", "why"}, d
        assert e["guard"] in GUARDS and list((d / "kernels").glob("*.cu")), d
    assert {expect(d)["guard"] for d in HOSTILE} == GUARDS


@pytest.mark.parametrize("entry", HOSTILE, ids=ids(HOSTILE))
def test_hostile_library_is_caught_and_the_symbol_named(entry, built):
    result = built[entry]
    assert result.ok, result.errors  # it links: only the audit can stop it
    findings = audit_library(result)
    check_well_formed(findings)
    e = expect(entry)
    hits = [f for f in findings if f.guard == e["guard"] and e["names"] in f.message]
    assert hits, [f.model_dump() for f in findings]
    assert all(f.where in ("kernels/x.cu", result.lib_path.name) for f in findings)


@pytest.mark.parametrize(
    "entry",
    [d for d in HOSTILE if expect(d)["source_guard"]],
    ids=ids([d for d in HOSTILE if expect(d)["source_guard"]]),
)
def test_source_guard_is_the_first_layer(entry):
    src = entry / "kernels" / "x.cu"
    findings = check_cuda_source(src.read_bytes(), "kernels/x.cu", task_fp32=True)
    assert expect(entry)["source_guard"] in {f.guard for f in findings if f.severity == "fail"}, findings


def test_weak_import_is_also_seen_in_the_library(built):
    """The library's own dynamic table shows the weak PyRun_SimpleString the object declared; with the
    object's finding it is not repeated, and the library check alone still names it."""
    from cuda_agent.eval.guards.native_library import audit_shared, toolkit_baseline

    result = built[NATIVE / "weak_pyrun"]
    shared = audit_shared(Elf.read(result.lib_path), toolkit_baseline(str(_nvcc())), set(), (), set(), 2)
    assert ("native_symbol", "PyRun_SimpleString") in {(g, s) for g, s, _ in shared}
    assert [f.where for f in audit_library(result)] == ["kernels/x.cu"]


def test_extra_symbols_extend_the_allowlist(built):
    result = built[NATIVE / "plain_clock"]
    assert audit_library(result, extra_symbols=["clock_*"]) == []
    assert audit_library(result, extra_symbols=["clock_getres"])


# -- honest: no finding ----------------------------------------------------------------------


@pytest.mark.parametrize(
    "entry", [*EXAMPLES, *BENCH, CPU_HONEST, *HONEST], ids=ids([*EXAMPLES, *BENCH, CPU_HONEST, *HONEST])
)
def test_honest_library_passes(entry, built):
    result = built[entry]
    assert result.ok, result.errors
    assert audit_library(result) == []


def _has_header(nvcc: Path, header: str) -> bool:
    probe = subprocess.run(
        [str(nvcc), "-E", "-x", "cu", "-"], input=f"#include <{header}>\n", capture_output=True, text=True
    )
    return probe.returncode == 0


@pytest.mark.parametrize("entry", HONEST_WHOLE, ids=ids(HONEST_WHOLE))
def test_honest_candidate_passes_every_static_guard(entry):
    """The idioms of issue 25 item 9 (handles in statics, algorithm caches, compiler barriers, SKILL.md's
    launcher idioms): no finding of any severity from model_new.py's or kernels/' rules."""
    assert check_candidate_static(entry, task_fp32=True) == []
    launchers = {f.name: f for f in parse_sources(sorted((entry / "kernels").glob("*.cu")), entry).launchers}
    for node in ast.walk(ast.parse((entry / "model_new.py").read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name)
            and node.func.value.id == "kernels"
        ):
            assert len(node.args) == len([p for p in launchers[node.func.attr].params if p.kind != "stream"])


def test_vendor_candidates_link_their_libraries(built):
    for name, lib in (("cublas_gemm", "-lcublas"), ("cublaslt_algo_cache", "-lcublasLt"), ("cudnn_conv", "-lcudnn")):
        assert lib in built[NATIVE / "honest" / name].commands[-1], name


def test_a_static_beside_the_cublas_handle_is_still_state(native_cache, vendor_flags, tmp_path):
    kernels = tmp_path / "cand" / "kernels"
    kernels.mkdir(parents=True)
    src = (NATIVE / "honest" / "cublas_gemm" / "kernels" / "linear.cu").read_text()
    kernels.joinpath("linear.cu").write_text(
        src.replace(
            "  static cublasHandle_t handle = nullptr;\n",
            "  static cublasHandle_t handle = nullptr;\n  static const float* last_x = nullptr;\n"
            "  if (x == last_x) return 0;\n  last_x = x;\n",
        )
    )
    result = build_kernels(kernels, native_cache, extra_flags=vendor_flags, out_dir=tmp_path / "out")
    assert result.ok, result.errors
    assert [f.guard for f in audit_library(result)] == ["static_state"]
    assert "last_x" in audit_library(result)[0].message


def test_a_handle_static_used_as_a_pointer_cache_is_state(native_cache, vendor_flags, tmp_path):
    """The handle allowance holds only while the static is used as a handle (created, passed to cuBLAS,
    compared with null): a cast into it makes it a place for any pointer."""
    kernels = tmp_path / "cand" / "kernels"
    kernels.mkdir(parents=True)
    src = (NATIVE / "honest" / "cublas_gemm" / "kernels" / "linear.cu").read_text()
    kernels.joinpath("linear.cu").write_text(
        src.replace(
            "  cublasSetStream(handle, stream);\n",
            "  cublasSetStream(handle, stream);\n  if ((const float*)handle == x) return 0;\n",
        )
    )
    result = build_kernels(kernels, native_cache, extra_flags=vendor_flags, out_dir=tmp_path / "out")
    assert result.ok, result.errors
    findings = audit_library(result)
    assert [f.guard for f in findings] == ["static_state"] and "linear::handle" in findings[0].message


@pytest.mark.slow
def test_cub_device_reduce_passes(native_cache, tmp_path):
    """CUB brings <iostream> (a static initialiser with gcc < 13) and inline statics in cub::; both are
    the toolkit's. build.py disables NVTX, whose injection loader would import getenv and dlopen."""
    result = build_kernels(NATIVE / "honest" / "cub_reduce" / "kernels", native_cache, out_dir=tmp_path)
    assert result.ok, result.errors
    assert audit_library(result) == []


# -- speed, robustness -------------------------------------------------------------------------


def test_audit_is_fast(built):
    for entry in [*EXAMPLES, NATIVE / "weak_pyrun"]:
        audit_library(built[entry])  # the toolkit's runtime is read once a process
        times = []
        for _ in range(5):
            start = time.perf_counter()
            audit_library(built[entry])
            times.append(time.perf_counter() - start)
        assert min(times) < 0.1, (entry, times)


def test_failed_build_has_nothing_to_audit():
    assert audit_library(BuildResult(ok=False, errors="x.cu:1: error")) == []


def test_unreadable_library_is_a_finding_not_a_crash(built, tmp_path):
    result = built[CPU_HONEST]
    broken = tmp_path / result.lib_path.name
    broken.write_bytes(b"not an ELF file")
    findings = audit_library(result.model_copy(update={"lib_path": broken}))
    assert [f.guard for f in findings] == ["native_symbol"] and "could not be audited" in findings[0].message


def test_reader_agrees_with_pyelftools(built):
    """native_elf reads with struct for speed; pyelftools is the reference."""
    result = built[NATIVE / "weak_pyrun"]
    obj = next(Path(c.split(" -o ")[-1]) for c in result.commands if " -c x.cu " in c)
    for path in (obj, result.lib_path):
        ours = Elf.read(path)
        with open(path, "rb") as f:
            ref = ELFFile(f)
            assert [s.name for s in ours.sections] == [s.name for s in ref.iter_sections()]
            for table in (".symtab", ".dynsym"):
                theirs = ref.get_section_by_name(table)
                if theirs is None:
                    continue
                undefined = {s.name for s in theirs.iter_symbols() if s["st_shndx"] == "SHN_UNDEF" and s.name}
                assert {s.name for s in ours.symbols(table) if s.shndx == 0 and s.name} == undefined
            relocs = sum(s.num_relocations() for s in ref.iter_sections() if s["sh_type"] == "SHT_RELA")
            assert sum(len(r) for r in ours.relocations.values()) == relocs


# -- the allowlist and name helpers ------------------------------------------------------------


@pytest.mark.parametrize(
    "name, libs, allowed",
    [
        ("cudaMemcpyAsync", set(), True),
        ("cudaLaunchKernelExC", set(), True),
        ("cudaStreamCreateWithFlags", set(), False),
        ("cudaLaunchHostFunc", set(), False),
        ("cudaIpcOpenMemHandle", set(), False),
        ("cudaLibraryLoadData", set(), False),
        ("cudaGraphLaunch", set(), False),
        ("cudaGetDriverEntryPoint", set(), False),
        ("cudaMemcpyFromSymbol", set(), False),
        ("cublasSgemm_v2", set(), False),
        ("cublasSgemm_v2", {"cublas"}, True),
        ("cublasLtMatmul", {"cublas"}, False),
        ("cublasLtMatmul", {"cublasLt"}, True),
        ("cublasXtSgemm", {"cublas"}, False),
        ("cudnnConvolutionForward", {"cudnn"}, True),
        ("cuModuleLoadData", {"cuda"}, False),
        ("cuMemAlloc_v2", set(), False),
        ("nvrtcCompileProgram", set(), False),
        ("expf", set(), True),
        ("__expf_finite", set(), True),
        ("memcpy", set(), True),
        ("fprintf", set(), True),
        ("exit", set(), True),  # the host body nvcc gives a __device__ function; a crash verdict at run time
        ("_ZSt20__throw_length_errorPKc", set(), True),
        ("_ZNSt13runtime_errorC1EPKc", set(), True),
        ("pthread_create", set(), False),
        ("pthread_once", set(), True),  # std::call_once: the callable runs on this thread
        ("_ZNKSt8__detail20_Prime_rehash_policy14_M_need_rehashEmmm", set(), True),
        ("_ZSt29_Rb_tree_insert_and_rebalancebPSt18_Rb_tree_node_baseS0_RS_", set(), True),
        ("pthread_key_create", set(), False),
        ("dlopen", set(), False),
        ("getenv", set(), False),
        ("mprotect", set(), False),
        ("syscall", set(), False),
        ("PyRun_SimpleString", set(), False),
        ("_ZNSt6thread15_M_start_threadESt10unique_ptrINS_6_StateESt14default_deleteIS1_EEPFvvE", set(), False),
    ],
)
def test_import_rules(name, libs, allowed):
    assert (import_problem(name, libs) is None) == allowed


def test_linked_libs():
    assert linked_libs(["-lcublas", "-lcublasLt", "-lcudnn_ops", "-L/x", "-lm"]) == {"cublas", "cublasLt", "cudnn"}


@pytest.mark.parametrize(
    "symbol, shown",
    [
        ("_ZZ6launchE8last_ptr", "launch::last_ptr"),
        ("_ZGVZ3fooiE1h", "guard of foo::h"),
        ("_ZL4flag", "flag"),
        ("_ZN2nsL4flagE", "ns::flag"),
        ("_Z11first_touchv", "first_touch"),
        ("plain_global", "plain_global"),
    ],
)
def test_pretty_names(symbol, shown):
    assert pretty(symbol) == shown


def test_variable_names_and_gaps():
    assert names_variable("_ZL5table", "table") and names_variable("_ZN4polyL6degreeE", "degree")
    assert not names_variable("_ZZ6launchE5table", "table")
    assert unexplained_gap(0x184, [(0, 9), (0x10, 0x24), (0x40, 0x184)]) == 0  # alignment padding
    assert unexplained_gap(64, []) == 64
    assert unexplained_gap(0x30, [(0, 8), (0x28, 0x30)]) == 0x20


# -- the source layer ----------------------------------------------------------------------------


def cu(src: str):
    return {f.guard for f in check_cuda_source(src.encode(), "kernels/k.cu", task_fp32=True) if f.severity == "fail"}


@pytest.mark.parametrize(
    "src, guard",
    [
        ('extern "C" int run(const char*) __asm__("PyRun_SimpleString");', "native_symbol"),
        ('int counter asm("hidden_counter") = 0;', "native_symbol"),
        ('extern "C" __attribute__((weak)) int f(void);', "native_symbol"),
        ('void g() __attribute__((weakref("dlsym")));', "native_symbol"),
        ('void h() __attribute__((alias("launch")));', "native_symbol"),
        ('__attribute__((visibility("default"))) void v() {}', "native_symbol"),
        ('extern "C" void* dlsym(void*, const char*);\n#pragma weak dlsym', "native_symbol"),
        ("#pragma redefine_extname my_run PyRun_SimpleString\nvoid f() {}", "native_symbol"),
        ('_Pragma("weak clock_gettime") void f() {}', "native_symbol"),
        ("#pragma GCC visibility push(default)\nvoid f() {}", "native_symbol"),
        ("void __device_stub__Zfoo() { static void* __handle; }", "native_symbol"),
        ('extern "C" void _ZL24__sti____cudaRegisterAllv() {}', "native_symbol"),
        ("namespace cub { static int cache; }", "native_symbol"),
        ("namespace cuda::std { int x; }", "native_symbol"),
        ("int cub::detail::x = 0;", "native_symbol"),
        ("CUB_NAMESPACE_BEGIN\nint x;\nCUB_NAMESPACE_END", "native_symbol"),
        ("__attribute__((constructor)) static void at_load() {}", "load_time_code"),
        ("[[gnu::constructor]] static void at_load() {}", "load_time_code"),
        ("static void __attribute__((constructor(101))) early() {}", "load_time_code"),
        ("__attribute__((destructor)) static void bye() {}", "load_time_code"),
        ("struct P { P(); };\nP p __attribute__((init_priority(101)));", "load_time_code"),
        ('__attribute__((section(".init_array"), used)) static void (*e)(void) = 0;', "load_time_code"),
        (
            'void impl(); void (*resolve())() { return impl; }\nvoid f() __attribute__((ifunc("resolve")));',
            "load_time_code",
        ),
        ("#define CTOR __attribute__((constructor))\nCTOR static void at_load() {}", "load_time_code"),
        ('asm(".section .init_array\\n.quad hook\\n.previous");', "load_time_code"),
        ('asm(".globl evil");', "forbidden_call"),
        ('extern "C" void launch(cudaStream_t s) { asm volatile("syscall"); }', "forbidden_call"),
        ('__host__ __device__ void f() {\n#ifdef __CUDA_ARCH__\n#else\nasm("rdtsc");\n#endif\n}', "forbidden_call"),
        (
            '#define HOOK asm(".pushsection .init_array\\n.quad hook\\n.popsection")\n__global__ void k() {}',
            "load_time_code",
        ),
        # a compiler barrier is an empty template with no operands, and nothing else
        ('void f() { asm volatile(" " ::: "memory"); }', "forbidden_call"),
        ('void f() { asm volatile("\\n" ::: "memory"); }', "forbidden_call"),
        ('void f() { asm volatile("" "syscall" ::: "memory"); }', "forbidden_call"),
        ('#define CODE "rdtsc"\nvoid f() { asm volatile(CODE ::: "memory"); }', "forbidden_call"),
        ('void f(long x) { asm volatile("" : "+r"(x) :: "memory"); }', "forbidden_call"),
        ('void f(long x) { asm volatile("" :: "r"(x)); }', "forbidden_call"),
        ('void f() { asm volatile("" ::: "memory", "rax"); }', "forbidden_call"),
        ('void f() { asm goto("" :::: out); out:; }', "forbidden_call"),
        # a lambda is the code of the function around it; a qualifier macro is each of its definitions
        ('extern "C" void f() { auto g = [] { asm volatile("rdtsc"); }; g(); }', "forbidden_call"),
        ('#define HD __host__\nHD void f() { asm volatile("rdtsc"); }', "forbidden_call"),
        ('#define D __device__\n#undef D\n#define D\nD void f() { asm volatile("rdtsc"); }', "forbidden_call"),
        ('#define D __device__\n#define D __host__\nD void f() { asm volatile("rdtsc"); }', "forbidden_call"),
        ('#define D __device__ void\nD f() { asm volatile("rdtsc"); }', "forbidden_call"),
        ('#define HD __host__ __device__\nHD void f() { asm volatile("rdtsc"); }', "forbidden_call"),
        # <nv/target>: only a device-only query's branch is device code (elsewhere asm in a macro's argument is
        # no statement: the label rule), and its macros are the toolkit's
        ('__host__ __device__ void f() { NV_IF_TARGET(NV_IS_HOST, (asm volatile("rdtsc");)); }', "native_symbol"),
        (
            '__host__ __device__ void f() { NV_IF_ELSE_TARGET(NV_IS_DEVICE, (), (asm volatile("rdtsc");)); }',
            "native_symbol",
        ),
        ("#define NV_IF_TARGET(q, t) t\nvoid f() {}", "native_symbol"),
        ("#include <nv/target>\n#define __NV_IS_DEVICE __NV_IS_HOST\nvoid f() {}", "native_symbol"),
        # without <nv/target> NV_IF_TARGET is whatever the candidate made it: its asm is no statement
        (
            "template <class F> void NV_IF_TARGET(int, F f) { f(); }\nconstexpr int NV_IS_DEVICE = 1;\n"
            'void g() { NV_IF_TARGET(NV_IS_DEVICE, [] { asm volatile("rdtsc"); }); }',
            "forbidden_call",
        ),
        # CUDA's own qualifiers may not be redefined; a qualifier macro inside a conditional is unknown
        ("#undef __device__\n#define __device__\nvoid f() {}", "native_symbol"),
        (
            '#ifndef CUDARTAPI\n#define CUDARTAPI __device__\n#endif\nCUDARTAPI void f() { asm volatile("rdtsc"); }',
            "forbidden_call",
        ),
        (
            '#if 0\n#define DEV __device__\n#endif\n#def\\\nine DEV\nDEV void f() { asm volatile("rdtsc"); }',
            "forbidden_call",
        ),
        ("__global__ void k(float* x, double a) { x[0] = __double2half(a); }", "precision"),
        # raw bytes: an instruction a disassembly misses where the code jumps into it mid-way
        ('__device__ void f() { asm volatile("jmp 1f+1\\n1: .byte 0xb8, 0x0f, 0x05, 0, 0"); }', "load_time_code"),
        ("#undef NV_IS_DEVICE\n#define NV_IS_DEVICE NV_IS_HOST\nvoid f() {}", "native_symbol"),
        # namespace std holds specializations of hash/less/equal_to with member functions, nothing else
        (
            "namespace std { template <> struct hash<S> { size_t operator()(const S&) const { static size_t n; "
            "return n++; } }; }",
            "native_symbol",
        ),
        ("namespace std { template <> struct hash<S> { size_t n; }; }", "native_symbol"),
        (
            "namespace std { int x; template <> struct hash<S> { size_t operator()(const S&) const { return 0; } }; }",
            "native_symbol",
        ),
        (
            "namespace std { template <typename T> struct hash<W<T>> { size_t operator()(const W<T>&) const "
            "{ return 0; } }; }",
            "native_symbol",
        ),
        ("namespace std { template <> struct vector<S> { void f() {} }; }", "native_symbol"),
        # fp16 spelled through a macro is still fp16; `__hadd` is the half add wherever half precision shows
        ("#define H half\n__global__ void k(H* x) {}", "precision"),
        ("#define W(v) { half y = v; }\n__global__ void k() {}", "precision"),
        (
            "#include <cub/cub.cuh>\n__global__ void k(unsigned short a) { __hadd(__ushort_as_half(a), "
            "__ushort_as_half(a)); }",
            "precision",
        ),
    ],
)
def test_source_rule(src, guard):
    assert guard in cu(src), check_cuda_source(src.encode(), "kernels/k.cu", task_fp32=True)


@pytest.mark.parametrize(
    "src",
    [
        "__attribute__((aligned(16))) static const float table[4] = {1, 2, 3, 4};",
        "[[nodiscard]] static int f() { return 1; }\n[[maybe_unused]] static int g() { return 2; }",
        "__global__ void __launch_bounds__(256) k(float* x) { __attribute__((unused)) int a = 0; }",
        '__global__ void k(float* d) { asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(d[0]) : "l"(d)); }',
        '__device__ float f(float x) { float y; asm("mov.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; }',
        '__host__ __device__ float f(float x) {\n#ifdef __CUDA_ARCH__\n  asm("mov.f32 %0, %0;" : "+f"(x));\n#endif\n'
        "  return x;\n}",
        "#include <cub/cub.cuh>\nusing Reduce = cub::BlockReduce<float, 128>;\n"
        "void f(float* x, float* o, int n) { size_t b = 0; cub::DeviceReduce::Sum(nullptr, b, x, o, n); }",
        "namespace mine { int helper(int x) { return x; } }\nint mine_total = mine::helper(1);",
        "// __attribute__((constructor)) and #pragma weak in a comment\nvoid f() {}",
        'void f() { const char* s = "__attribute__((weak)) asm(\\".section\\")"; }',
        "template <typename T> struct cuda_like { T v; };\nstatic int nv_like = 0;",
        "std::vector<int> make(int n) { return std::vector<int>(n); }",
        'void f(float* t) { for (int i = 0; i < 4; ++i) { t[i] = 0.f; asm volatile("" ::: "memory"); } }',
        'void f() { __asm__ __volatile__("":::"memory"); asm(""); __asm__ volatile("" : : : "memory"); }',
        '__global__ void k(float* d) { auto ld = [](const float* p) { float v; asm("ld.global.nc.f32 %0, [%1];" '
        ': "=f"(v) : "l"(p)); return v; }; d[0] = ld(d); }',
        '#define DI __device__ __forceinline__\nDI float f(float x) { asm("mov.f32 %0, %0;" : "+f"(x)); return x; }',
        "#undef __noinline__\n#define __noinline__ __attribute__((noinline))\nvoid f() {}",  # an old gcc clash
        "#ifndef COMMON_CUH\n#define COMMON_CUH\n#define DI __device__ __forceinline__\n"
        'DI float f(float x) { asm("mov.f32 %0, %0;" : "+f"(x)); return x; }\n#endif',  # an include guard
        "#include <nv/target>\n__host__ __device__ float f(float x) { NV_IF_ELSE_TARGET(NV_IS_DEVICE, "
        '(asm("mov.f32 %0, %0;" : "+f"(x)); return x;), (return x;)) }',
        "#include <nv/target>\n__host__ __device__ float f(float x) { NV_IF_TARGET(NV_PROVIDES_SM_90, "
        '(asm("mov.f32 %0, %0;" : "+f"(x));)) return x; }',
        "struct S { int a; };\nnamespace std { template <> struct hash<S> { size_t operator()(const S& s) const "
        "noexcept { return hash<int>()(s.a); } }; }",
    ],
)
def test_source_look_alikes_do_not_fire(src):
    assert not cu(src) & {"native_symbol", "load_time_code", "forbidden_call"}, check_cuda_source(
        src.encode(), "kernels/k.cu", task_fp32=True
    )


@pytest.mark.parametrize(
    "src",
    [
        "__global__ void k(int* o, int lo, int hi) { o[0] = __hadd(lo, hi); }",  # CUDA's integer average
        "#define REDUCE(v) for (int half = 16; half > 0; half >>= 1) v += __shfl_xor_sync(~0u, v, half)\n"
        "__global__ void k(float* x) { float v = x[0]; REDUCE(v); x[0] = v; }",
        "#define SPLIT(n, half) int lo = (n) - (half)\n__global__ void k(int n) { SPLIT(n, n / 2); }",
    ],
)
def test_precision_look_alikes_do_not_fire(src):
    assert "precision" not in cu(src), check_cuda_source(src.encode(), "kernels/k.cu", task_fp32=True)


# -- vendor configuration in a static (native_config.py) -------------------------------------------

VENDOR_INCLUDES = "#include <cublas_v2.h>\n#include <cublasLt.h>\n#include <cstring>\n#include <unordered_map>\n"
ALGO_MAP = "static std::unordered_map<long, cublasLtMatmulAlgo_t> m;"


# what other objects of the library define: functions named like the vendor's, written by the candidate
DEFINED_ELSEWHERE = frozenset({"cublasStashCreate", "_Z16cublasMineCreatePP12cublasContextPKv"})


def judged(src: str) -> dict[str, str | None]:
    tree = _parser().parse((VENDOR_INCLUDES + src).encode())
    return {s.name: why for s, why in config_statics([tree], DEFINED_ELSEWHERE)}


@pytest.mark.parametrize(
    "src, why",
    [
        (
            "int f(const float* x) { static cublasHandle_t h; if (!h) cublasCreate(&h); return (const float*)h == x; }",
            "casts it",
        ),
        ("void f(const float* x) { static cublasHandle_t h = (cublasHandle_t)x; }", "initialised with"),
        (
            "void f(float* x) { static cublasHandle_t h; h = reinterpret_cast<cublasHandle_t>(x); }",
            "vendor did not make",
        ),
        ("void f(const float* x) { static cublasHandle_t h; memcpy(&h, &x, 8); }", "address goes to memcpy"),
        (
            "void f(const float* x) { static cublasHandle_t h; auto& r = h; r = (cublasHandle_t)x; }",
            "binds a reference",
        ),
        (
            "void stash(cublasHandle_t& r, const float* x) { r = (cublasHandle_t)x; }\n"
            "void f(const float* x) { static cublasHandle_t h; stash(h, x); }",
            "non-const reference",
        ),
        ("cublasHandle_t& get() { static cublasHandle_t h; return h; }", "returned by reference"),
        ("void f() { static cublasHandle_t h; auto p = &h; }", "address is taken"),
        ("static cublasHandle_t h;\nvoid set(cublasHandle_t v) { h = v; }", "vendor did not make"),
        (
            "void f(const float* x) { cublasHandle_t t = (cublasHandle_t)x; static cublasHandle_t h; h = t; }",
            "vendor did not make",
        ),
        (
            "static void* g;\nstatic cublasHandle_t make() { return (cublasHandle_t)g; }\n"
            "void f() { static cublasHandle_t h = make(); }",
            "initialised with",
        ),
        (
            "#define CUBLAS_EVIL ((cublasHandle_t)ptr)\nvoid f() { static cublasHandle_t h; h = CUBLAS_EVIL; }",
            "vendor did not make",
        ),
        (
            'extern "C" int cublasStashCreate(cublasHandle_t*, const void*);\n'
            "void f(const float* x) { static cublasHandle_t h; cublasStashCreate(&h, x); }",
            "address goes to",
        ),
        (
            "int cublasMineCreate(cublasHandle_t*, const void*);\n"
            "void f(const float* x) { static cublasHandle_t h; cublasMineCreate(&h, x); }",
            "address goes to",
        ),
        (
            "int cublasHereCreate(cublasHandle_t* h, const void* x) { memcpy(h, &x, 8); return 0; }\n"
            "void f(const float* x) { static cublasHandle_t h; cublasHereCreate(&h, x); }",
            "in cublasHereCreate",
        ),
        (
            "#define cublasFakeCreate(h, x) memcpy(h, &x, 8)\n"
            "void f(const float* x) { static cublasHandle_t h; cublasFakeCreate(&h, x); }",
            "address goes to",
        ),
        ("void f(const float* d) { static cublasHandle_t h; cublasGetVector(1, 8, d, 1, &h, 1); }", "does not create"),
        (
            "int f(const float* x) { static cublasHandle_t h; if (!h) cublasCreate(&h); cudaStream_t s; "
            "cublasGetStream(h, &s); return s == (cudaStream_t)x; }",
            "reads a setting back",
        ),
        ("void f(cublasHandle_t v) { static cublasHandle_t h; std::swap(h, v); }", "not declared in kernels"),
        ("void f(const float* x) { static cublasLtMatmulAlgo_t a; a.data[0] = (uint64_t)x; }", "vendor did not make"),
        ("void f() { static cublasLtMatmulAlgo_t a; a.data[0]++; }", "not a use a handle has"),
        (
            "static void fill(cublasLtMatmulAlgo_t* out, const float* x) { memcpy(out, &x, 8); }\n"
            "void f(const float* x) { static cublasLtMatmulAlgo_t a; fill(&a, x); }",
            "in fill",
        ),
        (
            (
                f"void f(const float* x, long n) {{ {ALGO_MAP} "
                "cublasLtMatmulAlgo_t a; memcpy(&a, &x, 8); m.emplace(n, a); }"
            ),
            "stores something",
        ),
        (f"void f(const float* x, long n) {{ {ALGO_MAP} m[n].data[0] = (uint64_t)x; }}", "vendor did not make"),
        (
            f"void f(const float* x, long n) {{ {ALGO_MAP} auto it = m.find(n); it->second.data[0] = (uint64_t)x; }}",
            "vendor did not make",
        ),
        (f"void f(long n) {{ {ALGO_MAP} auto& a = m[n]; a.data[0] = 1; }}", "binds a reference"),
        (f"void f() {{ {ALGO_MAP} for (auto& kv : m) kv.second.data[0] = 1; }}", "find, emplace"),
        ("void f(const float* x) { static std::once_flag o; memcpy(&o, &x, 4); }", "outside std::call_once"),
    ],
)
def test_configuration_static_written_by_the_candidate_is_state(src, why):
    verdicts = judged("#include <mutex>\n" + src)
    assert verdicts and all(w is not None for w in verdicts.values()), verdicts
    assert any(why in w for w in verdicts.values()), verdicts


@pytest.mark.parametrize(
    "src",
    [
        "static std::unordered_map<const float*, cublasLtMatmulAlgo_t> by_pointer;",
        "static std::unordered_map<long, float*> results;",
        "static cublasHandle_t handles[4];",
        "thread_local cublasHandle_t h;",
        "cublasHandle_t exported = nullptr;",
    ],
)
def test_only_configuration_types_and_shape_keys_count(src):
    assert judged(src) == {}  # an ordinary static: reported as state like any other


@pytest.mark.parametrize(
    "src",
    [
        "cublasHandle_t get() { static cublasHandle_t h; if (h == NULL) cublasCreate(&h); return h; }",
        # a vendor header's own declarations and aliases, as the build reads them where it is not the toolkit's
        "cublasStatus_t cublasCreate_v2(cublasHandle_t* handle);\n#define cublasCreate cublasCreate_v2\n"
        "cublasHandle_t get() { static cublasHandle_t h; if (!h) cublasCreate(&h); return h; }",
        "cublasHandle_t get() { static cublasHandle_t h = nullptr; if (h) return h; cublasCreate(&h); return h; }",
        "void run(const cublasHandle_t& h);\nvoid f() { static cublasHandle_t h; if (!h) cublasCreate(&h); run(h); }",
        "static cublasHandle_t make() { cublasHandle_t x; cublasCreate(&x); return x; }\n"
        "cublasHandle_t get() { static cublasHandle_t h; if (!h) h = make(); return h; }",
        "cublasHandle_t get() { static cublasHandle_t h = [] { cublasHandle_t x = nullptr; "
        "return cublasCreate(&x) == CUBLAS_STATUS_SUCCESS ? x : nullptr; }(); return h; }",
        "using Cache = std::unordered_map<int64_t, cublasLtMatmulHeuristicResult_t>;\n"
        "cublasLtMatmulHeuristicResult_t pick(cublasLtHandle_t lt, int64_t n) { static Cache c; "
        "auto it = c.find(n); if (it != c.end()) return it->second; cublasLtMatmulHeuristicResult_t r[2]; int k = 0; "
        "cublasLtMatmulAlgoGetHeuristic(lt, 0, 0, 0, 0, 0, 0, 2, r, &k); c[n] = r[0]; return r[0]; }",
    ],
)
def test_configuration_static_used_as_configuration_is_allowed(src):
    verdicts = judged(src)
    assert verdicts and all(w is None for w in verdicts.values()), verdicts
