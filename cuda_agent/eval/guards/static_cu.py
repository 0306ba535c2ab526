"""Static guards for kernels/*.cu (and .cuh/.h/.cpp) through tree-sitter-cuda.

Walking the syntax tree rather than grepping the text keeps comments and string
literals out (`// no __half here` must not fire) and matches whole identifiers only
(`half_n` is not `half`). Inline PTX is the one string we read: it is code. Macro
bodies reach the tree as raw text, so they are tokenised here after stripping their
comments and strings.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import lru_cache

import tree_sitter
import tree_sitter_cuda

from cuda_agent.eval.verdict import Finding, Severity

SIDE_STREAM = frozenset(
    {
        "cudaStreamCreate",
        "cudaStreamCreateWithFlags",
        "cudaStreamCreateWithPriority",
        "cuStreamCreate",
        "cuStreamCreateWithPriority",
        "cudaLaunchHostFunc",
        "cuLaunchHostFunc",
        "cudaStreamAddCallback",
        "cuStreamAddCallback",
        "cudaStreamBeginCapture",
        "cudaStreamBeginCaptureToGraph",
        "cuStreamBeginCapture",
        "cuStreamBeginCapture_v2",
        "cudaStreamPerThread",
        "pthread_create",
    }
)
PRECISION = frozenset(
    {
        "half",
        "__half",
        "half2",
        "__half2",
        "__half_raw",
        "__half2_raw",
        "nv_bfloat16",
        "__nv_bfloat16",
        "nv_bfloat162",
        "__nv_bfloat162",
        "__nv_bfloat16_raw",
        "tf32",
        "CUBLAS_COMPUTE_32F_FAST_16F",
        "CUBLAS_COMPUTE_32F_FAST_16BF",
        "CUBLAS_COMPUTE_32F_FAST_TF32",
        "CUBLAS_COMPUTE_16F",
        "CUBLAS_TF32_TENSOR_OP_MATH",
        "CUBLAS_TENSOR_OP_MATH",
        "CUDA_R_16F",
        "CUDA_R_16BF",
        "CUDA_C_16F",
        "CUDA_C_16BF",
        "CUDA_R_8F_E4M3",
        "CUDA_R_8F_E5M2",
        "CUDNN_DATA_HALF",
        "CUDNN_DATA_BFLOAT16",
        "CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION",
    }
)
# Plain words that are fp16/tf32 only where they name a type: `float half = 0.5f * x;` is honest.
TYPE_WORDS = frozenset({"half", "half2", "tf32"})
PRECISION_PREFIXES = (
    "__float2half",
    "__float2bfloat16",
    "__floats2half2",
    "__floats2bfloat162",
    "__float22half2",
    "__float22bfloat162",
    "__half",
    "__bfloat16",
    "__nv_fp8",
    "__nv_fp6",
    "__nv_fp4",
    "__float_to_tf32",
    "__hadd",
    "__hsub",
    "__hmul",
    "__hfma",
    "__hdiv",
    "__hneg",
    "__hmax",
    "__hmin",
)
# Math-mode and compute-type enums a number (or a non-enumerator) may be cast to, or passed as, to reach TF32
# or fp16 math with no name the token rule sees: `cublasSetMathMode(h, (cublasMath_t)3)`. Numbers that
# name a downgrade, for the message (cublas_api.h); any number there is a note (the numeric check judges).
MATH_ENUMS = frozenset({"cublasMath_t", "cublasComputeType_t", "cudnnMathType_t", "cudaDataType", "cudaDataType_t"})
MATH_ENUM_ARGS = {  # function -> index of its math-mode / compute-type argument
    "cublasSetMathMode": 1,
    "cublasLtMatmulDescCreate": 1,
    "cublasLtMatmulDescInit": 1,
    "cudnnSetConvolutionMathType": 1,
    "cublasGemmEx": 17,
    "cublasGemmBatchedEx": 18,
    "cublasGemmStridedBatchedEx": 21,
}
DOWNGRADE_NUMBERS = {
    "cublasMath_t": {1: "CUBLAS_TENSOR_OP_MATH", 3: "CUBLAS_TF32_TENSOR_OP_MATH"},
    "cublasComputeType_t": {
        64: "CUBLAS_COMPUTE_16F",
        65: "CUBLAS_COMPUTE_16F_PEDANTIC",
        74: "CUBLAS_COMPUTE_32F_FAST_16F",
        75: "CUBLAS_COMPUTE_32F_FAST_16BF",
        77: "CUBLAS_COMPUTE_32F_FAST_TF32",
    },
    "cudnnMathType_t": {1: "CUDNN_TENSOR_OP_MATH", 2: "CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION"},
}
ENUMERATOR_PREFIXES = ("CUBLAS_", "CUDNN_", "CUDA_R_", "CUDA_C_")
_MATH_CAST = re.compile(
    r"\(\s*(?:const\s+)?(%s)\s*\)|\b(?:static|reinterpret|const)_cast\s*<\s*(%s)\s*>"
    r"|\b(%s)\s*(?=\()" % (("|".join(sorted(MATH_ENUMS)),) * 3)
)
_MATH_CALL = re.compile(r"\b(%s)\s*\(" % "|".join(MATH_ENUM_ARGS))
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)(?!\()[ \t]+([^\n]*)$", re.M)
_CONST_INT = re.compile(
    r"\b(?:constexpr|const)\s+(?:static\s+)?(?:unsigned\s+|signed\s+)?(?:int|long|short|auto|"
    r"size_t|int32_t|uint32_t|int64_t|uint64_t|cublasMath_t|cublasComputeType_t)\s+(\w+)\s*="
    r"\s*([^;]*);"
)
_NUMBER = re.compile(r"\b(0[xX][0-9a-fA-F]+|\d+)[uUlL]*\b")
FORBIDDEN = frozenset(
    {
        "dlopen",
        "dlsym",
        "dlmopen",
        "dlvsym",
        "system",
        "popen",
        "fork",
        "vfork",
        "execl",
        "execlp",
        "execle",
        "execv",
        "execvp",
        "execvpe",
        "execve",
        "fexecve",
        "posix_spawn",
        "posix_spawnp",
        "fopen",
        "fopen64",
        "freopen",
        "open",
        "openat",
        "creat",
        "ifstream",
        "ofstream",
        "fstream",
        "getenv",
        "secure_getenv",
        "setenv",
        "putenv",
        "unsetenv",
        "syscall",
        "ptrace",
        "cudaIpcOpenMemHandle",
        "cudaIpcGetMemHandle",
        "cuIpcOpenMemHandle",
        "cuIpcGetMemHandle",
        "cuModuleLoad",
        "cuModuleLoadData",
        "cuModuleLoadDataEx",
        "cuModuleLoadFatBinary",
        "cuLibraryLoadData",
        "cuLibraryLoadFromFile",
        "cudaLibraryLoadData",
        "cudaLibraryLoadFromFile",
        "nvrtcCompileProgram",
    }
)
FORBIDDEN_NAMESPACES = frozenset({"at", "c10", "torch", "pybind11", "py", "caffe2"})
PYTHON_API = re.compile(r"^_?Py[A-Z_]|^_ZN")  # the Python C API, or mangled C++ (libtorch) symbols
THREAD_QUALIFIED = frozenset({"std::thread", "std::jthread", "std::async"})
FORBIDDEN_INCLUDES = ("torch/", "ATen/", "c10/", "pybind11/", "caffe2/", "Python.h", "dlfcn.h", "fstream", "spawn.h")
THREAD_INCLUDES = ("thread", "future", "pthread.h")
PTX_LOW = re.compile(r"\.(f16|bf16|tf32|e4m3|e5m2|f16x2|bf16x2)\b")
# Ways around the built-library audit (native.py), stopped here first (docs/guards.md):
# attributes that rename, weaken or alias a symbol, or run code when the library loads.
SYMBOL_ATTRIBUTES = frozenset({"weak", "weakref", "alias", "visibility", "symver", "copy", "externally_visible"})
LOAD_TIME_ATTRIBUTES = frozenset({"constructor", "destructor", "init_priority", "ifunc", "target_clones", "section"})
# Names nvcc, g++ and the C++ ABI give their own code and data; the audit trusts what carries them.
RESERVED_PREFIXES = (
    "__device_stub_",
    "__sti_",
    "__cuda",
    "__nv_",
    "__fatDeviceText",
    "__ioinit",
    "_GLOBAL__",
    "_Z",
    "_ITM_",
    "__gmon_start__",
    "__cxa_",
    "__dso_handle",
)
TOOLKIT_NAMESPACES = frozenset(
    {"cub", "thrust", "cuda", "nvtx3", "cooperative_groups", "nvcuda", "cutlass", "cute", "std", "__gnu_cxx"}
)
_ATTRIBUTE = re.compile(r"\b__attribute(?:__)?\s*\(\((.*?)\)\)|\[\[(.*?)\]\]", re.S)
_PRAGMA = re.compile(r"^[ \t]*#[ \t]*pragma[ \t]+(weak|redefine_extname|GCC[ \t]+visibility|init|fini)\b", re.M)
_PRAGMA_OP = re.compile(r"\b(?:_Pragma|__pragma)\s*\(\s*\"\s*(weak|redefine_extname|GCC\s+visibility|init|fini)\b")
_NAMESPACE_MACRO = re.compile(r"\b\w*(?:NAMESPACE_BEGIN|BEGIN_NAMESPACE)\w*\b")
# Assembler directives that place sections or define, alias or weaken symbols, or emit raw bytes (an
# instruction no disassembly shows where it is jumped into mid-way): none is PTX.
_ASM_DIRECTIVE = re.compile(
    r"(?:^|[\s;{\"])\.(section|pushsection|popsection|previous|init_array|fini_array|"
    r"preinit_array|ctors|dtors|symver|weak|weakref|globl|set|equ|incbin|comm|lcomm|text|"
    r"data|bss|quad|byte|short|word|long|int|ascii|asciz|string|skip|space|fill|org|zero|inst|insn|octa)\b"
)
_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|("(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\')', re.S)

_STRINGS = frozenset(
    {"string_literal", "raw_string_literal", "char_literal", "concatenated_string", "system_lib_string"}
)
_NAMES = frozenset(
    {
        "identifier",
        "type_identifier",
        "field_identifier",
        "namespace_identifier",
        "primitive_type",
        "statement_identifier",
    }
)
# Object-like macros that only qualify a function (`#define DEVICE_INLINE __device__ __forceinline__`): read as the
# words they stand for where a function's kind decides a rule (inline PTX belongs in device code).
QUALIFIER_WORDS = frozenset(
    {"__device__", "__host__", "__global__", "__forceinline__", "__noinline__", "inline", "__inline__", "static"}
)
_QUALIFIER_BODY = re.compile(r"(?:\s*\b(?:" + "|".join(sorted(QUALIFIER_WORDS)) + r")\b)*\s*")
# a directive as the preprocessor reads it (after line splices; `%:` is `#`): the conditionals too, for depth
_DIRECTIVE = re.compile(
    r"^[ \t]*(?:#|%:)[ \t]*(define|undef|if|ifdef|ifndef|elif|elifdef|elifndef|else|endif)\b[ \t]*(\w*)(\(?)([^\n]*)",
    re.M,
)
# <nv/target>'s selection macros: the branch of a device-only query is compiled for the device alone.
NV_TARGET_CALLS = frozenset({"NV_IF_TARGET", "NV_IF_ELSE_TARGET", "NV_DISPATCH_TARGET"})
_NV_DEVICE_QUERY = re.compile(r"NV_IS_DEVICE|NV_PROVIDES_SM_\d+|NV_IS_EXACTLY_SM_\d+")
# conversions to and reinterpretations as 16-bit floats, whatever the source type (`__double2half`,
# `__int2half_rn`, `__ushort_as_half`): the operators of the type they return need no name of their own
_FP16_NAME = re.compile(r"__\w*(?:2|_as_)(?:half|bfloat16|bf16)\w*")
_NV_MACRO = re.compile(r"_*NV_\w*")
_NV_TARGET_INCLUDE = re.compile(r"^[ \t]*(?:#|%:)[ \t]*include[ \t]*<nv/target>", re.M)
# CUDA's own qualifiers and the macro that says which compile this is: a candidate that redefined them would
# make the source say device where the compiler sees host
_CUDA_KEYWORDS = frozenset({"__device__", "__host__", "__global__", "__location__", "__CUDA_ARCH__"})
# `__hadd` is also CUDA's integer average: it is the half add where the code has any sign of half
# precision (a word naming it, or a header that brings it: the fp16 ones, CUB/CCCL, CUTLASS, wmma).
_FP16_SIGN = re.compile(
    r"half|bf16|bfloat|fp16|fp8|e4m3|e5m2|^[ \t]*#[ \t]*include[ \t]*[<\"](?:cub|cuda/|thrust|cutlass|cute|mma)",
    re.I | re.M,
)
_MACRO_NOISE = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'', re.S)
_WORD = re.compile(r"[A-Za-z_]\w*")
_PTX_STRINGS = re.compile(r'"(?:\\.|[^"\\])*"')


@lru_cache(maxsize=1)
def _parser() -> tree_sitter.Parser:
    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_cuda.language()))


class _Scan:
    def __init__(
        self,
        where: str,
        task_fp32: bool,
        allow_precision: bool,
        qualifiers: Qualifiers,
        fp16: bool = True,
        nv_target: bool = False,
    ) -> None:
        self.where = where
        self.qualifiers = qualifiers
        self.fp16 = fp16  # the file shows half precision: a bare `__hadd` is the half add
        self.nv_target = nv_target  # the file includes <nv/target>: NV_IF_TARGET is the toolkit's macro
        self.task_fp32 = task_fp32
        self.precision_severity: Severity = "warn" if allow_precision else "fail"
        self.findings: list[Finding] = []
        self.seen: set[tuple[str, str]] = set()  # (guard, token): report each once per file

    def add(self, guard: str, token: str, line: int, message: str) -> None:
        if (guard, token) in self.seen:
            return
        self.seen.add((guard, token))
        severity = self.precision_severity if guard == "precision" else "fail"
        self.findings.append(Finding(guard=guard, severity=severity, message=message, where=f"{self.where}:{line + 1}"))

    def token(self, name: str, line: int, kind: str = "type_identifier") -> None:
        if name in SIDE_STREAM:
            self.add(
                "side_stream",
                name,
                line,
                f"{name}: work on another stream, host callback or thread "
                "escapes timing; launch everything on the stream the launcher receives",
            )
        if (
            self.task_fp32
            and (name in PRECISION or name.startswith(PRECISION_PREFIXES) or _FP16_NAME.fullmatch(name) is not None)
            and (name not in TYPE_WORDS or kind == "type_identifier")
            and (name != "__hadd" or self.fp16)
        ):
            self.add(
                "precision",
                name,
                line,
                f"{name} in an fp32 task is a precision downgrade (fp16/bf16/tf32); compute and accumulate in float",
            )
        if name in FORBIDDEN or PYTHON_API.match(name):
            self.add(
                "forbidden_call",
                name,
                line,
                f"{name}: no dynamic loading, processes, files, IPC or "
                "Python/libtorch symbols in kernels; use CUDA runtime, cuBLAS and cuDNN only",
            )

    def node(self, n: tree_sitter.Node) -> None:
        """Iterative walk: deep expression trees must not hit Python's recursion limit."""
        stack = [n]
        while stack:
            n = stack.pop()
            kind = n.type
            if kind == "comment" or kind in _STRINGS:
                continue
            if kind == "preproc_include":
                self.include(n)
                continue
            if kind == "gnu_asm_expression":
                self.asm(n)
            elif kind == "namespace_definition":
                self.namespace(n)
            elif kind in ("asm", "__asm__", "__asm") and (n.parent is None or n.parent.type != "gnu_asm_expression"):
                self.add(
                    "native_symbol",
                    "asm",
                    n.start_point[0],
                    "asm outside an asm statement (a label on a "
                    "declaration?) renames symbols; call functions by their own names",
                )
            elif kind == "preproc_arg":
                self.macro(n)
                continue
            elif kind == "qualified_identifier" and n.parent is not None and n.parent.type != "qualified_identifier":
                self.qualified(n)
            elif kind in _NAMES:
                self.declared(n)
                called = (
                    n.parent is not None
                    and n.parent.type == "call_expression"
                    and n.parent.child_by_field_name("function") == n
                )
                name = n.text.decode(errors="replace")
                self.token(name, n.start_point[0], "type_identifier" if called else kind)  # half(x): a functional cast
                if kind == "namespace_identifier" and name in FORBIDDEN_NAMESPACES:
                    self.add(
                        "forbidden_call",
                        name,
                        n.start_point[0],
                        f"{name}:: is libtorch/Python API; kernels are plain CUDA C++",
                    )
            stack.extend(reversed(n.children))

    # -- what the built-library audit (native.py) relies on --------------------------------------

    def asm(self, n: tree_sitter.Node) -> None:
        """The code of an asm statement, asm labels on declarations, assembly outside device code."""
        line = n.start_point[0]
        self.asm_code(" ".join(s.text.decode() for s in _descendants(n) if s.type == "string_literal"), line)
        if self.nv_target and _nv_device_branch(n):  # compiled for the device alone: neither a label nor host code
            return
        if n.parent is None or n.parent.type != "expression_statement":
            self.add(
                "native_symbol",
                "asm label",
                line,
                "an asm label on a declaration renames the symbol it "
                "imports or defines; declare and call functions by their own names",
            )
        elif not _in_device_code(n, self.qualifiers) and not _compiler_barrier(n):
            self.add(
                "forbidden_call",
                "host asm",
                line,
                "inline assembly outside device code (file scope or a host "
                "function) runs unchecked native code; asm belongs in __device__/__global__ functions (PTX)",
            )

    def namespace(self, n: tree_sitter.Node) -> None:
        name = n.child_by_field_name("name")
        root = name.text.decode(errors="replace").split("::")[0].strip() if name is not None else ""
        if root in TOOLKIT_NAMESPACES and not (root == "std" and _std_specializations_only(n)):
            self.add(
                "native_symbol",
                f"namespace {root}",
                n.start_point[0],
                f"code inside namespace {root} (a "
                "toolkit library's) is taken for the toolkit's own; use a namespace of your own",
            )

    def declared(self, n: tree_sitter.Node) -> None:
        """A declared name nvcc or the C++ ABI reserves (`__device_stub_*`, `_Z*`), or a definition put in a
        toolkit namespace (`int cub::x`)."""
        parent = n.parent
        if parent is None or n.type not in ("identifier", "namespace_identifier"):
            return
        field = parent.field_name_for_child(parent.children.index(n))
        text = n.text.decode(errors="replace")
        if n.type == "identifier" and field == "declarator" and text.startswith(RESERVED_PREFIXES):
            self.add(
                "native_symbol",
                text,
                n.start_point[0],
                f"{text} is a name nvcc or the C++ ABI gives its own "
                "code and data; name functions and variables plainly",
            )
        if (
            n.type == "namespace_identifier"
            and text in TOOLKIT_NAMESPACES
            and field == "scope"
            and parent.type == "qualified_identifier"
        ):
            top = parent
            while top.parent is not None and top.parent.type == "qualified_identifier":
                top = top.parent
            if (
                top.parent is not None
                and top.parent.field_name_for_child(top.parent.children.index(top)) in ("declarator", "name")
                and top.parent.type not in ("call_expression", "template_function")
            ):
                self.add(
                    "native_symbol",
                    f"namespace {text}",
                    n.start_point[0],
                    f"defining {text}::... puts code in "
                    "a toolkit library's namespace, taken for the toolkit's own; use a namespace of your own",
                )

    def text(self, code: str, bare: str, found: list[Directive]) -> None:
        """Attributes, pragmas, directives and namespace macros, from the text (they survive parse errors and
        macros): `code` with comments blanked, `bare` with strings blanked too, `found` its directives."""
        for m in _ATTRIBUTE.finditer(bare):
            line = bare.count("\n", 0, m.start())
            for word in {w.strip("_") for w in _WORD.findall(m.group(1) or m.group(2) or "")}:
                if word in SYMBOL_ATTRIBUTES:
                    self.add(
                        "native_symbol",
                        word,
                        line,
                        f"__attribute__(({word})) makes a symbol weak, aliased or "
                        "visible under another name (a hidden import); declare plain functions",
                    )
                elif word in LOAD_TIME_ATTRIBUTES:
                    self.add(
                        "load_time_code",
                        word,
                        line,
                        f"__attribute__(({word})) runs code when the library "
                        "loads or unloads, or places it in a chosen section; do all work inside the launchers",
                    )
        for pattern in (_PRAGMA, _PRAGMA_OP):
            for m in pattern.finditer(code if pattern is _PRAGMA_OP else bare):
                word = " ".join(m.group(1).split())
                self.add(
                    "native_symbol",
                    f"pragma {word}",
                    bare.count("\n", 0, m.start()),
                    f"#pragma {word} weakens, renames or hides symbols (a hidden import); declare plain functions",
                )
        for d in found:
            if d.kind in ("define", "undef") and (_NV_MACRO.fullmatch(d.name) or d.name in _CUDA_KEYWORDS):
                self.add(
                    "native_symbol",
                    d.name,
                    d.line,
                    f"#{d.kind} {d.name}: CUDA's qualifiers and <nv/target>'s macros are the toolkit's (they decide "
                    "which code is compiled for the device); include the headers and use them as they are",
                )
        for m in _NAMESPACE_MACRO.finditer(bare):
            self.add(
                "native_symbol",
                m.group(),
                bare.count("\n", 0, m.start()),
                f"{m.group()} opens a toolkit "
                "library's namespace, taken for the toolkit's own; use a namespace of your own",
            )

    def include(self, n: tree_sitter.Node) -> None:
        path_node = n.child_by_field_name("path")
        if path_node is None:
            return
        path = path_node.text.decode().strip('"<>')
        line = n.start_point[0]
        if path.startswith(FORBIDDEN_INCLUDES) or path.split("/")[-1] in FORBIDDEN_INCLUDES:
            self.add(
                "forbidden_call",
                path,
                line,
                f"#include <{path}>: kernels build without torch/Python "
                "headers and without file or dynamic-loading APIs; pass raw pointers instead",
            )
        elif path.startswith("/") or ".." in path.split("/"):
            self.add(
                "forbidden_call",
                path,
                line,
                f'#include "{path}" reaches outside kernels/; keep every source the kernel uses in kernels/',
            )
        if path in THREAD_INCLUDES:
            self.add(
                "side_stream",
                path,
                line,
                f"#include <{path}>: host threads escape timing; launch everything on the stream the launcher receives",
            )

    def qualified(self, n: tree_sitter.Node) -> None:
        text = re.sub(r"\s+", "", n.text.decode())
        for name in THREAD_QUALIFIED:
            if text == name or text.startswith(name + "<"):
                self.add(
                    "side_stream",
                    name,
                    n.start_point[0],
                    f"{name}: host threads escape timing; launch everything on the stream the launcher receives",
                )

    def asm_code(self, code: str, line: int) -> None:
        """Inline assembly (an asm statement's or a macro's): precision downgrades, section/symbol directives."""
        if self.task_fp32 and ("mma" in code or "cvt" in code) and PTX_LOW.search(code):
            self.add(
                "precision",
                "asm",
                line,
                "inline PTX mma/cvt with f16/bf16/tf32/fp8 in an fp32 task is a precision downgrade; use fp32 FMA",
            )
        if m := _ASM_DIRECTIVE.search(code.replace("\\n", "\n").replace("\\t", "\t")):
            self.add(
                "load_time_code",
                "asm ." + m.group(1),
                line,
                f"asm directive .{m.group(1)} places sections, defines symbols or emits raw bytes (code run at "
                "load, hidden imports, instructions no disassembly shows); write plain functions and PTX",
            )

    def macro(self, n: tree_sitter.Node) -> None:
        raw = n.text.decode(errors="replace")
        if re.search(r"\b(?:asm|__asm__|__asm)\b", raw):  # inline PTX wrapped in a macro
            self.asm_code(" ".join(_PTX_STRINGS.findall(raw)), n.start_point[0])
        # Blank out comments and strings, keeping newlines so line numbers still hold.
        body = _MACRO_NOISE.sub(lambda m: "\n" * m.group().count("\n") or " ", raw)
        names = _macro_variables(n, body)  # `int half` / a parameter `half`: a variable, not the fp16 type
        for m in _WORD.finditer(body):
            kind = "identifier" if m.group() in names else "type_identifier"
            self.token(m.group(), n.start_point[0] + body.count("\n", 0, m.start()), kind)
        for name in THREAD_QUALIFIED:
            if name in re.sub(r"\s+", "", body):
                self.add("side_stream", name, n.start_point[0], f"{name}: host threads escape timing")


