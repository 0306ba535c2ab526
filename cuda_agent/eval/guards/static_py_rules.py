"""What model_new.py may not reach, as tables (module paths, module names, attributes, builtins,
precision and timing names), the messages the static guards give, and the rules on one resolved
module path (`name_rules`). The visitor that applies them is static_py_checker.py."""

from __future__ import annotations

import re
from collections.abc import Iterable

DEFAULT_ALLOWED_IMPORTS = frozenset(
    {
        "torch",
        "torch.nn",
        "torch.nn.functional",
        "math",
        "typing",
        "__future__",
        "kernel_runtime",
    }
)
REFERENCE_MODULES = frozenset({"model"})  # the task module as a workspace shows it
REFERENCE_PATH = re.compile(r"(^|[\\/])model\.py$")

# Resolved names (and everything under them) that no candidate needs.
FORBIDDEN = (
    "torch.ops",
    "torch.library",
    "torch.compile",
    "torch.compiler",
    "torch.jit",
    "torch.fx",
    "torch.export",
    "torch.onnx",
    "torch.utils",
    "torch.overrides",
    "torch.hub",
    "torch.load",
    "torch.save",
    "torch.package",
    "torch.serialization",
    "torch.storage",
    "torch.distributed",
    "torch.profiler",
    "torch.autograd.profiler",
    "torch.from_file",
    "torch.classes",
    "torch.set_default_dtype",
    "torch.set_default_device",
    "torch.set_default_tensor_type",
    "torch.set_flush_denormal",
    "torch.cuda.memory",
    "torch.cuda.cudart",
    "torch.cuda.caching_allocator_alloc",
    "torch.cuda.caching_allocator_delete",
    "torch.cuda.MemPool",
    "torch.cuda.use_mem_pool",
    "torch.cuda.CUDAPluggableAllocator",
    "torch.cuda.change_current_allocator",
    "torch.cuda.jiterator",
    "torch.cuda.tunable",
    "typing.get_type_hints",
    "typing.ForwardRef",
    "typing.evaluate_forward_ref",
)
# Modules reachable as attributes of other modules (torch.os, torch.cuda.traceback, typing.sys,
# kernel_runtime.ctypes...). These names are never an honest attribute of a tensor, a module or a
# builtin container, so they fire on any attribute chain (`[torch][0].os` too), as a literal
# getattr/hasattr name, and as a bare name the file does not bind. tests/eval/test_static_escapes.py
# checks every module an imported torch exposes this way is caught.
MODULE_NAMES = frozenset(
    {
        "os",
        "posix",
        "nt",
        "posixpath",
        "ntpath",
        "genericpath",
        "_osp",
        "sys",
        "subprocess",
        "ctypes",
        "_ctypes",
        "cffi",
        "importlib",
        "importlib_metadata",
        "importlib_resources",
        "pkgutil",
        "zipimport",
        "runpy",
        "site",
        "sysconfig",
        "builtins",
        "__builtin__",
        "gc",
        "inspect",
        "dis",
        "opcode",
        "code",
        "codeop",
        "pydoc",
        "traceback",
        "linecache",
        "tokenize",
        "faulthandler",
        "tracemalloc",
        "atexit",
        "warnings",
        "_warnings",
        "logging",
        "io",
        "_io",
        "pathlib",
        "shutil",
        "tempfile",
        "glob",
        "fnmatch",
        "mmap",
        "fcntl",
        "resource",
        "pty",
        "tty",
        "termios",
        "socket",
        "socketserver",
        "ssl",
        "http",
        "urllib",
        "requests",
        "selectors",
        "asyncio",
        "signal",
        "threading",
        "_thread",
        "multiprocessing",
        "python_multiprocessing",
        "mp",
        "concurrent",
        "queue",
        "sched",
        "contextvars",
        "types",
        "weakref",
        "_weakref",
        "marshal",
        "pickle",
        "_pickle",
        "cPickle",
        "pickletools",
        "_compat_pickle",
        "copyreg",
        "dill",
        "cloudpickle",
        "shelve",
        "dbm",
        "sqlite3",
        "zipfile",
        "tarfile",
        "gzip",
        "bz2",
        "lzma",
        "zlib",
        "functools",
        "_functools",
        "operator",
        "_operator",
        "contextlib",
        "dataclasses",
        "string",
        "unittest",
        "mock",
        "pdb",
        "bdb",
        "cProfile",
        "pstats",
        "timeit",
        "platform",
        "getpass",
        "pwd",
        "grp",
        "webbrowser",
        "argparse",
        "difflib",
        "pprint",
        "textwrap",
        "hashlib",
        "uuid",
        "base64",
        "locale",
        "typing_extensions",
        "torchgen",
        "numpy",
        "np",
        "scipy",
        "sympy",
        "mpmath",
        "networkx",
        "optree",
        "triton",
        "jinja2",
        "filelock",
        "fsspec",
        "pynvml",
        "psutil",
        "setuptools",
        "pkg_resources",
        "distutils",
        "packaging",
        "_C",
        "_VF",
        "_ops",
        "_dynamo",
        "_inductor",
        "_sys",
        "_os",
    }
)
# Module aliases that are also ordinary attribute names (x.t(), d.copy(), loss.reduction): they
# fire only on a path resolved through the file's imports (torch.nn.modules.module.copy), never
# where that path is an honest attribute (SOFT_MODULE_OK).
SOFT_MODULE_NAMES = frozenset(
    {
        "t",
        "copy",
        "copymodule",
        "re",
        "stdlib_re",
        "random",
        "time",
        "datetime",
        "abc",
        "enum",
        "json",
        "struct",
        "numbers",
        "keyword",
        "collections",
        "container_abcs",
        "_collections_abc",
        "itertools",
        "it",
        "itl",
        "heapq",
        "bisect",
        "math",
        "cmath",
        "typing",
        "errno",
        "reduction",
        "reducer",
        "ast",
        "__future__",
    }
)
SOFT_MODULE_OK = frozenset({"torch.t", "torch.Tensor.t", "torch.random"})
MODULE_ROOTS = frozenset({"torch", "math", "typing", "kernel_runtime"})
RUNTIME_API = frozenset({"kernel_runtime.load_kernels"})
# Interpreter internals: every dunder attribute but these, frames, code objects, tracebacks, cells.
DUNDER_ATTRS_OK = frozenset({"__init__", "__name__", "__qualname__", "__doc__", "__module__"})
DUNDER_NAMES_OK = frozenset(
    {"__name__", "__doc__", "__file__", "__all__", "__debug__", "__qualname__", "__module__", "__slots__"}
)
FRAME_ATTRS = frozenset(
    {
        "gi_frame",
        "gi_code",
        "gi_yieldfrom",
        "gi_suspended",
        "cr_frame",
        "cr_code",
        "cr_await",
        "cr_origin",
        "ag_frame",
        "ag_code",
        "ag_await",
        "f_back",
        "f_locals",
        "f_globals",
        "f_builtins",
        "f_code",
        "f_lasti",
        "f_lineno",
        "f_trace",
        "f_trace_lines",
        "f_trace_opcodes",
        "f_generator",
        "tb_frame",
        "tb_next",
        "tb_lasti",
        "tb_lineno",
        "co_consts",
        "co_code",
        "co_names",
        "co_varnames",
        "co_cellvars",
        "co_freevars",
        "co_filename",
        "co_name",
        "co_qualname",
        "co_flags",
        "co_lnotab",
        "co_linetable",
        "co_exceptiontable",
        "co_positions",
        "co_lines",
        "co_argcount",
        "co_posonlyargcount",
        "co_kwonlyargcount",
        "co_nlocals",
        "co_stacksize",
        "co_firstlineno",
        "cell_contents",
        "func_globals",
        "func_code",
        "func_closure",
        "im_func",
        "im_self",
        "_getframe",
        "currentframe",
        "walk_stack",
        "walk_tb",
        "exc_info",
    }
)
# Methods that run candidate code at moments the harness does not choose (class creation, pickling,
# attribute lookup of every name, garbage collection) or make an object pose as an array.
DUNDER_DEFS = frozenset(
    {
        "__getattribute__",
        "__init_subclass__",
        "__class_getitem__",
        "__set_name__",
        "__mro_entries__",
        "__prepare__",
        "__instancecheck__",
        "__subclasscheck__",
        "__del__",
        "__reduce__",
        "__reduce_ex__",
        "__getstate__",
        "__setstate__",
        "__getnewargs__",
        "__getnewargs_ex__",
    }
)
REFLECTIVE = frozenset({"getattr", "setattr", "delattr", "hasattr"})
REFLECTIVE_ATTRS = frozenset({"attrgetter", "methodcaller"})  # operator's getattr by string
# Ways out of torch to host data or raw memory (numpy, DLPack, buffers, storages, pointers).
CROSSING_ATTRS = frozenset(
    {
        "numpy",
        "tolist",
        "from_numpy",
        "dlpack",
        "from_dlpack",
        "to_dlpack",
        "frombuffer",
        "asarray",
        "share_memory_",
        "data_ptr",
        "untyped_storage",
        "_typed_storage",
        "UntypedStorage",
        "TypedStorage",
        "__array__",
        "__array_interface__",
        "__array_struct__",
        "__array_wrap__",
        "__array_priority__",
        "__array_function__",
        "__array_ufunc__",
        "__cuda_array_interface__",
        "__dlpack__",
        "__dlpack_device__",
    }
)
CROSSING_METHODS = frozenset({"storage"})  # only when called: `x.storage()`
# Tensors made from Python data: fine in __init__ (constants), not in code forward runs.
DATA_TENSORS = frozenset({"torch.tensor", "torch.as_tensor", "torch.scalar_tensor", "torch.Tensor"})
LEGACY_TENSOR = re.compile(r"^torch\.(cuda\.)?[A-Z]\w*Tensor$")
SIDE_STREAM = (
    "torch.cuda.Stream",
    "torch.cuda.ExternalStream",
    "torch.cuda.stream",
    "torch.cuda.set_stream",
    "torch.cuda.streams",
    "torch.cuda.graph",
    "torch.cuda.graphs",
    "torch.cuda.CUDAGraph",
    "torch.cuda.make_graphed_callables",
    "torch.Stream",
    "torch.accelerator.set_stream",
    "torch.multiprocessing",
    "threading",
    "_thread",
    "concurrent",
    "multiprocessing",
    "asyncio",
)
PRECISION_NAMES = (
    "torch.float16",
    "torch.half",
    "torch.bfloat16",
    "torch.complex32",
    "torch.chalf",
    "torch.HalfTensor",
    "torch.BFloat16Tensor",
    "torch.cuda.HalfTensor",
    "torch.cuda.BFloat16Tensor",
    "torch.autocast",
    "torch.amp",
    "torch.cuda.amp",
    "torch.cpu.amp",
    "torch.float8_e4m3fn",
    "torch.float8_e5m2",
    "torch.float8_e4m3fnuz",
    "torch.float8_e5m2fnuz",
)
PRECISION_ATTRS = frozenset(
    {
        "allow_tf32",
        "allow_fp16_reduced_precision_reduction",
        "allow_bf16_reduced_precision_reduction",
        "fp32_precision",
    }
)
DOWNCAST_METHODS = frozenset({"half", "bfloat16"})
TIMER_CLASSES = frozenset({"torch.cuda.Event", "torch.Event", "torch.cuda.streams.Event"})
TENSOR_CLASSES = frozenset(
    {
        "torch.Tensor",
        "torch.nn.Parameter",
        "torch.nn.parameter.Parameter",
        "torch.nn.Buffer",
        "torch.nn.parameter.Buffer",
    }
)
SUBCLASS_METHODS = frozenset({"as_subclass", "_make_subclass", "_make_wrapper_subclass"})
SUBCLASS_HOOKS = frozenset({"__torch_function__", "__torch_dispatch__"})
ALLOCATORS = frozenset(
    {
        "torch.empty",
        "torch.empty_like",
        "torch.empty_strided",
        "torch.zeros",
        "torch.zeros_like",
        "torch.ones",
        "torch.ones_like",
        "torch.full",
        "torch.full_like",
    }
)
FORBIDDEN_BUILTINS = frozenset(
    {"exec", "eval", "compile", "__import__", "open", "globals", "locals", "vars", "breakpoint", "input"}
)
CACHE_DECORATORS = frozenset({"cache", "lru_cache", "cached_property", "memoize", "memoized"})
MUTATORS = frozenset({"append", "extend", "insert", "update", "setdefault", "add", "__setitem__", "appendleft", "put"})

