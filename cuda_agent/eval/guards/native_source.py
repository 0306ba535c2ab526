"""What the sources say about a built object's writable data, read with tree-sitter-cuda.

nvcc gives every `__device__`, `__constant__` and `__managed__` variable a host shadow in .bss,
and in the object they look alike (`_ZL5table`). `__constant__` is read-only on the device and
allowed; the others keep state between calls. The object cannot tell them apart (the flag is an
immediate argument of the registration call), so the declarations are read here, from the
source and the local headers it includes. A name declared with a macro in place of the keyword
is not recognised and stays a finding (fail closed). The statics that hold only vendor
configuration (a cuBLAS handle, a cached algorithm) are judged by native_config.py.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.eval.guards.native_config import config_statics
from cuda_agent.eval.guards.static_cu import _parser

_DECLARATORS = ("init_declarator", "array_declarator", "pointer_declarator", "reference_declarator")


@dataclass
class SourceHints:
    constant: set[str] = field(default_factory=set)  # __constant__ variables
    device: set[str] = field(default_factory=set)  # __device__ / __managed__ variables
    # (function or None, name) of statics holding vendor configuration only (native_config.py)
    handles: set[tuple[str | None, str]] = field(default_factory=set)
    containers: set[tuple[str | None, str]] = field(default_factory=set)  # those that are std::map/unordered_map
    misused: dict[tuple[str | None, str], str] = field(default_factory=dict)  # configuration statics that are not
    exit_calls: bool = False  # the sources name __cxa_atexit or atexit themselves


def source_hints(paths: Iterable[Path], defined: Iterable[str] = ()) -> SourceHints:
    """`defined`: the symbols the library's objects define (see native_config.config_statics)."""
    hints = SourceHints()
    trees = []
    for path in paths:
        try:
            trees.append(_parser().parse(Path(path).read_bytes()))
        except OSError:
            continue
    for tree in trees:
        stack = [tree.root_node]
        while stack:
            n = stack.pop()
            if n.type == "declaration":
                _declaration(n, hints)
            elif n.type == "identifier" and n.text in (b"__cxa_atexit", b"atexit", b"at_quick_exit"):
                hints.exit_calls = True
            stack.extend(n.children)
    for static, why in config_statics(trees, frozenset(defined)):
        key = (static.function, static.name)
        if why is None:
            hints.handles.add(key)
            if static.kind == "container":
                hints.containers.add(key)
        else:
            hints.misused[key] = f"{static.name} holds vendor configuration but {why}"
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


def _declared_name(d) -> str | None:
    while d is not None and d.type in _DECLARATORS:
        d = d.child_by_field_name("declarator")
    return d.text.decode(errors="replace") if d is not None and d.type == "identifier" else None