def _operand(code: str, start: int) -> str:
    """The expression starting at `start`: a balanced (...) group, or one token."""
    i = start
    while i < len(code) and code[i] in " \t\n":
        i += 1
    if i < len(code) and code[i] == "(":
        depth = 0
        for j in range(i, len(code)):
            depth += {"(": 1, ")": -1}.get(code[j], 0)
            if depth == 0:
                return code[i + 1 : j]
        return code[i + 1 :]
    m = re.match(r"[\w:]+", code[i:])
    return m.group() if m else ""


def _arguments(code: str, open_paren: int) -> list[str]:
    """Top-level comma-separated arguments of the call whose "(" is at `open_paren`."""
    args, depth, start = [], 0, open_paren + 1
    for j in range(open_paren, len(code)):
        c = code[j]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
            if depth == 0:
                return args + [code[start:j]]
        elif c == "," and depth == 1:
            args.append(code[start:j])
            start = j + 1
    return args


def _resolve(expr: str, constants: dict[str, str], depth: int = 0) -> tuple[list[int], list[str]]:
    """The numbers and the names other than enumerators in `expr`, through the file's own #defines and
    integer constants."""
    numbers = [int(m.group(1), 0) for m in _NUMBER.finditer(expr) if not expr[: m.start()].endswith(("_", "."))]
    others: list[str] = []
    for word in _WORD.findall(expr):
        if word in constants and depth < 8:
            more, rest = _resolve(constants[word], constants, depth + 1)
            numbers += more
            others += rest
        elif not word.startswith(ENUMERATOR_PREFIXES) and not word[0].isdigit():
            others.append(word)
    return numbers, others


