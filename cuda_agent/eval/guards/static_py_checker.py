"""The second pass over model_new.py: an `ast` visitor that applies the rules of
static_py_rules.py to every import, name, attribute, call, class and function, with the names
resolved by the first pass (static_py_names.py), and collects the findings."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from cuda_agent.eval.guards.static_py_names import FileNames, is_called, is_container, is_name, self_attr
from cuda_agent.eval.guards.static_py_rules import (
    ALLOCATORS,
    CACHE_DECORATORS,
    CROSSING_ATTRS,
    CROSSING_METHODS,
    DATA_TENSORS,
    DOWNCAST_METHODS,
    DUNDER_ATTRS_OK,
    DUNDER_DEFS,
    DUNDER_NAMES_OK,
    FORBIDDEN_BUILTINS,
    FRAME_ATTRS,
    LEGACY_TENSOR,
    MODULE_NAMES,
    MSG_BUFFER,
    MSG_BUILTIN,
    MSG_CACHE,
    MSG_CROSSING,
    MSG_DATA_TENSOR,
    MSG_DOWNCAST,
    MSG_DUNDER,
    MSG_DUNDER_DEF,
    MSG_FRAME,
    MSG_MODULE,
    MSG_MODULE_NAME,
    MSG_MODULE_PATCH,
    MSG_PRECISION_FLAG,
    MSG_REFERENCE_IMPORT,
    MSG_REFERENCE_USE,
    MSG_REFLECT_COMPUTED,
    MSG_REFLECT_VALUE,
    MSG_STATE,
    MSG_SUBCLASS,
    MUTATORS,
    PRECISION_ATTRS,
    REFERENCE_MODULES,
    REFERENCE_PATH,
    REFLECTIVE,
    REFLECTIVE_ATTRS,
    SUBCLASS_HOOKS,
    SUBCLASS_METHODS,
    TENSOR_CLASSES,
    TIMER_CLASSES,
    name_rules,
)
from cuda_agent.eval.verdict import Finding, Severity


class Checker(FileNames, ast.NodeVisitor):
    def __init__(self, filename: str, task_fp32: bool, allow_precision: bool, allowed_imports: Iterable[str]) -> None:
        super().__init__()
        self.filename = filename
        self.task_fp32 = task_fp32
        self.precision_severity: Severity = "warn" if allow_precision else "fail"
        self.allowed = frozenset(allowed_imports)
        self.findings: list[Finding] = []

    # -- reporting ---------------------------------------------------------------------
    def add(self, guard: str, node: ast.AST, message: str, severity: Severity | None = None) -> None:
        severity = severity or (self.precision_severity if guard == "precision" else "fail")
        self.findings.append(
            Finding(
                guard=guard, message=message, severity=severity, where=f"{self.filename}:{getattr(node, 'lineno', 0)}"
            )
        )

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
                self.add(
                    "import_not_allowed",
                    node,
                    f"relative import `from {'.' * node.level}{module} import "
                    f"...`; keep the candidate in model_new.py and kernels/",
                )
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
            self.add(
                "import_not_allowed",
                node,
                f"imports {module}; model_new.py may import only "
                f"{', '.join(sorted(self.allowed))}: do the work in kernels/*.cu",
            )
            return False
        return True

    # -- names and attributes ----------------------------------------------------------
    def check_name(self, node: ast.AST, name: str, ctx: ast.expr_context) -> bool:
        """Apply the per-name rules to a resolved module path; True if one fired."""
        rules = name_rules(name, store=isinstance(ctx, (ast.Store, ast.Del)), task_fp32=self.task_fp32)
        for guard, message in rules:
            self.add(guard, node, message)
        return bool(rules)

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
            elif self.in_forward() and self_attr(node):
                self.check_self_store(node)
        if node.attr in PRECISION_ATTRS and self.task_fp32:
            self.add("precision", node, MSG_PRECISION_FLAG.format(name=node.attr))
        self.check_attr_name(node, node.attr, node.value, called=is_called(node))
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
        elif attr in MODULE_NAMES and not is_name(base, "self"):
            # self.<name> is the candidate's own attribute: whatever it holds was reached elsewhere
            self.add("module_escape", node, MSG_MODULE.format(path=_describe_attr(base, attr), name=attr))
        if attr == "modules" and (is_name(base, "sys") or getattr(base, "attr", None) == "sys"):
            self.add("module_escape", node, MSG_MODULE.format(path="sys.modules", name="sys"))

    def visit_Name(self, node: ast.Name) -> None:
        # Binding a name (x = torch.backends.cudnn.enabled) writes nothing; using an alias uses its target.
        if isinstance(node.ctx, ast.Load) and self.aliases.get(node.id, node.id) != node.id:
            self.check_name(node, self.aliases[node.id], node.ctx)
        if node.id in FORBIDDEN_BUILTINS and node.id not in self.bound:
            self.add("forbidden_call", node, MSG_BUILTIN.format(name=node.id))
        if (
            node.id.startswith("__")
            and node.id.endswith("__")
            and node.id not in DUNDER_NAMES_OK
            and node.id not in FORBIDDEN_BUILTINS
        ):
            self.add("interpreter_internals", node, MSG_DUNDER.format(name=node.id))
        if node.id in REFLECTIVE and node.id not in self.bound and not is_called(node):
            self.add("interpreter_internals", node, MSG_REFLECT_VALUE.format(fn=node.id))
        if node.id in MODULE_NAMES and node.id not in self.bound and node.id not in self.aliases:
            # never bound here: it could only come from an injected builtin (imports report themselves)
            self.add("module_escape", node, MSG_MODULE_NAME.format(name=node.id))

    def visit_Constant(self, node: ast.Constant) -> None:
        if (
            isinstance(node.value, str)
            and id(node) not in self.docstrings
            and REFERENCE_PATH.search(node.value.strip())
        ):
            self.add(
                "reference_access",
                node,
                f"refers to the reference file ({node.value.strip()!r}); "
                "the candidate must not read the task's code or data",
            )

    # -- calls -------------------------------------------------------------------------
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id in REFLECTIVE and func.id not in self.bound:
            self.check_reflective(node, func.id)
        if is_name(func, "type") and len(node.args) == 3 and "type" not in self.bound:
            self.add("forbidden_call", node, "builds a class with type(name, bases, dict); define classes plainly")
        if isinstance(func, ast.Attribute):
            if func.attr in DOWNCAST_METHODS and not node.args and self.task_fp32:
                self.add("precision", node, MSG_DOWNCAST.format(name=func.attr))
            if func.attr in SUBCLASS_METHODS:
                self.add("tensor_subclass", node, MSG_SUBCLASS.format(what=f".{func.attr}()"))
            if self.in_method() and self.holder_attr(func.value) in self.self_containers and func.attr in MUTATORS:
                self.add("memoization", node, MSG_CACHE.format(what=f"{ast.unparse(func)}"))
            if (
                isinstance(func.value, ast.Name)
                and func.value.id in self.containers
                and func.attr in MUTATORS
                and self.funcs
            ):
                self.add("memoization", node, MSG_CACHE.format(what=f"{func.value.id}.{func.attr}"))
        name = self.dotted(func)
        if name == "torch.set_float32_matmul_precision" and self.task_fp32 and not _const_arg(node, "highest"):
            self.add("precision", node, "lowers float32 matmul precision; an fp32 task runs at 'highest'")
        if name == "kernel_runtime.load_kernels" and (node.args or node.keywords):
            self.add(
                "forbidden_call",
                node,
                "load_kernels() with a path could load a library built elsewhere; "
                "call kernel_runtime.load_kernels() with no arguments",
            )
        if is_name(func, "Model") and "Model" not in self.classes:
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
            if fn in ("setattr", "delattr") and self.in_forward() and is_name(target, "self"):
                self.add("memoization", node, MSG_STATE.format(what=f"{fn}(self, ...)"))
            return
        if const is not None:
            self.check_name(node, f"{base}.{const}", ast.Store() if fn in ("setattr", "delattr") else ast.Load())
        if fn in ("setattr", "delattr"):
            self.add("timer_patch", node, MSG_MODULE_PATCH.format(name=f"{base}.{const or '<computed>'}"))

    # -- statements --------------------------------------------------------------------
    def visit_Try(self, node: ast.AST) -> None:
        self.add(
            "fallback",
            node,
            "try/except in model_new.py (a fallback when the kernel fails); let errors surface and fix the kernel",
        )
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
        if self.in_method() and self_attr(node.target):
            self.add("memoization", node, MSG_STATE.format(what=f"self.{self_attr(node.target)} {_op(node)}="))
        self.generic_visit(node)

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        if any(k.arg == "metaclass" for k in node.keywords) or any(is_name(b, "type") for b in node.bases):
            self.add(
                "interpreter_internals",
                node,
                f"class {node.name} changes how classes are made "
                "(a metaclass); write plain classes deriving from nn.Module",
            )
        for base in node.bases:
            name = self.dotted(base)
            if name in TIMER_CLASSES:
                self.add("timer_patch", node, f"subclasses {name}; time nothing yourself, the harness times")
            if name in TENSOR_CLASSES:
                self.add("tensor_subclass", node, MSG_SUBCLASS.format(what=f"class {node.name}({name})"))
            if is_name(base, "Model") and "Model" not in self.classes:
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

    def check_self_store(self, node: ast.Attribute) -> None:
        if isinstance(getattr(node, "_parent", None), ast.AugAssign):
            return  # visit_AugAssign reports it
        value = _assigned_value(node)
        if isinstance(value, ast.Constant):
            return  # a flag or counter reset to a literal carries no result
        what = f"self.{node.attr} ="
        if isinstance(value, ast.Call) and self.dotted(value.func) in ALLOCATORS:
            self.add("memoization", node, MSG_BUFFER.format(what=what), severity="warn")
        else:
            self.add("memoization", node, MSG_STATE.format(what=what))


def _describe_attr(base: ast.AST, attr: str) -> str:
    text = ast.unparse(base)
    return f"{text if len(text) <= 40 else '...'}.{attr}"


def _const_arg(node: ast.Call, value: str) -> bool:
    return bool(node.args) and isinstance(node.args[0], ast.Constant) and node.args[0].value == value


def _op(node: ast.AugAssign) -> str:
    return {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}.get(type(node.op), "op")


def _assigned_value(target: ast.Attribute) -> ast.expr | None:
    parent = getattr(target, "_parent", None)
    return parent.value if isinstance(parent, (ast.Assign, ast.AnnAssign)) else None
