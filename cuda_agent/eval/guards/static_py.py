"""Static guards for model_new.py.

Python's own `ast` rather than tree-sitter-python: it is the grammar the interpreter runs,
so what it parses is exactly what executes (tree-sitter accepts code CPython rejects
and recovers from errors with guesses). Names are resolved through the file's imports
and simple aliases, so `import torch.cuda as tc; tc.synchronize = f` is seen as a write
to torch.cuda. Comments never reach the tree; docstrings are skipped.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable

from cuda_agent.eval.verdict import Finding, Severity

DEFAULT_ALLOWED_IMPORTS = frozenset({
    "torch", "torch.nn", "torch.nn.functional", "math", "typing", "__future__", "kernel_runtime",
})
REFERENCE_MODULES = frozenset({"model"})  # the task module as a workspace shows it
REFERENCE_PATH = re.compile(r"(^|[\\/])model\.py$")

# Resolved names (and everything under them) that no candidate needs.
FORBIDDEN = (
    "torch.ops", "torch.library", "torch.compile", "torch.compiler", "torch.jit", "torch.fx", "torch.export",
    "torch.onnx", "torch.utils", "torch.overrides", "torch.hub", "torch.load", "torch.save", "torch.package",
    "torch.serialization", "torch.storage", "torch.distributed", "torch.profiler", "torch.autograd.profiler",
    "torch.from_file", "torch.classes", "torch.set_default_dtype", "torch.set_default_device",
    "torch.set_default_tensor_type", "torch.set_flush_denormal", "torch.cuda.memory", "torch.cuda.cudart",
    "torch.cuda.caching_allocator_alloc", "torch.cuda.caching_allocator_delete", "torch.cuda.MemPool",
    "torch.cuda.use_mem_pool", "torch.cuda.CUDAPluggableAllocator", "torch.cuda.change_current_allocator",
    "torch.cuda.jiterator", "torch.cuda.tunable", "typing.get_type_hints", "typing.ForwardRef",
    "typing.evaluate_forward_ref",
)
# Modules reachable as attributes of other modules (torch.os, torch.cuda.traceback, typing.sys,
# kernel_runtime.ctypes...). These names are never an honest attribute of a tensor, a module or a
# builtin container, so they fire on any attribute chain (`[torch][0].os` too), as a literal
# getattr/hasattr name, and as a bare name the file does not bind. tests/eval/test_static_escapes.py
# checks every module an imported torch exposes this way is caught.
MODULE_NAMES = frozenset({
    "os", "posix", "nt", "posixpath", "ntpath", "genericpath", "_osp", "sys", "subprocess", "ctypes", "_ctypes",
    "cffi", "importlib", "importlib_metadata", "importlib_resources", "pkgutil", "zipimport", "runpy", "site",
    "sysconfig", "builtins", "__builtin__", "gc", "inspect", "dis", "opcode", "code", "codeop", "pydoc",
    "traceback", "linecache", "tokenize", "faulthandler", "tracemalloc", "atexit", "warnings", "_warnings",
    "logging", "io", "_io", "pathlib", "shutil", "tempfile", "glob", "fnmatch", "mmap", "fcntl", "resource",
    "pty", "tty", "termios", "socket", "socketserver", "ssl", "http", "urllib", "requests", "selectors",
    "asyncio", "signal", "threading", "_thread", "multiprocessing", "python_multiprocessing", "mp",
    "concurrent", "queue", "sched", "contextvars", "types", "weakref", "_weakref", "marshal", "pickle",
    "_pickle", "cPickle", "pickletools", "_compat_pickle", "copyreg", "dill", "cloudpickle", "shelve",
    "dbm", "sqlite3", "zipfile", "tarfile", "gzip", "bz2", "lzma", "zlib", "functools", "_functools",
    "operator", "_operator", "contextlib", "dataclasses", "string", "unittest", "mock", "pdb", "bdb",
    "cProfile", "pstats", "timeit", "platform", "getpass", "pwd", "grp", "webbrowser", "argparse",
    "difflib", "pprint", "textwrap", "hashlib", "uuid", "base64", "locale", "typing_extensions", "torchgen",
    "numpy", "np", "scipy", "sympy", "mpmath", "networkx", "optree", "triton", "jinja2", "filelock",
    "fsspec", "pynvml", "psutil", "setuptools", "pkg_resources", "distutils", "packaging", "_C", "_VF",
    "_ops", "_dynamo", "_inductor", "_sys", "_os",
})
# Module aliases that are also ordinary attribute names (x.t(), d.copy(), loss.reduction): they
# fire only on a path resolved through the file's imports (torch.nn.modules.module.copy), never
# where that path is an honest attribute (SOFT_MODULE_OK).
SOFT_MODULE_NAMES = frozenset({
    "t", "copy", "copymodule", "re", "stdlib_re", "random", "time", "datetime", "abc", "enum", "json",
    "struct", "numbers", "keyword", "collections", "container_abcs", "_collections_abc", "itertools", "it",
    "itl", "heapq", "bisect", "math", "cmath", "typing", "errno", "reduction", "reducer", "ast", "__future__",
})
SOFT_MODULE_OK = frozenset({"torch.t", "torch.Tensor.t", "torch.random"})
MODULE_ROOTS = frozenset({"torch", "math", "typing", "kernel_runtime"})
RUNTIME_API = frozenset({"kernel_runtime.load_kernels"})
# Interpreter internals: every dunder attribute but these, frames, code objects, tracebacks, cells.
DUNDER_ATTRS_OK = frozenset({"__init__", "__name__", "__qualname__", "__doc__", "__module__"})
DUNDER_NAMES_OK = frozenset({"__name__", "__doc__", "__file__", "__all__", "__debug__", "__qualname__",
                             "__module__", "__slots__"})
FRAME_ATTRS = frozenset({
    "gi_frame", "gi_code", "gi_yieldfrom", "gi_suspended", "cr_frame", "cr_code", "cr_await", "cr_origin",
    "ag_frame", "ag_code", "ag_await", "f_back", "f_locals", "f_globals", "f_builtins", "f_code", "f_lasti",
    "f_lineno", "f_trace", "f_trace_lines", "f_trace_opcodes", "f_generator", "tb_frame", "tb_next",
    "tb_lasti", "tb_lineno", "co_consts", "co_code", "co_names", "co_varnames", "co_cellvars", "co_freevars",
    "co_filename", "co_name", "co_qualname", "co_flags", "co_lnotab", "co_linetable", "co_exceptiontable",
    "co_positions", "co_lines", "co_argcount", "co_posonlyargcount", "co_kwonlyargcount", "co_nlocals",
    "co_stacksize", "co_firstlineno", "cell_contents", "func_globals", "func_code", "func_closure",
    "im_func", "im_self", "_getframe", "currentframe", "walk_stack", "walk_tb", "exc_info",
})
# Methods that run candidate code at moments the harness does not choose (class creation, pickling,
# attribute lookup of every name, garbage collection) or make an object pose as an array.
DUNDER_DEFS = frozenset({
    "__getattribute__", "__init_subclass__", "__class_getitem__", "__set_name__", "__mro_entries__",
    "__prepare__", "__instancecheck__", "__subclasscheck__", "__del__", "__reduce__", "__reduce_ex__",
    "__getstate__", "__setstate__", "__getnewargs__", "__getnewargs_ex__",
})
REFLECTIVE = frozenset({"getattr", "setattr", "delattr", "hasattr"})
REFLECTIVE_ATTRS = frozenset({"attrgetter", "methodcaller"})  # operator's getattr by string
# Ways out of torch to host data or raw memory (numpy, DLPack, buffers, storages, pointers).
CROSSING_ATTRS = frozenset({
    "numpy", "tolist", "from_numpy", "dlpack", "from_dlpack", "to_dlpack", "frombuffer", "asarray", "share_memory_",
    "data_ptr", "untyped_storage", "_typed_storage", "UntypedStorage", "TypedStorage", "__array__",
    "__array_interface__", "__array_struct__", "__array_wrap__", "__array_priority__", "__array_function__",
    "__array_ufunc__", "__cuda_array_interface__", "__dlpack__", "__dlpack_device__",
})
CROSSING_METHODS = frozenset({"storage"})  # only when called: `x.storage()`
# Tensors made from Python data: fine in __init__ (constants), not in code forward runs.
DATA_TENSORS = frozenset({"torch.tensor", "torch.as_tensor", "torch.scalar_tensor", "torch.Tensor"})
LEGACY_TENSOR = re.compile(r"^torch\.(cuda\.)?[A-Z]\w*Tensor$")
SIDE_STREAM = (
    "torch.cuda.Stream", "torch.cuda.ExternalStream", "torch.cuda.stream", "torch.cuda.set_stream",
    "torch.cuda.streams", "torch.cuda.graph", "torch.cuda.graphs", "torch.cuda.CUDAGraph",
    "torch.cuda.make_graphed_callables", "torch.Stream", "torch.accelerator.set_stream",
    "torch.multiprocessing", "threading", "_thread", "concurrent", "multiprocessing", "asyncio",
)
PRECISION_NAMES = (
    "torch.float16", "torch.half", "torch.bfloat16", "torch.complex32", "torch.chalf",
    "torch.HalfTensor", "torch.BFloat16Tensor", "torch.cuda.HalfTensor", "torch.cuda.BFloat16Tensor",
    "torch.autocast", "torch.amp", "torch.cuda.amp", "torch.cpu.amp",
    "torch.float8_e4m3fn", "torch.float8_e5m2", "torch.float8_e4m3fnuz", "torch.float8_e5m2fnuz",
)
PRECISION_ATTRS = frozenset({
    "allow_tf32", "allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction",
    "fp32_precision",
})
DOWNCAST_METHODS = frozenset({"half", "bfloat16"})
TIMER_CLASSES = frozenset({"torch.cuda.Event", "torch.Event", "torch.cuda.streams.Event"})
TENSOR_CLASSES = frozenset({"torch.Tensor", "torch.nn.Parameter", "torch.nn.parameter.Parameter",
                            "torch.nn.Buffer", "torch.nn.parameter.Buffer"})
SUBCLASS_METHODS = frozenset({"as_subclass", "_make_subclass", "_make_wrapper_subclass"})
SUBCLASS_HOOKS = frozenset({"__torch_function__", "__torch_dispatch__"})
ALLOCATORS = frozenset({"torch.empty", "torch.empty_like", "torch.empty_strided", "torch.zeros",
                        "torch.zeros_like", "torch.ones", "torch.ones_like", "torch.full", "torch.full_like"})
FORBIDDEN_BUILTINS = frozenset({"exec", "eval", "compile", "__import__", "open", "globals", "locals",
                                "vars", "breakpoint", "input"})
CACHE_DECORATORS = frozenset({"cache", "lru_cache", "cached_property", "memoize", "memoized"})
MUTATORS = frozenset({"append", "extend", "insert", "update", "setdefault", "add", "__setitem__",
                      "appendleft", "put"})
_CONTAINER_CALLS = frozenset({"dict", "list", "set", "defaultdict", "OrderedDict", "deque", "Counter",
                              "WeakValueDictionary", "WeakKeyDictionary"})

MSG_REFERENCE_IMPORT = "imports the reference ({name}); write the computation in kernels/*.cu instead"
MSG_REFERENCE_USE = "uses the reference class Model; ModelNew must compute with its own kernels"
MSG_MODULE_PATCH = "assigns {name}: patching a module (timers, synchronize, torch) is not allowed"
MSG_STATE = "{what} keeps state across calls (result caches, call counters); compute every output on every call"
MSG_CACHE = "{what} caches results between calls; compute every output on every call"
MSG_BUFFER = ("{what} keeps an allocated buffer across calls; allocate outputs per call "
              "(the caching allocator makes that cheap)")
MSG_PRECISION = "{name} in an fp32 task lowers precision; compute and accumulate in float32"
MSG_PRECISION_FLAG = "touches {name} in an fp32 task (TF32/reduced-precision math); leave the flags alone"
MSG_DOWNCAST = ".{name}() in an fp32 task is a precision downgrade; keep float32 end to end"
MSG_SUBCLASS = "{what}: outputs must be plain tensors written by your kernels, not tensor subclasses"
MSG_BUILTIN = "{name}() can run or read arbitrary code and files; call your kernels directly"
MSG_DUNDER = ("{name} reaches into interpreter internals (globals, classes, closures, code); "
              "use tensors, their public methods and your kernels")
MSG_FRAME = ("{name} reaches frames, code objects or tracebacks (and through them every module); "
             "use tensors, their public methods and your kernels")
MSG_DUNDER_DEF = ("def {name} hooks into the interpreter (class creation, pickling, attribute lookup, "
                  "finalizers); write ordinary methods")
MSG_REFLECT_COMPUTED = "{fn}() with a computed name can reach anything; write obj.attr with the name you use"
MSG_REFLECT_VALUE = "{fn} used as a value (not called with a literal name) can reach anything; write obj.attr"
MSG_MODULE = ("{path} reaches the module `{name}` through an attribute; model_new.py may use only torch's "
              "tensor API and your kernels (no os, sys, ctypes, numpy...)")
MSG_MODULE_NAME = "the name `{name}` is a module model_new.py has no access to; use torch and your kernels"
MSG_RUNTIME = ("{path}: kernel_runtime offers only load_kernels(); call kernel_runtime.load_kernels() "
               "and use its launchers")
MSG_CROSSING = ("{what} moves tensor data out of torch (host copies, numpy, DLPack, raw pointers or storage); "
                "forward may only allocate, take views and call your kernels")
MSG_DATA_TENSOR = ("{what} in code forward runs builds a tensor from Python data; compute in your kernels "
                   "(make constant tensors once in __init__)")


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
        parts[-1] if parts[0] == "torch" and parts[-1].endswith("Storage") else None)
    if crossing:
        out.append(("tensor_crossing", MSG_CROSSING.format(what=name)))
    if any(p.startswith("_") and not p.endswith("__") for p in parts):
        out.append(("forbidden_call", f"{name} is private API (dispatcher, compiler, allocator internals); "
                                      "use only public torch calls and your kernels"))
    elif _under(canon, FORBIDDEN):
        out.append(("forbidden_call", f"{name} is not for candidates (compilers, op registries, global "
                                      "state, files, code from strings); do the work in kernels/*.cu"))
    if store and _under(canon, ("torch.backends",)):
        out.append(("forbidden_call", f"writes {name}: backend flags belong to the harness; leave them"))
    if _under(canon, SIDE_STREAM):
        out.append(("side_stream", f"{name}: work on other streams, graphs or threads escapes timing; "
                                   "launch on the current stream (the binding passes it)"))
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
        if p in MODULE_NAMES or (p in SOFT_MODULE_NAMES and ".".join(parts[:i + 1]) not in SOFT_MODULE_OK):
            return "module_escape", MSG_MODULE.format(path=".".join(parts[:i + 1]), name=p)
    return None


def _under(name: str, prefixes: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in prefixes)


def is_container(node: ast.AST | None) -> bool:
    """A dict/list/set display or constructor: the shape of a cache."""
    if isinstance(node, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(node, ast.Call):
        f = node.func
        return (f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)) in _CONTAINER_CALLS
    return False


class _Checker(ast.NodeVisitor):
    def __init__(self, filename: str, task_fp32: bool, allow_precision: bool,
                 allowed_imports: Iterable[str]) -> None:
        self.filename = filename
        self.task_fp32 = task_fp32
        self.precision_severity: Severity = "warn" if allow_precision else "fail"
        self.allowed = frozenset(allowed_imports)
        self.aliases: dict[str, str] = {}  # local name -> dotted module path
        self.bound: set[str] = set()  # every name the file binds (shadows builtins)
        self.containers: set[str] = set()  # module-level dict/list/set names
        self.self_containers: set[str] = set()  # self.<attr> set to a dict/list/set somewhere
        self.classes: set[str] = set()
        self.docstrings: set[int] = set()
        self.funcs: list[str] = []  # enclosing function names, innermost last
        self.func_nodes: list[ast.AST] = []  # the same, as nodes
        self.per_call: set[int] = set()  # ids of the function nodes forward runs (by name, transitively)
        self.findings: list[Finding] = []

    # -- reporting ---------------------------------------------------------------------

    def add(self, guard: str, node: ast.AST, message: str) -> None:
        severity = self.precision_severity if guard == "precision" else "fail"
        self.findings.append(Finding(guard=guard, message=message, severity=severity,
                                     where=f"{self.filename}:{getattr(node, 'lineno', 0)}"))

    # -- first pass: what names mean -----------------------------------------------------

    def prepare(self, tree: ast.Module) -> None:
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for a in node.names:
                    # `import a.b` binds a; `import a.b as c` binds c to a.b
                    self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                for a in node.names:
                    if a.name != "*":
                        self.aliases[a.asname or a.name] = f"{node.module}.{a.name}"
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bound.add(node.name)
                if isinstance(node, ast.ClassDef):
                    self.classes.add(node.name)
                body = node.body
                if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                    self.docstrings.add(id(body[0].value))
            elif isinstance(node, ast.arg):
                self.bound.add(node.arg)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                self.bound.add(node.id)
        if tree.body and isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant):
            self.docstrings.add(id(tree.body[0].value))
        self.per_call = per_call_functions(tree)
        for node in ast.walk(tree):  # aliases of modules by assignment: c = torch.cuda
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                target = self.dotted(node.value)
                if target is not None:
                    self.aliases[node.targets[0].id] = target
        for stmt in tree.body:
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)) and is_container(stmt.value):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                self.containers.update(t.id for t in targets if isinstance(t, ast.Name))
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                for stmt in node.body:
                    if isinstance(stmt, ast.Assign) and is_container(stmt.value):
                        self.self_containers.update(t.id for t in stmt.targets if isinstance(t, ast.Name))
            elif isinstance(node, (ast.Assign, ast.AnnAssign)) and is_container(node.value):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                self.self_containers.update(a for t in targets if (a := _self_attr(t)))

    def dotted(self, node: ast.AST) -> str | None:
        """The module path an expression names (torch.cuda.synchronize), or None."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Call) and _is_name(node.func, "getattr") and len(node.args) >= 2 \
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            base = self.dotted(node.args[0])
            return None if base is None else ".".join([base, node.args[1].value, *reversed(parts)])
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return ".".join([self.aliases[node.id], *reversed(parts)])
        return None

    # -- imports -----------------------------------------------------------------------

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.check_import(node, a.name)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        module = node.module or ""
        if node.level:
            root = module.split(".")[0]
            if root in REFERENCE_MODULES or any(a.name in REFERENCE_MODULES for a in node.names):
                self.add("reference_access", node, MSG_REFERENCE_IMPORT.format(name="." * node.level + module))
            else:
                self.add("import_not_allowed", node, f"relative import `from {'.' * node.level}{module} import "
                         f"...`; keep the candidate in model_new.py and kernels/")
            return
        allowed = self.check_import(node, module)
        for a in node.names:
            if a.name != "*":  # names say more than their module: `from torch.cuda import Stream`
                self.check_name(node, f"{module}.{a.name}", ast.Load())
            elif allowed:
                self.add("import_not_allowed", node, f"`from {module} import *`; import the names you use")

    def check_import(self, node: ast.AST, module: str) -> bool:
        if module.split(".")[0] in REFERENCE_MODULES:
            self.add("reference_access", node, MSG_REFERENCE_IMPORT.format(name=module))
            return False
        if self.check_name(node, module, ast.Load()):
            return False
        if module not in self.allowed:
            self.add("import_not_allowed", node, f"imports {module}; model_new.py may import only "
                     f"{', '.join(sorted(self.allowed))}: do the work in kernels/*.cu")
            return False
        return True

    # -- names and attributes ----------------------------------------------------------

    def check_name(self, node: ast.AST, name: str, ctx: ast.expr_context) -> bool:
        """Apply the per-name rules to a resolved module path; True if one fired."""
        fired = False
        for guard, message in name_rules(name, store=isinstance(ctx, (ast.Store, ast.Del)),
                                          task_fp32=self.task_fp32):
            self.add(guard, node, message)
            fired = True
        return fired

    def visit_Attribute(self, node: ast.Attribute) -> None:
        name = self.dotted(node)
        if name is not None:
            self.check_name(node, name, node.ctx)
        if isinstance(node.ctx, (ast.Store, ast.Del)):
            base = self.dotted(node.value)
            if base is not None and not base.startswith("torch.backends"):
                self.add("timer_patch", node, MSG_MODULE_PATCH.format(name=f"{base}.{node.attr}"))
            elif isinstance(node.value, ast.Name) and node.value.id in self.classes and self.funcs:
                self.add("memoization", node, MSG_STATE.format(what=f"{node.value.id}.{node.attr}"))
            elif self.in_forward() and _self_attr(node):
                self.check_self_store(node)
        if node.attr in PRECISION_ATTRS and self.task_fp32:
            self.add("precision", node, MSG_PRECISION_FLAG.format(name=node.attr))
        self.check_attr_name(node, node.attr, node.value, called=_is_called(node))
        self.generic_visit(node)

    def check_attr_name(self, node: ast.AST, attr: str, base: ast.AST, *, called: bool) -> None:
        """The rules on an attribute name whatever it is read from (x.attr, getattr(x, "attr"))."""
        if attr in CROSSING_ATTRS or (called and attr in CROSSING_METHODS):
            self.add("tensor_crossing", node, MSG_CROSSING.format(what=f".{attr}"))
        elif attr in SUBCLASS_HOOKS:
            self.add("tensor_subclass", node, MSG_SUBCLASS.format(what=attr))
        elif attr.startswith("__") and attr.endswith("__") and attr not in DUNDER_ATTRS_OK:
            self.add("interpreter_internals", node, MSG_DUNDER.format(name=attr))
        elif attr in FRAME_ATTRS:
            self.add("interpreter_internals", node, MSG_FRAME.format(name=attr))
        elif attr in REFLECTIVE_ATTRS:
            self.add("interpreter_internals", node, MSG_REFLECT_COMPUTED.format(fn=attr))
        elif attr in MODULE_NAMES and not _is_name(base, "self"):
            # self.<name> is the candidate's own attribute: whatever it holds was reached elsewhere
            self.add("module_escape", node, MSG_MODULE.format(path=_describe_attr(base, attr), name=attr))
        if attr == "modules" and (_is_name(base, "sys") or getattr(base, "attr", None) == "sys"):
            self.add("module_escape", node, MSG_MODULE.format(path="sys.modules", name="sys"))

    def visit_Name(self, node: ast.Name) -> None:
        # Binding a name (x = torch.backends.cudnn.enabled) writes nothing; using an alias uses its target.
        if isinstance(node.ctx, ast.Load) and self.aliases.get(node.id, node.id) != node.id:
            self.check_name(node, self.aliases[node.id], node.ctx)
        if node.id in FORBIDDEN_BUILTINS and node.id not in self.bound:
            self.add("forbidden_call", node, MSG_BUILTIN.format(name=node.id))
        if node.id.startswith("__") and node.id.endswith("__") and node.id not in DUNDER_NAMES_OK \
                and node.id not in FORBIDDEN_BUILTINS:
            self.add("interpreter_internals", node, MSG_DUNDER.format(name=node.id))
        if node.id in REFLECTIVE and node.id not in self.bound and not _is_called(node):
            self.add("interpreter_internals", node, MSG_REFLECT_VALUE.format(fn=node.id))
        if node.id in MODULE_NAMES and node.id not in self.bound and node.id not in self.aliases:
            # never bound here: it could only come from an injected builtin (imports report themselves)
            self.add("module_escape", node, MSG_MODULE_NAME.format(name=node.id))

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and id(node) not in self.docstrings \
                and REFERENCE_PATH.search(node.value.strip()):
            self.add("reference_access", node, f"refers to the reference file ({node.value.strip()!r}); "
                     "the candidate must not read the task's code or data")

    # -- calls -------------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in REFLECTIVE and func.id not in self.bound:
            self.check_reflective(node, func.id)
        if _is_name(func, "type") and len(node.args) == 3 and "type" not in self.bound:
            self.add("forbidden_call", node, "builds a class with type(name, bases, dict); define classes plainly")
        if isinstance(func, ast.Attribute):
            if func.attr in DOWNCAST_METHODS and not node.args and self.task_fp32:
                self.add("precision", node, MSG_DOWNCAST.format(name=func.attr))
            if func.attr in SUBCLASS_METHODS:
                self.add("tensor_subclass", node, MSG_SUBCLASS.format(what=f".{func.attr}()"))
            if self.in_method() and self.holder_attr(func.value) in self.self_containers and func.attr in MUTATORS:
                self.add("memoization", node, MSG_CACHE.format(what=f"{ast.unparse(func)}"))
            if isinstance(func.value, ast.Name) and func.value.id in self.containers and func.attr in MUTATORS \
                    and self.funcs:
                self.add("memoization", node, MSG_CACHE.format(what=f"{func.value.id}.{func.attr}"))
        name = self.dotted(func)
        if name == "torch.set_float32_matmul_precision" and self.task_fp32 and not _const_arg(node, "highest"):
            self.add("precision", node, "lowers float32 matmul precision; an fp32 task runs at 'highest'")
        if name == "kernel_runtime.load_kernels" and (node.args or node.keywords):
            self.add("forbidden_call", node, "load_kernels() with a path could load a library built elsewhere; "
                     "call kernel_runtime.load_kernels() with no arguments")
        if _is_name(func, "Model") and "Model" not in self.classes:
            self.add("reference_access", node, MSG_REFERENCE_USE)
        if self.in_per_call() and name is not None and (name in DATA_TENSORS or LEGACY_TENSOR.match(name)):
            self.add("tensor_crossing", node, MSG_DATA_TENSOR.format(what=f"{name}()"))
        if self.in_per_call() and isinstance(func, ast.Attribute) and func.attr == "new_tensor":
            self.add("tensor_crossing", node, MSG_DATA_TENSOR.format(what=".new_tensor()"))
        self.generic_visit(node)

    def check_reflective(self, node: ast.Call, fn: str) -> None:
        args = node.args
        target = args[0] if args and not isinstance(args[0], ast.Starred) else None
        key = args[1] if len(args) > 1 else None
        const = key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
        if const is None:
            self.add("interpreter_internals", node, MSG_REFLECT_COMPUTED.format(fn=fn))
        else:
            self.check_attr_name(node, const, target if target is not None else node, called=False)
        if const in PRECISION_ATTRS and self.task_fp32:
            self.add("precision", node, MSG_PRECISION_FLAG.format(name=const))
        base = self.dotted(target) if target is not None else None
        if base is None:
            if fn in ("setattr", "delattr") and self.in_forward() and _is_name(target, "self"):
                self.add("memoization", node, MSG_STATE.format(what=f"{fn}(self, ...)"))
            return
        if const is not None:
            self.check_name(node, f"{base}.{const}", ast.Store() if fn in ("setattr", "delattr") else ast.Load())
        if fn in ("setattr", "delattr"):
            self.add("timer_patch", node, MSG_MODULE_PATCH.format(name=f"{base}.{const or '<computed>'}"))

    # -- statements --------------------------------------------------------------------

    def visit_Try(self, node: ast.AST) -> None:
        self.add("fallback", node, "try/except in model_new.py (a fallback when the kernel fails); "
                 "let errors surface and fix the kernel")
        self.generic_visit(node)

    visit_TryStar = visit_Try

    def visit_With(self, node: ast.With) -> None:
        for item in node.items:
            expr = item.context_expr
            call = expr.func if isinstance(expr, ast.Call) else expr
            last = call.attr if isinstance(call, ast.Attribute) else getattr(call, "id", "")
            if last == "suppress":
                self.add("fallback", node, "contextlib.suppress hides kernel errors; let them surface")
        self.generic_visit(node)

    def visit_Global(self, node: ast.Global) -> None:
        self.add("memoization", node, MSG_STATE.format(what=f"global {', '.join(node.names)}"))

    def visit_Nonlocal(self, node: ast.Nonlocal) -> None:
        self.add("memoization", node, MSG_STATE.format(what=f"nonlocal {', '.join(node.names)}"))

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if isinstance(node.ctx, (ast.Store, ast.Del)) and self.funcs:
            target = node.value
            if isinstance(target, ast.Name) and target.id in self.containers:
                self.add("memoization", node, MSG_CACHE.format(what=f"{target.id}[...] ="))
            elif self.in_method() and self.holder_attr(target) in self.self_containers:
                self.add("memoization", node, MSG_CACHE.format(what=f"{ast.unparse(target)}[...] ="))
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if self.in_method() and _self_attr(node.target):
            self.add("memoization", node, MSG_STATE.format(what=f"self.{_self_attr(node.target)} {_op(node)}="))
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if any(k.arg == "metaclass" for k in node.keywords) or any(_is_name(b, "type") for b in node.bases):
            self.add("interpreter_internals", node, f"class {node.name} changes how classes are made "
                     "(a metaclass); write plain classes deriving from nn.Module")
        for base in node.bases:
            name = self.dotted(base)
            if name in TIMER_CLASSES:
                self.add("timer_patch", node, f"subclasses {name}; time nothing yourself, the harness times")
            if name in TENSOR_CLASSES:
                self.add("tensor_subclass", node, MSG_SUBCLASS.format(what=f"class {node.name}({name})"))
            if _is_name(base, "Model") and "Model" not in self.classes:
                self.add("reference_access", node, MSG_REFERENCE_USE)
        self.generic_visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for dec in node.decorator_list:
            target = dec.func if isinstance(dec, ast.Call) else dec
            name = self.dotted(target) or ""
            last = name.rsplit(".", 1)[-1] or getattr(target, "id", getattr(target, "attr", ""))
            if last in CACHE_DECORATORS:
                self.add("memoization", dec, MSG_CACHE.format(what=f"@{last}"))
        if node.name in SUBCLASS_HOOKS:
            self.add("tensor_subclass", node, MSG_SUBCLASS.format(what=f"def {node.name}"))
        if node.name in DUNDER_DEFS:
            self.add("interpreter_internals", node, MSG_DUNDER_DEF.format(name=node.name))
        elif node.name in CROSSING_ATTRS:
            self.add("tensor_crossing", node, MSG_CROSSING.format(what=f"def {node.name}"))
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            if is_container(default):
                self.add("memoization", default, MSG_CACHE.format(what=f"a mutable default argument of {node.name}"))
        self.funcs.append(node.name)
        self.func_nodes.append(node)
        self.generic_visit(node)
        self.func_nodes.pop()
        self.funcs.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self.func_nodes.append(node)
        self.generic_visit(node)
        self.func_nodes.pop()

    def in_method(self) -> bool:
        """Inside a function that can run per call (anything but __init__)."""
        return bool(self.funcs) and "__init__" not in self.funcs

    def in_per_call(self) -> bool:
        """Inside forward, or a function of this file that forward calls (directly or not)."""
        return any(id(f) in self.per_call for f in self.func_nodes)

    def in_forward(self) -> bool:
        return "forward" in self.funcs or "__call__" in self.funcs

    def holder_attr(self, node: ast.AST) -> str | None:
        """`x` of self.x or SomeClass.x: state that outlives one call."""
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and (node.value.id == "self" or node.value.id in self.classes):
            return node.attr
        return None

    def check_self_store(self, node: ast.Attribute) -> None:
        if isinstance(getattr(node, "_parent", None), ast.AugAssign):
            return  # visit_AugAssign reports it
        value = _assigned_value(node)
        if value is not None and isinstance(value, ast.Constant):
            return  # a flag or counter reset to a literal carries no result
        what = f"self.{node.attr} ="
        if value is not None and (self.dotted(value.func) if isinstance(value, ast.Call) else None) in ALLOCATORS:
            self.findings.append(Finding(guard="memoization", severity="warn", where=f"{self.filename}:{node.lineno}",
                                         message=MSG_BUFFER.format(what=what)))
            return
        self.add("memoization", node, MSG_STATE.format(what=what))