def math_mode_numbers(code: str) -> list[tuple[int, str, str, list[int]]]:
    """(line, enum, expression, its numbers) for each number or non-enumerator cast to a math-mode or
    compute-type enum and each number passed where cuBLAS/cuDNN expects one; `code` has its comments
    and strings blanked."""
    constants = {m.group(1): m.group(2) for m in _DEFINE.finditer(code)}
    constants.update({m.group(1): m.group(2) for m in _CONST_INT.finditer(code)})
    hits = []
    for m in _MATH_CAST.finditer(code):
        enum = m.group(1) or m.group(2) or m.group(3)
        start = m.end() if m.group(1) else code.find("(", m.end() - 1)
        expr = " ".join(_operand(code, start).split()) if start >= 0 else ""
        numbers, others = _resolve(expr, constants)
        if numbers or others:
            hits.append((code.count("\n", 0, m.start()), enum, expr, numbers))
    for m in _MATH_CALL.finditer(code):
        args, index = _arguments(code, m.end() - 1), MATH_ENUM_ARGS[m.group(1)]
        if index < len(args) and not _MATH_CAST.search(args[index]):  # a cast was judged above
            numbers, _ = _resolve(args[index], constants)
            if numbers:
                enum = (
                    "cublasMath_t"
                    if m.group(1) == "cublasSetMathMode"
                    else "cudnnMathType_t"
                    if m.group(1).startswith("cudnn")
                    else "cublasComputeType_t"
                )
                hits.append((code.count("\n", 0, m.start()), enum, " ".join(args[index].split()), numbers))
    return hits


