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
    "torch.ops", "torch.library", "torch.compile", "torch.jit", "torch.fx", "torch.export",
    "torch.utils.cpp_extension", "torch.overrides", "torch.hub", "torch.load", "torch.save",
    "torch.from_file", "torch.classes", "torch.set_default_dtype", "torch.set_default_device",
    "torch.set_default_tensor_type", "torch.set_flush_denormal", "torch.cuda.memory",
)
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
DUNDER_ESCAPES = frozenset({"__globals__", "__code__", "__builtins__", "__subclasses__", "__bases__",
                            "__mro__", "__closure__", "__loader__", "__spec__", "__dict__", "__class__"})
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
MSG_DUNDER = "{name} reaches into interpreter internals; use the public API"


def name_rules(name: str, *, store: bool, task_fp32: bool) -> list[tuple[str, str]]:
    """The (guard, message) pairs a resolved module path triggers."""
    out = []
    parts = name.split(".")
    if any(p.startswith("_") and not p.endswith("__") for p in parts):
        out.append(("forbidden_call", f"{name} is private API (dispatcher, compiler, allocator internals); "
                                      "use only public torch calls and your kernels"))
    elif _under(name, FORBIDDEN):
        out.append(("forbidden_call", f"{name} is not for candidates (compilers, op registries, global "
                                      "state, files); do the work in kernels/*.cu"))
    if store and _under(name, ("torch.backends",)):
        out.append(("forbidden_call", f"writes {name}: backend flags belong to the harness; leave them"))
    if _under(name, SIDE_STREAM):
        out.append(("side_stream", f"{name}: work on other streams, graphs or threads escapes timing; "
                                   "launch on the current stream (the binding passes it)"))
    if task_fp32 and _under(name, PRECISION_NAMES):
        out.append(("precision", MSG_PRECISION.format(name=name)))
    return out


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
        if node.attr in DUNDER_ESCAPES:
            self.add("forbidden_call", node, MSG_DUNDER.format(name=node.attr))
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        # Binding a name (x = torch.backends.cudnn.enabled) writes nothing; using an alias uses its target.
        if isinstance(node.ctx, ast.Load) and self.aliases.get(node.id, node.id) != node.id:
            self.check_name(node, self.aliases[node.id], node.ctx)
        if node.id in FORBIDDEN_BUILTINS and node.id not in self.bound:
            self.add("forbidden_call", node, MSG_BUILTIN.format(name=node.id))
        if node.id in DUNDER_ESCAPES:
            self.add("forbidden_call", node, MSG_DUNDER.format(name=node.id))

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and id(node) not in self.docstrings \
                and REFERENCE_PATH.search(node.value.strip()):
            self.add("reference_access", node, f"refers to the reference file ({node.value.strip()!r}); "
                     "the candidate must not read the task's code or data")

    # -- calls -------------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if _is_name(func, "getattr", "setattr", "delattr") and node.args and func.id not in self.bound:
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
        self.generic_visit(node)

    def check_reflective(self, node: ast.Call, fn: str) -> None:
        base = self.dotted(node.args[0])
        key = node.args[1] if len(node.args) > 1 else None
        const = key.value if isinstance(key, ast.Constant) and isinstance(key.value, str) else None
        if const in PRECISION_ATTRS and self.task_fp32:
            self.add("precision", node, MSG_PRECISION_FLAG.format(name=const))
        if base is None:
            if fn in ("setattr", "delattr") and self.in_forward() and _is_name(node.args[0], "self"):
                self.add("memoization", node, MSG_STATE.format(what=f"{fn}(self, ...)"))
            return
        if fn in ("setattr", "delattr"):
            self.add("timer_patch", node, MSG_MODULE_PATCH.format(name=f"{base}.{const or '<computed>'}"))
        elif const is None:
            self.add("forbidden_call", node, f"{fn}() on {base} with a computed name; name what you use")

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
        for default in node.args.defaults + [d for d in node.args.kw_defaults if d is not None]:
            if is_container(default):
                self.add("memoization", default, MSG_CACHE.format(what=f"a mutable default argument of {node.name}"))
        self.funcs.append(node.name)
        self.generic_visit(node)
        self.funcs.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def in_method(self) -> bool:
        """Inside a function that can run per call (anything but __init__)."""
        return bool(self.funcs) and "__init__" not in self.funcs

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


def _is_name(node: ast.AST, *names: str) -> bool:
    return isinstance(node, ast.Name) and node.id in names


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
