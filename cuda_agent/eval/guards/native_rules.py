"""What a built kernel library may import, and what nvcc and the toolkit headers emit on their own.

The allowlist is data: `SYMBOL_GROUPS` (one entry per kind of import, with why it is there),
`DENIED` (checked first: dangerous members of allowed families), `REGISTRATION_ONLY` and
`EXIT_HOOKS` (allowed only where nvcc's registration code or <iostream>'s initialiser uses them).
It was found by compiling real kernels (examples/*/candidate, tests/harness/cpu_task, CUB
device-wide algorithms, cooperative launch, cuBLAS) with nvcc 13.0 and gcc 12 and listing what
their objects import. A caller adds names with `extra_symbols` (exact names or `fnmatch` globs:
`audit_library(build, extra_symbols=["qsort", "cusparse*"])`, `EvalConfig.native_symbols`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fnmatch import fnmatchcase

_LIBM = (
    "acos asin atan atan2 cos sin tan cosh sinh tanh acosh asinh atanh exp exp2 expm1 exp10 log log2 "
    "log10 log1p logb ilogb pow sqrt cbrt hypot erf erfc tgamma lgamma lgamma_r ceil floor trunc round "
    "lround llround rint lrint llrint nearbyint fmod remainder remquo copysign nan fabs fdim fmax fmin "
    "fma frexp ldexp modf scalbn scalbln nextafter nexttoward sincos significand"
).split()
_STD_EXCEPTIONS = (
    "exception|bad_alloc|bad_array_new_length|logic_error|runtime_error|invalid_argument|"
    "out_of_range|length_error|domain_error|range_error|overflow_error|underflow_error"
)


@dataclass(frozen=True)
class SymbolGroup:
    why: str
    names: frozenset[str] = frozenset()
    pattern: str = ""  # a full-match regular expression, for families (`cuda[A-Z]\w*`)
    needs_lib: str | None = None  # allowed only when the library links it (`-lcublas` -> "cublas")

    def matches(self, name: str) -> bool:
        return name in self.names or bool(self.pattern and _compiled(self.pattern).fullmatch(name))


@functools.lru_cache(maxsize=None)
def _compiled(pattern: str) -> re.Pattern:
    return re.compile(pattern)


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


SYMBOL_GROUPS: tuple[SymbolGroup, ...] = (
    # cudart_static is linked into every library: its API is what launchers are for.
    SymbolGroup("CUDA runtime API", pattern=r"cuda[A-Z]\w*"),
    # What `kernel<<<grid, block, smem, stream>>>(...)` and nvcc's __device_stub_ functions call.
    SymbolGroup(
        "nvcc launch stubs",
        _names("__cudaPushCallConfiguration __cudaPopCallConfiguration __cudaLaunchKernel __cudaGetKernel"),
    ),
    # nvcc's registration code (also checked: only from that code, REGISTRATION_ONLY below).
    SymbolGroup(
        "nvcc registration",
        _names(
            "__cudaRegisterFatBinary __cudaRegisterFatBinaryEnd "
            "__cudaUnregisterFatBinary __cudaRegisterFunction __cudaRegisterVar "
            "__cudaRegisterManagedVar __cudaInitModule atexit"
        ),
    ),
    # Vendor libraries, only when build.py linked them (a source includes their header).
    SymbolGroup("cuBLAS", pattern=r"cublas(?!Lt|Xt)\w+", needs_lib="cublas"),
    SymbolGroup("cuBLASLt", pattern=r"cublasLt\w+", needs_lib="cublasLt"),
    SymbolGroup("cuDNN", pattern=r"cudnn\w+", needs_lib="cudnn"),
    # The driver API only where -lcuda is linked (never by default; DENIED still applies).
    SymbolGroup("CUDA driver API", pattern=r"cu[A-Z]\w*", needs_lib="cuda"),
    # libm, float/long double variants and glibc's old -ffast-math `__<f>_finite` entry points.
    SymbolGroup(
        "libm",
        frozenset(f"{b}{s}" for b in _LIBM for s in ("", "f", "l")),
        pattern=r"__(?:%s)[fl]?_finite" % "|".join(_LIBM),
    ),
    SymbolGroup(
        "libc memory and strings",
        _names(
            "memcpy memmove memset memcmp memchr malloc calloc realloc free aligned_alloc posix_memalign "
            "strlen strnlen strcmp strncmp strcpy strncpy strcat strncat strchr strrchr strstr strerror "
            "__errno_location abs labs llabs __memcpy_chk __memmove_chk __memset_chk __strcpy_chk "
            "__strncpy_chk __strcat_chk __strncat_chk"
        ),
    ),
    # Messages go to stdout/stderr only: fopen/fdopen are not allowed, so no other FILE* exists.
    SymbolGroup(
        "stdio to stdout/stderr",
        _names(
            "printf fprintf vprintf vfprintf snprintf vsnprintf sprintf vsprintf puts fputs fputc putc putchar "
            "fwrite fflush perror stdout stderr __printf_chk __fprintf_chk __vfprintf_chk __vprintf_chk "
            "__snprintf_chk __vsnprintf_chk __sprintf_chk __vsprintf_chk"
        ),
    ),
    # Ending the process is a crash verdict like any other. nvcc's front end also gives every
    # non-inline __device__ function a host body of `exit(1)`, so honest helpers import exit.
    SymbolGroup("failing loudly", _names("abort exit __assert_fail __stack_chk_fail")),
    # What g++ emits for new/delete, exceptions, function-local static guards and std::vector.
    SymbolGroup(
        "C++ runtime",
        _names(
            "_Znwm _Znam _ZdlPv _ZdaPv _ZdlPvm _ZdaPvm _ZnwmSt11align_val_t _ZnamSt11align_val_t "
            "_ZdlPvSt11align_val_t _ZdaPvSt11align_val_t _ZdlPvmSt11align_val_t _ZdaPvmSt11align_val_t "
            "_ZnwmRKSt9nothrow_t _ZnamRKSt9nothrow_t _ZSt7nothrow "
            "__cxa_guard_acquire __cxa_guard_release __cxa_guard_abort __gxx_personality_v0 _Unwind_Resume "
            "__cxa_allocate_exception __cxa_free_exception __cxa_throw __cxa_rethrow __cxa_begin_catch "
            "__cxa_end_catch __cxa_pure_virtual __cxa_deleted_virtual __cxa_bad_cast __cxa_bad_typeid "
            "_ZSt9terminatev __cxa_call_terminate _GLOBAL_OFFSET_TABLE_ "
            "__tls_get_addr "  # reaches thread_local data (which static_state reports)
            "_ZNSt8ios_base4InitC1Ev _ZNSt8ios_base4InitD1Ev "  # <iostream> with gcc < 13 (see EXIT_HOOKS)
            "_ZSt21ios_base_library_initv "  # <iostream> with gcc >= 13: a reference, no initialiser
            # std::call_once (create a handle once): pthread_once runs the callable on this thread
            "pthread_once __once_proxy _ZSt11__once_call _ZSt15__once_callable "
            # std::map / std::unordered_map (an algorithm cached per shape): libstdc++'s tree and hash helpers
            "_ZSt18_Rb_tree_incrementPSt18_Rb_tree_node_base _ZSt18_Rb_tree_incrementPKSt18_Rb_tree_node_base "
            "_ZSt18_Rb_tree_decrementPSt18_Rb_tree_node_base _ZSt18_Rb_tree_decrementPKSt18_Rb_tree_node_base "
            "_ZSt29_Rb_tree_insert_and_rebalancebPSt18_Rb_tree_node_baseS0_RS_ "
            "_ZSt28_Rb_tree_rebalance_for_erasePSt18_Rb_tree_node_baseRS_"
        ),
        pattern=(
            r"_ZSt\d+__throw_\w+"  # std::__throw_length_error... (std::vector, std::string)
            rf"|_ZNK?St\d+(?:{_STD_EXCEPTIONS})\w*"  # std::runtime_error's ctor, dtor, what()
            rf"|_ZT[ISV]St\d+(?:{_STD_EXCEPTIONS})"  # their typeinfo and vtables
            r"|_ZTVN10__cxxabiv1\d+__\w*class_type_infoE"  # vtables of typeinfo objects
            r"|_ZNKSt8__detail20_Prime_rehash_policy\w+"  # std::unordered_map's bucket counts
            # an error message built the usual way: std::string, std::to_string, std::ostringstream (local
            # objects: their settings die with them; the console streams are DENIED, file streams unlisted)
            r"|_ZNK?St7__cxx11(?:12basic_string|15basic_stringbuf|19basic_ostringstream)IcSt11char_traitsIcESaIcEE\w+"
            r"|_ZT[VTI]NSt7__cxx11(?:15basic_stringbuf|19basic_ostringstream)IcSt11char_traitsIcESaIcEEE"
            r"|_ZNSaIcE[CD][12]Ev|_ZNK?So\w+|_ZStlsI\w+"
            r"|_ZSt16__ostream_insertIcSt11char_traitsIcEE\w+|_ZSt4endlIcSt11char_traitsIcEE\w+"
            r"|_ZNKSt5ctypeIcE13_M_widen_initEv|_ZNSt9basic_iosIcSt11char_traitsIcEE\w+|_ZNSt8ios_base[CD]2Ev"
            r"|_ZNSt6locale[CD][12]Ev|_ZTVSt(?:9basic_ios|15basic_streambuf)IcSt11char_traitsIcEE"
        ),
    ),
)

# Checked before SYMBOL_GROUPS: (regex, why). Each is a way around the harness's rules.
DENIED: tuple[tuple[str, str], ...] = (
    (r"cu(?:da)?Ipc\w*", "CUDA IPC reaches memory of other processes"),
    (
        r"cu(?:da)?(?:Library|Module)\w*|cuLink\w*|nvrtc\w*|nvJitLink\w*",
        "loads device code at run time, outside the sources the guards read",
    ),
    (
        r"cu(?:da)?GetDriverEntryPoint\w*|cuGetProcAddress\w*|cu(?:da)?GetExportTable",
        "looks up driver functions by name (a dlsym for the CUDA driver)",
    ),
    (
        r"cu(?:da)?LaunchHostFunc\w*|cu(?:da)?StreamAddCallback\w*|cudaDeviceRegisterAsyncNotification\w*",
        "runs host code from a callback the timing does not see",
    ),
    (
        r"cu(?:da)?StreamCreate\w*|cu(?:da)?StreamBeginCapture\w*|cu(?:da)?StreamEndCapture\w*|"
        r"cu(?:da)?ThreadExchangeStreamCaptureMode|cu(?:da)?Graph\w*|cu(?:da)?UserObject\w*|cuCtxCreate\w*",
        "creates other streams, graphs or contexts whose work escapes timing",
    ),
    (
        r"cu(?:da)?(?:ImportExternal|DestroyExternal|ExternalMemory|SignalExternal|WaitExternal)\w*|"
        r"cu(?:da)?MemPool(?:Export|Import)\w*|cuMem(?:Export|Import)\w*",
        "shares memory with other processes",
    ),
    (
        r"cudaDeviceReset|cuDevicePrimaryCtx(?:Reset|SetFlags)\w*|cu(?:da)?Profiler\w*|cudaSetDeviceFlags|"
        r"cudaSetValidDevices|cuCtxSetFlags",
        "changes the device or the profiler under the harness",
    ),
    (r"cudaMemcpyFromSymbol\w*|cudaGetSymbolAddress", "reads device variables back: state that survives between calls"),
    (r"cublasXt\w*", "cuBLAS-XT runs host threads"),
    (
        r"_ZSt4(?:cout|cerr|clog)",
        "the console streams keep what a call sets (precision, width, iword) for the next call: write "
        "messages with fprintf(stderr, ...) or printf, and build them with std::string or std::ostringstream",
    ),
)

_DENIED = re.compile("|".join(f"({pattern})" for pattern, _ in DENIED))

STI = "_ZL24__sti____cudaRegisterAllv"  # nvcc's registration function: the one .init_array entry of an object
ARRAY_SECTIONS = (".init_array", ".fini_array", ".preinit_array", ".ctors", ".dtors")
ARRAY_TYPES = (14, 15, 16)  # SHT_INIT_ARRAY, SHT_FINI_ARRAY, SHT_PREINIT_ARRAY

# Allowed only from nvcc's own registration functions (a launcher calling them loads or registers code).
# (__cudaInitModule is not: nvcc calls it from host code that touches a __managed__ variable.)
REGISTRATION_ONLY = frozenset(
    {
        "__cudaRegisterFatBinary",
        "__cudaRegisterFatBinaryEnd",
        "__cudaUnregisterFatBinary",
        "__cudaRegisterFunction",
        "__cudaRegisterVar",
        "__cudaRegisterManagedVar",
        "atexit",
    }
)
NVCC_REGISTRATION_FUNCS = frozenset(
    {
        "_ZL24__sti____cudaRegisterAllv",
        "_ZL26__cudaUnregisterBinaryUtilv",
        "_ZL31__nv_cudaEntityRegisterCallbackPPv",
        "_ZL32__nv_init_managed_rt_with_modulePPv",
    }
)
# Registering exit-time code: only <iostream>'s std::ios_base::Init (gcc < 13 emits one per file).
EXIT_HOOKS = frozenset({"__cxa_atexit", "__dso_handle"})
IOS_INIT_REFS = frozenset(
    {"_ZNSt8ios_base4InitC1Ev", "_ZNSt8ios_base4InitD1Ev", "__cxa_atexit", "__dso_handle", "_ZStL8__ioinit"}
)

# Writable data nvcc emits in every object (exact names) and in each __device_stub_ function.
# name -> size: the fatbin handle and wrapper, the personality pointer, <iostream>'s 1-byte __ioinit.
NVCC_DATA = {
    "_ZL20__cudaFatCubinHandle": 8,
    "_ZL15__fatDeviceText": 24,
    "DW.ref.__gxx_personality_v0": 8,
    "_ZZL22____nv_dummy_param_refPvE5__ref": 8,
    "_ZStL8__ioinit": 1,
    # with __managed__ variables (which are findings themselves)
    "_ZL22__nv_inited_managed_rt": 1,
    "_ZL32__nv_fatbinhandle_for_managed_rt": 8,
}
# Statics nvcc puts in each __device_stub_ function (local name -> size); a guard variable is 8 bytes.
STUB_LOCALS = {"5__tmp": 1, "8__handle": 8, "3__f": 8}
# Namespaces of the toolkit's header libraries: their inline statics (CUB's per-device attribute cache,
# cuda::std's tag objects) are vague-linkage data in COMDAT groups. The source guard forbids a candidate
# to define anything in them, so such data can only come from the headers.
TOOLKIT_NAMESPACES = frozenset(
    {"cub", "thrust", "cuda", "nvtx3", "cooperative_groups", "nvcuda", "cutlass", "cute", "std", "__gnu_cxx"}
)
# Vendor configuration a launcher may keep in a static (SKILL.md: create the handle once, cache the
# algorithm per shape): opaque handles and descriptors, the algorithm a heuristic chose. native_config.py
# checks that only the vendor writes such a static.
CONFIG_TYPES = re.compile(
    r"cublasHandle_t|cublasLtHandle_t|cudnnHandle_t"
    r"|cublasLt(?:MatmulDesc|MatrixLayout|MatmulPreference|MatrixTransformDesc)_t"
    r"|cublasLtMatmulAlgo_t|cublasLtMatmulHeuristicResult_t"
    r"|cudnn\w+Descriptor_t|cudnnConvolution(?:Fwd|BwdData|BwdFilter)Algo(?:Perf)?_t"
)
ONCE_TYPES = re.compile(r"(?:std::)?once_flag")
CONFIG_CONTAINERS = frozenset({"map", "unordered_map"})  # of CONFIG_TYPES values, keyed by INTEGER_TYPES
INTEGER_TYPES = re.compile(
    r"(?:std::)?(?:u?int(?:8|16|32|64)_t|size_t|ptrdiff_t)|bool|char"
    r"|(?:(?:un)?signed )?(?:int|long|long long|short|char|long int|long long int)|(?:un)?signed"
    # the vendors' enums a key names a GEMM or convolution by (an enum is an integer); enums of kernels/ too
    r"|cublas(?:Operation|Fill|Diag|Side|Compute|Math|Pointer|Atomics|Gemm)\w*_t|cudaDataType(?:_t)?"
    r"|cublasLt(?:Order|Epilogue|ReductionScheme|MatmulTile|MatmulStages|PointerMode)\w*_t"
    r"|cudnn(?:DataType|TensorFormat|ConvolutionMode|MathType|NanPropagation|ActivationMode|ReduceTensorOp)\w*_t"
)
# Libraries a kernel library may need at run time (DT_NEEDED); vendor ones only when linked.
NEEDED_BASE = ("libstdc++.so", "libgcc_s.so", "libc.so", "libm.so", "ld-linux", "librt.so", "libpthread.so", "libdl.so")
NEEDED_BY_LIB = {"cublas": "libcublas.so", "cublasLt": "libcublasLt.so", "cudnn": "libcudnn", "cuda": "libcuda.so"}
# crtbeginS.o (shared-object start files) imports these weakly; never from a candidate's object.
STARTUP_FILES = frozenset(
    {"_ITM_deregisterTMCloneTable", "_ITM_registerTMCloneTable", "__cxa_finalize", "__gmon_start__"}
)
STARTUP_FUNCS = frozenset({"frame_dummy", "__do_global_dtors_aux", "register_tm_clones", "deregister_tm_clones"})


def import_problem(name: str, libs: set[str], extra: Iterable[str] = ()) -> str | None:
    """None when `name` may be imported by a library linking `libs`; else why not, in a few words."""
    why = _rule_for(name, frozenset(libs))
    if why is not None and any(fnmatchcase(name, pattern) for pattern in extra):
        return None
    return why


@functools.lru_cache(maxsize=4096)
def _rule_for(name: str, libs: frozenset[str]) -> str | None:
    if m := _DENIED.fullmatch(name):
        return DENIED[m.lastindex - 1][1]
    for group in SYMBOL_GROUPS:
        if group.matches(name):
            return None if group.needs_lib is None or group.needs_lib in libs else f"{group.why}, not linked"
    return "not on the allowlist"


def linked_libs(link_flags: Iterable[str]) -> set[str]:
    """-lcublas -> {"cublas"}: the vendor libraries a library was linked with."""
    libs = {m.group(1) for f in link_flags if (m := re.fullmatch(r"-l(cublasLt|cublas|cudnn\w*|cuda)", f))}
    return {"cudnn" if lib.startswith("cudnn") else lib for lib in libs}