def _math_mode_message(enum: str, expr: str, numbers: list[int]) -> str:
    names = DOWNGRADE_NUMBERS.get(enum, {})
    named = sorted({names[n] for n in numbers if n in names})
    meaning = f" (that is {', '.join(named)}: TF32/fp16 math)" if named else ""
    return (
        f"({enum}){expr}: a math mode or compute type given by number or variable{meaning}; in an fp32 task "
        "name the mode (CUBLAS_DEFAULT_MATH or CUBLAS_PEDANTIC_MATH, CUBLAS_COMPUTE_32F, CUDNN_FMA_MATH): "
        "the numeric precision check judges what it computes"
    )


def _compiler_barrier(n: tree_sitter.Node) -> bool:
    """`asm volatile("" ::: "memory")`: an empty template with no operands emits no instruction; it only
    stops the compiler moving memory accesses across it, so host code may have it."""
    code = n.child_by_field_name("assembly_code")
    if code is None or code.type != "string_literal" or any(c.type != '"' for c in code.children):
        return False
    if any(c.type in ("gnu_asm_goto_list",) for c in n.children):
        return False
    for field in ("output_operands", "input_operands"):
        operands = n.child_by_field_name(field)
        if operands is not None and operands.named_children:
            return False
    clobbers = n.child_by_field_name("clobbers")
    return clobbers is None or all(c.text == b'"memory"' for c in clobbers.named_children)