def per_call_functions(tree: ast.Module) -> set[int]:
    """ids of the function nodes forward (or __call__) runs: themselves, what they define, and the
    functions of this file they name (helper(x), self.helper(x), map(helper, ...)), transitively."""
    by_name: dict[str, list[ast.AST]] = {}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            by_name.setdefault(node.name, []).append(node)
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.Lambda):  # helper = lambda v: ...
            for target in node.targets:
                name = target.id if isinstance(target, ast.Name) else getattr(target, "attr", None)
                if name:
                    by_name.setdefault(name, []).append(node.value)
    todo = [*by_name.get("forward", []), *by_name.get("__call__", [])]
    seen: set[int] = set()
    while todo:
        fn = todo.pop()
        if id(fn) in seen:
            continue
        seen.add(id(fn))
        for node in ast.walk(fn):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)) and node is not fn:
                todo.append(node)
            name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
            if name is not None and name != "__init__":
                todo.extend(by_name.get(name, []))
    return seen


def _is_name(node: ast.AST | None, *names: str) -> bool:
    return isinstance(node, ast.Name) and node.id in names


def _is_called(node: ast.AST) -> bool:
    """node is the function of a call: `node(...)`."""
    parent = getattr(node, "_parent", None)
    return isinstance(parent, ast.Call) and parent.func is node