MSG_REFERENCE_IMPORT = "imports the reference ({name}); write the computation in kernels/*.cu instead"
MSG_REFERENCE_USE = "uses the reference class Model; ModelNew must compute with its own kernels"
MSG_MODULE_PATCH = "assigns {name}: patching a module (timers, synchronize, torch) is not allowed"
MSG_STATE = "{what} keeps state across calls (result caches, call counters); compute every output on every call"
MSG_CACHE = "{what} caches results between calls; compute every output on every call"
MSG_BUFFER = (
    "{what} keeps an allocated buffer across calls; allocate outputs per call (the caching allocator makes that cheap)"
)
MSG_PRECISION = "{name} in an fp32 task lowers precision; compute and accumulate in float32"
MSG_PRECISION_FLAG = "touches {name} in an fp32 task (TF32/reduced-precision math); leave the flags alone"
MSG_DOWNCAST = ".{name}() in an fp32 task is a precision downgrade; keep float32 end to end"
MSG_SUBCLASS = "{what}: outputs must be plain tensors written by your kernels, not tensor subclasses"
MSG_BUILTIN = "{name}() can run or read arbitrary code and files; call your kernels directly"
MSG_DUNDER = (
    "{name} reaches into interpreter internals (globals, classes, closures, code); "
    "use tensors, their public methods and your kernels"
)
MSG_FRAME = (
    "{name} reaches frames, code objects or tracebacks (and through them every module); "
    "use tensors, their public methods and your kernels"
)
MSG_DUNDER_DEF = (
    "def {name} hooks into the interpreter (class creation, pickling, attribute lookup, "
    "finalizers); write ordinary methods"
)
MSG_REFLECT_COMPUTED = "{fn}() with a computed name can reach anything; write obj.attr with the name you use"
MSG_REFLECT_VALUE = "{fn} used as a value (not called with a literal name) can reach anything; write obj.attr"
MSG_MODULE = (
    "{path} reaches the module `{name}` through an attribute; model_new.py may use only torch's "
    "tensor API and your kernels (no os, sys, ctypes, numpy...)"
)
MSG_MODULE_NAME = "the name `{name}` is a module model_new.py has no access to; use torch and your kernels"
MSG_RUNTIME = (
    "{path}: kernel_runtime offers only load_kernels(); call kernel_runtime.load_kernels() and use its launchers"
)
MSG_CROSSING = (
    "{what} moves tensor data out of torch (host copies, numpy, DLPack, raw pointers or storage); "
    "forward may only allocate, take views and call your kernels"
)
MSG_DATA_TENSOR = (
    "{what} in code forward runs builds a tensor from Python data; compute in your kernels "
    "(make constant tensors once in __init__)"
)