def _in_device_code(n: tree_sitter.Node, qualifiers: Qualifiers) -> bool:
    """Inside a __global__/__device__ function (a __host__ __device__ one: under #ifdef __CUDA_ARCH__), its
    qualifiers spelled out or through `qualifiers`' macros. A lambda is the code of the function around it."""
    arch = False
    child, node = n, n.parent
    while node is not None:
        condition = node.child_by_field_name("condition")
        if (
            node.type in ("preproc_ifdef", "preproc_if")
            and "__CUDA_ARCH__" in (node.child_by_field_name("name") or condition or node).text.decode()
        ):
            negated = node.children[0].type == "#ifndef" or getattr(condition, "type", None) == "unary_expression"
            in_else = child.type in ("preproc_else", "preproc_elif")
            arch = arch or negated == in_else
        if node.type == "function_definition":
            return all(
                "__global__" in marks or ("__device__" in marks and ("__host__" not in marks or arch))
                for marks in _function_marks(node, qualifiers)
            )
        child, node = node, node.parent
    return False


def _function_marks(fn: tree_sitter.Node, qualifiers: Qualifiers) -> list[set[str]]:
    """The qualifier sets a function may have: its own words, with each qualifier macro before its name read
    as each of its definitions (a macro defined two ways is each way, and must pass each)."""
    marks = [{c.type for c in fn.children}]
    for c in fn.children:
        if c == fn.child_by_field_name("declarator"):
            break
        for leaf in _descendants(c):
            ways = qualifiers.get(leaf.text.decode(errors="replace")) if leaf.child_count == 0 else None
            if ways:
                marks = [m | set(way) for m in marks for way in ways][:64]
    return marks