def _describe_attr(base: ast.AST, attr: str) -> str:
    text = ast.unparse(base)
    return f"{text if len(text) <= 40 else '...'}.{attr}"


def _self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and _is_name(node.value, "self"):
        return node.attr
    return None


def _const_arg(node: ast.Call, value: str) -> bool:
    return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == value


def _op(node: ast.AugAssign) -> str:
    return {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}.get(type(node.op), "op")


def _assigned_value(target: ast.Attribute) -> ast.expr | None:
    parent = getattr(target, "_parent", None)
    if isinstance(parent, (ast.Assign, ast.AnnAssign)):
        return parent.value
    return None


def check_model_new(source: str, *, filename: str = "model_new.py", task_fp32: bool,
                    allow_precision: bool = False,
                    allowed_imports: Iterable[str] = DEFAULT_ALLOWED_IMPORTS) -> list[Finding]:
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as e:
        # It can't run either; the worker's import reports the error itself.
        return [Finding(guard="static_parse", severity="info", where=f"{filename}:{e.lineno or 0}",
                        message=f"{filename} does not parse ({e.msg}); static guards skipped")]
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child._parent = node  # type: ignore[attr-defined]
    checker = _Checker(filename, task_fp32, allow_precision, allowed_imports)
    checker.prepare(tree)
    checker.visit(tree)
    return dedupe(checker.findings)


def dedupe(findings: list[Finding]) -> list[Finding]:
    """One finding per guard and line: nested names (torch._C._x) would repeat it."""
    seen: set[tuple[str, str | None]] = set()
    return [f for f in findings if (f.guard, f.where) not in seen and not seen.add((f.guard, f.where))]
