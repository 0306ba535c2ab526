"""What the sources say about a built object's writable data, read with tree-sitter-cuda.

nvcc gives every `__device__`, `__constant__` and `__managed__` variable a host shadow in .bss,
and in the object they look alike (`_ZL5table`). `__constant__` is read-only on the device and
allowed; the others keep state between calls. The object cannot tell them apart (the flag is an
immediate argument of the registration call), so the declarations are read here, from the
source and the local headers it includes. A name declared with a macro in place of the keyword
is not recognised and stays a finding (fail closed).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.eval.guards.native_rules import HANDLE_TYPES
from cuda_agent.eval.guards.static_cu import _parser

_DECLARATORS = ("init_declarator", "array_declarator", "pointer_declarator", "reference_declarator")


@dataclass
class SourceHints:
    constant: set[str] = field(default_factory=set)  # __constant__ variables
    device: set[str] = field(default_factory=set)  # __device__ / __managed__ variables
    handles: set[tuple[str | None, str]] = field(default_factory=set)  # (function or None, name) of handle statics


def source_hints(paths: Iterable[Path]) -> SourceHints:
    hints = SourceHints()
    for path in paths:
        try:
            tree = _parser().parse(Path(path).read_bytes())
        except OSError:
            continue
        stack = [tree.root_node]
        while stack:
            n = stack.pop()
            if n.type == "declaration":
                _declaration(n, hints)
            stack.extend(n.children)
    return hints


def _declaration(n, hints: SourceHints) -> None:
    words = set()
    for c in n.children:
        if c.type in ("type_qualifier", "storage_class_specifier"):
            words.add(c.text.decode(errors="replace"))
        elif c.type in ("__device__", "__managed__", "__constant__", "__shared__"):
            words.add(c.type)
    names = [_declared_name(d) for d in n.children_by_field_name("declarator")]
    names = [x for x in names if x]
    if "__constant__" in words and not words & {"__managed__"}:
        hints.constant.update(names)
    elif words & {"__device__", "__managed__"} and "__shared__" not in words:
        hints.device.update(names)
    kind = n.child_by_field_name("type")
    if "static" in words and kind is not None and kind.text.decode(errors="replace") in HANDLE_TYPES:
        function = _enclosing_function(n)
        scope = _enclosing(n, "function_definition") or n.parent
        hints.handles.update((function, x) for x in names if _only_used_as_handle(scope, x, n))


_NULLS = frozenset({"nullptr", "NULL", "0"})


def _only_used_as_handle(scope, name: str, declaration) -> bool:
    """Whether every use of the handle `name` is one a handle has: created by `cublasCreate(&h)`,
    passed to cuBLAS/cuDNN, compared with null. An assignment or a cast would make it a place to
    keep any pointer across calls, and the static then counts as state."""
    stack = [scope]
    while stack:
        n = stack.pop()
        stack.extend(n.children)
        if n.type != "identifier" or n.text.decode(errors="replace") != name or _inside(n, declaration):
            continue
        parent = n.parent
        if parent.type == "pointer_expression" and parent.text.decode().replace(" ", "") == f"&{name}":
            parent = parent.parent  # &h: only into a vendor call (cublasCreate)
            if parent.type == "argument_list" and _vendor_call(parent.parent):
                continue
            return False
        if parent.type == "argument_list" and _vendor_call(parent.parent):
            continue
        if parent.type == "binary_expression" and parent.child_by_field_name("operator").type in ("==", "!=") and {
                c.text.decode() for c in (parent.child_by_field_name("left"), parent.child_by_field_name("right"))
                } - {name} <= _NULLS:
            continue
        if parent.type == "unary_expression" and parent.child_by_field_name("operator").type == "!":
            continue
        return False
    return True


def _vendor_call(n) -> bool:
    fn = n.child_by_field_name("function") if n is not None and n.type == "call_expression" else None
    return fn is not None and fn.text.decode(errors="replace").startswith(("cublas", "cudnn"))


def _inside(n, ancestor) -> bool:
    while n is not None:
        if n == ancestor:
            return True
        n = n.parent
    return False


def _enclosing(n, kind: str):
    while n is not None and n.type != kind:
        n = n.parent
    return n


def _declared_name(d) -> str | None:
    while d is not None and d.type in _DECLARATORS:
        d = d.child_by_field_name("declarator")
    return d.text.decode(errors="replace") if d is not None and d.type == "identifier" else None


def _enclosing_function(n) -> str | None:
    n = _enclosing(n, "function_definition")
    if n is None:
        return None
    d = n.child_by_field_name("declarator")
    while d is not None and d.type != "function_declarator":
        d = d.child_by_field_name("declarator")
    d = d.child_by_field_name("declarator") if d is not None else None
    # `ns::f` defined out of line: the function's own name is the last part
    return d.text.decode(errors="replace").split("::")[-1] if d is not None else None