def _nv_device_branch(n: tree_sitter.Node) -> bool:
    """Inside the device branch of <nv/target>'s NV_IF_TARGET / NV_IF_ELSE_TARGET / NV_DISPATCH_TARGET: the
    branch of NV_IS_DEVICE / NV_PROVIDES_SM_* / NV_IS_EXACTLY_SM_*, or NV_IS_HOST's else. Asked only where the
    file includes <nv/target>, and a candidate may not #define an NV_ name (`native_symbol`), so the branch is
    what the toolkit makes of it."""
    child, node = n, n.parent
    while node is not None:
        call = node.parent
        if node.type == "argument_list" and call is not None and call.type == "call_expression":
            fn = call.child_by_field_name("function")
            args = [a for a in node.named_children if a.type != "comment"]
            if fn is not None and fn.text.decode() in NV_TARGET_CALLS and child in args:
                i, name = args.index(child), fn.text.decode()
                query = args[i - 1].text.decode().strip() if i else ""
                if name == "NV_IF_ELSE_TARGET" and i == 2:
                    device = args[0].text.decode().strip() == "NV_IS_HOST"
                else:
                    device = i % 2 == 1 and _NV_DEVICE_QUERY.fullmatch(query) is not None
                if device:
                    return True
        child, node = node, node.parent
    return False


