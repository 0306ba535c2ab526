"""What the names of model_new.py mean, from a first pass over its tree before the guards run:
the modules its imports and simple aliases stand for (`import torch.cuda as tc; c = tc` makes
`c.synchronize` torch.cuda.synchronize), every name it binds (which shadows a builtin), its
classes and containers, its docstrings, and the functions forward runs. The checker
(static_py_checker.py) builds on this and asks where its walk is (inside forward, a method...)."""

from __future__ import annotations

import ast

_CONTAINER_CALLS = frozenset(
    {
        "dict",
        "list",
        "set",
        "defaultdict",
        "OrderedDict",
        "deque",
        "Counter",
        "WeakValueDictionary",
        "WeakKeyDictionary",
    }
)


class FileNames:
    """The first pass's answers (`prepare`), and the function stack the second pass keeps."""

    def __init__(self) -> None:
        self.aliases: dict[str, str] = {}  # local name -> dotted module path
        self.bound: set[str] = set()  # every name the file binds (shadows builtins)
        self.containers: set[str] = set()  # module-level dict/list/set names
        self.self_containers: set[str] = set()  # self.<attr> set to a dict/list/set somewhere
        self.classes: set[str] = set()
        self.docstrings: set[int] = set()
        self.funcs: list[str] = []  # enclosing function names, innermost last
        self.func_nodes: list[ast.AST] = []  # the same, as nodes
        self.per_call: set[int] = set()  # ids of the function nodes forward runs (by name, transitively)

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
                self.self_containers.update(a for t in targets if (a := self_attr(t)))

    def dotted(self, node: ast.AST) -> str | None:
        """The module path an expression names (torch.cuda.synchronize), or None."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if (
            isinstance(node, ast.Call)
            and is_name(node.func, "getattr")
            and len(node.args) >= 2
            and isinstance(node.args[1], ast.Constant)
            and isinstance(node.args[1].value, str)
        ):
            base = self.dotted(node.args[0])
            return None if base is None else ".".join([base, node.args[1].value, *reversed(parts)])
        if isinstance(node, ast.Name) and node.id in self.aliases:
            return ".".join([self.aliases[node.id], *reversed(parts)])
        return None

    # -- where the walk is --------------------------------------------------------------

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
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and (node.value.id == "self" or node.value.id in self.classes)
        ):
            return node.attr
        return None


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


def is_name(node: ast.AST | None, *names: str) -> bool:
    return isinstance(node, ast.Name) and node.id in names


def is_called(node: ast.AST) -> bool:
    """node is the function of a call: `node(...)`."""
    parent = getattr(node, "_parent", None)
    return isinstance(parent, ast.Call) and parent.func is node


def self_attr(node: ast.AST) -> str | None:
    if isinstance(node, ast.Attribute) and is_name(node.value, "self"):
        return node.attr
    return None


def is_container(node: ast.AST | None) -> bool:
    """A dict/list/set display or constructor: the shape of a cache."""
    if isinstance(node, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)):
        return True
    if isinstance(node, ast.Call):
        f = node.func
        return (f.id if isinstance(f, ast.Name) else getattr(f, "attr", None)) in _CONTAINER_CALLS
    return False