def name_rules(name: str, *, store: bool, task_fp32: bool) -> list[tuple[str, str]]:
    """The (guard, message) pairs a resolved module path triggers."""
    out = []
    parts = name.split(".")
    escape = module_escape(parts)
    if escape:
        out.append(escape)
    # F.torch.ops is torch.ops: judge a path from its last `torch`
    last_torch = max((i for i, p in enumerate(parts) if p == "torch"), default=0)
    canon = ".".join(parts[last_torch:])
    crossing = next((p for p in parts[1:] if p in CROSSING_ATTRS), None) or (
        parts[-1] if parts[0] == "torch" and parts[-1].endswith("Storage") else None
    )
    if crossing:
        out.append(("tensor_crossing", MSG_CROSSING.format(what=name)))
    if any(p.startswith("_") and not p.endswith("__") for p in parts):
        out.append(
            (
                "forbidden_call",
                f"{name} is private API (dispatcher, compiler, allocator internals); "
                "use only public torch calls and your kernels",
            )
        )
    elif _under(canon, FORBIDDEN):
        out.append(
            (
                "forbidden_call",
                f"{name} is not for candidates (compilers, op registries, global "
                "state, files, code from strings); do the work in kernels/*.cu",
            )
        )
    if store and _under(canon, ("torch.backends",)):
        out.append(("forbidden_call", f"writes {name}: backend flags belong to the harness; leave them"))
    if _under(canon, SIDE_STREAM):
        out.append(
            (
                "side_stream",
                f"{name}: work on other streams, graphs or threads escapes timing; "
                "launch on the current stream (the binding passes it)",
            )
        )
    if task_fp32 and _under(canon, PRECISION_NAMES):
        out.append(("precision", MSG_PRECISION.format(name=name)))
    return out


def module_escape(parts: list[str]) -> tuple[str, str] | None:
    """module_escape for a resolved path (torch.os, F.torch.sys, kernel_runtime.ctypes), or None."""
    if parts[0] == "kernel_runtime" and len(parts) > 1 and ".".join(parts[:2]) not in RUNTIME_API:
        return "module_escape", MSG_RUNTIME.format(path=".".join(parts[:2]))
    if parts[0] not in MODULE_ROOTS:
        return None
    for i, p in enumerate(parts[1:], 1):
        if p in MODULE_NAMES or (p in SOFT_MODULE_NAMES and ".".join(parts[: i + 1]) not in SOFT_MODULE_OK):
            return "module_escape", MSG_MODULE.format(path=".".join(parts[: i + 1]), name=p)
    return None


def _under(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)