def _std_specializations_only(n: tree_sitter.Node) -> bool:
    """`namespace std { template <> struct hash<Key> { size_t operator()(...) const {...} }; }`: explicit
    specializations of hash / less / equal_to for the candidate's own key, with member functions only and no
    `static` or `thread_local` anywhere (data in namespace std is taken for the toolkit's own by the audit)."""
    body = n.child_by_field_name("body")
    if body is None:
        return False
    items = [c for c in body.named_children if c.type != "comment"]
    for item in items:
        params = item.child_by_field_name("parameters")
        spec = next((c for c in item.named_children if c.type in ("struct_specifier", "class_specifier")), None)
        if item.type != "template_declaration" or params is None or params.named_children or spec is None:
            return False
        name = spec.child_by_field_name("name")
        fields = spec.child_by_field_name("body")
        if name is None or name.type != "template_type" or fields is None:
            return False
        if name.child_by_field_name("name").text.decode() not in ("hash", "less", "equal_to"):
            return False
        if any(
            c.type not in ("function_definition", "comment", "access_specifier", ":") for c in fields.named_children
        ):
            return False
        if any(
            d.type in ("storage_class_specifier", "thread_local") or d.text in (b"static", b"thread_local")
            for d in _descendants(spec)
            if d.child_count == 0 or d.type == "storage_class_specifier"
        ):
            return False
    return bool(items)


def _macro_variables(n: tree_sitter.Node, body: str) -> set[str]:
    """Words of TYPE_WORDS a macro uses as variables: its parameters, or declared after a plain type."""
    names: set[str] = set()
    params = n.parent.child_by_field_name("parameters") if n.parent is not None else None
    if params is not None:
        names |= {p.text.decode() for p in params.named_children} & TYPE_WORDS
    words = "|".join(sorted(TYPE_WORDS))
    plain = r"(?:int|unsigned|signed|long|short|char|bool|auto|size_t|u?int(?:8|16|32|64)_t|float|double)"
    names |= set(re.findall(rf"\b{plain}\s+({words})\b", body))
    return names


Qualifiers = Mapping[str, frozenset[frozenset[str]]]


@dataclass(frozen=True)
class Directive:
    kind: str  # define, undef, if, ifdef, ifndef, elif..., else, endif
    name: str  # the macro named (a conditional's first word)
    function_like: bool
    body: str
    line: int
    conditional: bool  # inside an #if/#ifdef/#ifndef (a file's include guard aside)


def _blanked(source: str) -> tuple[str, str]:
    """(the source with comments blanked, with strings blanked too), newlines kept: line numbers hold."""
    code = _COMMENT_OR_STRING.sub(lambda m: _blank(m.group()) if m.group(1) is None else m.group(), source)
    return code, _COMMENT_OR_STRING.sub(lambda m: _blank(m.group()), source)


def directives(source: str) -> list[Directive]:
    """The preprocessor directives of a source as the preprocessor sees them: comments and strings blanked,
    backslash-newlines spliced, `%:` read as `#`, each with whether a conditional encloses it."""
    return _directives(_blanked(source)[1])


def _directives(bare: str) -> list[Directive]:
    code = bare.replace("\\\n", "")
    found = [
        (m.group(1), m.group(2), bool(m.group(3)), m.group(4), code.count("\n", 0, m.start()))
        for m in _DIRECTIVE.finditer(code)
    ]
    depths, depth = [], 0  # how many conditionals enclose each directive
    for kind, *_ in found:
        depth -= kind == "endif"
        depths.append(depth)
        depth += kind in ("if", "ifdef", "ifndef")
    # a file-wide include guard (#ifndef X / #define X, empty / ... / its #endif last) encloses nothing: were X
    # defined already, the whole file would be gone, not a part of it
    guarded = (
        len(found) >= 3
        and found[0][0] == "ifndef"
        and found[1][:2] == ("define", found[0][1])
        and not found[1][3].strip()
        and found[-1][0] == "endif"
        and all(d > 0 for d in depths[1:-1])
    )
    return [
        Directive(kind, name, paren, body, line, kind in ("elif", "else") or depths[i] - guarded > 0)
        for i, (kind, name, paren, body, line) in enumerate(found)
    ]


def qualifier_macros(sources: Iterable[str]) -> dict[str, frozenset[frozenset[str]]]:
    """Object-like macros standing for function qualifiers only, over every source given: name -> the word
    sets of its definitions. A name #undef'd, defined otherwise (function-like, other words) or inside a
    conditional (whose branch the toolkit's headers may decide) is left out, so a function it marks is judged
    as if the macro were unknown; the built objects' host code is read too (native_code.py)."""
    return _qualifier_table(directives(source) for source in sources)


def _qualifier_table(per_source: Iterable[list[Directive]]) -> dict[str, frozenset[frozenset[str]]]:
    ways: dict[str, set[frozenset[str]]] = {}
    dropped: set[str] = set()
    for found in per_source:
        for d in found:
            if d.kind not in ("define", "undef"):
                continue
            if d.kind == "undef" or d.function_like or d.conditional or not _QUALIFIER_BODY.fullmatch(d.body):
                dropped.add(d.name)
            else:
                ways.setdefault(d.name, set()).add(frozenset(d.body.split()))
    return {name: frozenset(w) for name, w in ways.items() if name not in dropped and name not in _CUDA_KEYWORDS}


def defined_macros(source: str) -> set[str]:
    """Every name a source #defines or #undefs."""
    return {d.name for d in directives(source) if d.kind in ("define", "undef")}


def _blank(text: str) -> str:
    """Spaces for a comment or string, keeping its newlines (line numbers hold)."""
    return re.sub(r"[^\n]", " ", text)


def _descendants(n: tree_sitter.Node | None):
    """`n` and every node below it, parents first (nothing for None)."""
    stack = [n] if n is not None else []
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children)


def check_cuda_source(
    source: bytes, where: str, *, task_fp32: bool, allow_precision: bool = False, qualifiers: Qualifiers | None = None
) -> list[Finding]:
    """Findings for one CUDA/C++ source; `where` is its path as reported ("kernels/x.cu"). `qualifiers`: the
    qualifier macros of every source of the candidate (qualifier_macros); by default this source's own."""
    code, bare = _blanked(source.decode(errors="replace"))
    found = _directives(bare)
    scan = _Scan(
        where,
        task_fp32,
        allow_precision,
        _qualifier_table([found]) if qualifiers is None else qualifiers,
        fp16=_FP16_SIGN.search(code) is not None,
        nv_target=_NV_TARGET_INCLUDE.search(code) is not None,
    )
    scan.node(_parser().parse(source).root_node)
    scan.text(code, bare, found)
    if task_fp32:  # a note, whatever allow_precision: only the numeric check can tell what the number does
        for line, enum, expr, numbers in math_mode_numbers(bare):
            scan.findings.append(
                Finding(
                    guard="precision",
                    severity="warn",
                    where=f"{where}:{line + 1}",
                    message=_math_mode_message(enum, expr, numbers),
                )
            )
    return scan.findings
