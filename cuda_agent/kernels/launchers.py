"""Find the extern "C" launchers (and __global__ kernels) in kernel sources; read/write launchers.json.

The spec is what runtime.py binds with ctypes, so every parameter must map to something it can
check at call time: a pointer to a known element type (a tensor), a scalar by value (a Python
number), or the stream (passed automatically, always last). Anything else is rejected here, at
build time, with file:line, rather than crashing at call time.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import tree_sitter
import tree_sitter_cuda
from pydantic import BaseModel

from cuda_agent.kernels.objects import write_atomic
from cuda_agent.untrusted_files import SOURCE_CAP, read_bytes

SPEC_VERSION = 1
SPEC_NAME = "launchers.json"

# C spellings -> the fixed-width names stored in the spec (runtime.py maps those to dtypes).
_TYPES = {
    "float": "float", "double": "double", "bool": "bool", "void": "void",
    "half": "__half", "__half": "__half",
    "__nv_bfloat16": "__nv_bfloat16", "nv_bfloat16": "__nv_bfloat16",
    "__nv_fp8_e4m3": "__nv_fp8_e4m3", "__nv_fp8_e5m2": "__nv_fp8_e5m2",
    "char": "int8_t", "signed char": "int8_t", "int8_t": "int8_t",
    "unsigned char": "uint8_t", "uint8_t": "uint8_t",
    "short": "int16_t", "short int": "int16_t", "signed short": "int16_t", "int16_t": "int16_t",
    "unsigned short": "uint16_t", "unsigned short int": "uint16_t", "uint16_t": "uint16_t",
    "int": "int32_t", "signed": "int32_t", "signed int": "int32_t", "int32_t": "int32_t",
    "unsigned": "uint32_t", "unsigned int": "uint32_t", "uint32_t": "uint32_t",
    "long": "int64_t", "long int": "int64_t", "signed long": "int64_t",
    "long long": "int64_t", "long long int": "int64_t", "signed long long": "int64_t",
    "int64_t": "int64_t", "ptrdiff_t": "int64_t", "intptr_t": "int64_t", "ssize_t": "int64_t",
    "unsigned long": "uint64_t", "unsigned long int": "uint64_t", "unsigned long long": "uint64_t",
    "unsigned long long int": "uint64_t", "uint64_t": "uint64_t", "size_t": "uint64_t",
    "uintptr_t": "uint64_t",
}  # fmt: skip
POINTER_TYPES = frozenset(_TYPES.values())
# 16-bit and 8-bit floats are structs in C: passing them by value through ctypes is not portable.
SCALAR_TYPES = POINTER_TYPES - {"void", "__half", "__nv_bfloat16", "__nv_fp8_e4m3", "__nv_fp8_e5m2"}
RETURN_TYPES = ("void", "int", "cudaError_t")
STREAM_TYPE = "cudaStream_t"


class Param(BaseModel):
    name: str
    kind: Literal["pointer", "scalar", "stream"]
    type: str
    const: bool | None = None  # pointers only: whether the pointee is const


class Launcher(BaseModel):
    name: str
    returns: Literal["void", "int", "cudaError_t"]
    file: str
    line: int
    params: list[Param]


class LauncherSpec(BaseModel):
    version: int = SPEC_VERSION
    library: str
    launchers: list[Launcher]
    kernels: list[str]


_PARSER = tree_sitter.Parser(tree_sitter.Language(tree_sitter_cuda.language()))
_DEVICE_ONLY = {"__global__", "__device__"}


@dataclass
class Found:
    """What the sources declare. problems make the build fail; warnings do not."""

    launchers: list[Launcher] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


def parse_source(source: bytes, file: str) -> Found:
    """Launchers and kernels of one source file; `file` is how messages cite it."""
    found = Found()
    launchers, kernels, problems = found.launchers, found.kernels, found.problems
    tree = _PARSER.parse(source)

    def visit(node: tree_sitter.Node, extern_c: bool) -> None:
        for child in node.children:
            kind = child.type
            if kind == "linkage_specification":
                lang = child.child_by_field_name("value")
                visit(child, extern_c or (lang is not None and _text(lang).strip('"') == "C"))
            elif kind in ("function_definition", "template_declaration"):
                fn = child if kind == "function_definition" else _first(child, "function_definition")
                if fn is None:
                    continue
                specifiers = {_text(c) for c in fn.children if not c.is_named or c.type == "storage_class_specifier"}
                if "__global__" in specifiers:
                    name = _function_name(fn)
                    if name and name not in kernels:
                        kernels.append(name)
                elif extern_c and kind == "function_definition" and not (specifiers & _DEVICE_ONLY) \
                        and "static" not in specifiers:  # fmt: skip
                    launcher = _launcher(fn, file, problems)
                    if launcher is not None:
                        launchers.append(launcher)
            elif kind in ("declaration_list", "preproc_if", "preproc_ifdef", "preproc_else",
                          "preproc_elif", "namespace_definition"):  # fmt: skip
                visit(child, extern_c)
            elif kind == "ERROR":
                found.warnings.append(
                    f"{file}:{child.start_point.row + 1}: could not parse this region; launchers "
                    "in it may be missed (nvcc will say whether the code is valid)"
                )
                visit(child, extern_c)

    visit(tree.root_node, False)
    return found


def parse_sources(files: list[Path], root: Path) -> Found:
    """Launchers and kernels of every file (cited relative to root); duplicates are problems. The
    files are read as untrusted_files says: UnreadableFile for a FIFO, a link, one over the cap."""
    total = Found()
    for path in files:
        one = parse_source(
            read_bytes(path, root=root, limit=SOURCE_CAP, shown=_relative(path, root)), _relative(path, root)
        )
        total.launchers += one.launchers
        total.kernels += [n for n in one.kernels if n not in total.kernels]
        total.problems += one.problems
        total.warnings += one.warnings
    first: dict[str, Launcher] = {}
    for launcher in total.launchers:
        if (other := first.setdefault(launcher.name, launcher)) is not launcher:
            total.problems.append(
                f"{launcher.file}:{launcher.line}: launcher {launcher.name!r} is also defined at "
                f"{other.file}:{other.line}; give each launcher a unique name"
            )
    return total


def _relative(path: Path, root: Path) -> str:
    try:
        return str(path.resolve().relative_to(root.resolve()))
    except ValueError:
        return str(path)


def write_spec(spec: LauncherSpec, path: Path) -> None:
    """Atomically, so a concurrent reader sees the old spec or the new one, never half of one."""
    write_atomic(path, spec.model_dump_json(indent=1, exclude_none=True) + "\n", prefix=f".{path.name}.")


def read_spec(path: Path) -> LauncherSpec:
    return LauncherSpec.model_validate(json.loads(path.read_text()))


def _launcher(fn: tree_sitter.Node, file: str, problems: list[str]) -> Launcher | None:
    declarator = fn.child_by_field_name("declarator")
    name = _function_name(fn)
    if declarator is None or name is None:
        return None
    line = declarator.start_point.row + 1
    where = f"{file}:{line}: launcher {name!r}"
    before = len(problems)
    returns = re.sub(r"\s+", " ", _text(fn.child_by_field_name("type"))) if fn.child_by_field_name("type") else ""
    if declarator.type != "function_declarator" or returns not in RETURN_TYPES:
        shown = returns + ("*" if declarator.type == "pointer_declarator" else "")
        problems.append(f"{where} returns {shown}; launchers return void, int or cudaError_t")
    param_list = declarator.child_by_field_name("parameters")
    decls = [p for p in param_list.named_children if p.type != "comment"] if param_list is not None else []
    if len(decls) == 1 and _text(decls[0]) == "void":
        decls = []
    params = [_param(decl, i, where, problems) for i, decl in enumerate(decls)]
    params = [p for p in params if p is not None]
    streams = [i for i, p in enumerate(params) if p.kind == "stream"]
    if len(problems) == before and (streams != [len(params) - 1]):
        problems.append(
            f"{where} must take exactly one cudaStream_t, as its last parameter "
            "(the runtime passes the current stream there)"
        )
    if len(problems) > before:
        return None
    return Launcher(name=name, returns=returns, file=file, line=line, params=params)  # type: ignore[arg-type]


def _param(decl: tree_sitter.Node, index: int, where: str, problems: list[str]) -> Param | None:
    if decl.type != "parameter_declaration":
        problems.append(f"{where}: parameter {_text(decl)!r} is not supported (no variadic or default args)")
        return None
    type_node = decl.child_by_field_name("type")
    const = any(c.type == "type_qualifier" and _text(c) == "const" for c in decl.children)
    depth, name, bad = 0, f"arg{index}", None
    node = decl.child_by_field_name("declarator")
    while node is not None:
        if node.type in ("pointer_declarator", "abstract_pointer_declarator", "array_declarator",
                         "abstract_array_declarator"):  # fmt: skip
            depth += 1
        elif node.type == "identifier":
            name = _text(node)
        elif bad:
            pass  # the outermost problem is the one worth naming
        elif node.type in ("reference_declarator", "abstract_reference_declarator"):
            bad = "a reference"
        elif node.type != "type_qualifier":
            bad = "a function pointer" if "function" in node.type else f"a {node.type}"
        node = node.child_by_field_name("declarator") or _first(node, "identifier")
    c_type = _type_name(type_node)
    shown = f"{_text(decl)!r}"
    if bad:
        problems.append(f"{where}: parameter {shown} is {bad}; pass a pointer or a value instead")
    elif c_type == STREAM_TYPE and depth == 0:
        return Param(name=name, kind="stream", type=STREAM_TYPE)
    elif depth > 1:
        problems.append(f"{where}: parameter {shown} is a pointer to a pointer; pass one flat buffer")
    elif depth == 1 and c_type in POINTER_TYPES:
        return Param(name=name, kind="pointer", type=c_type, const=const)
    elif depth == 0 and c_type in SCALAR_TYPES:
        return Param(name=name, kind="scalar", type=c_type)
    elif depth == 0 and c_type in POINTER_TYPES:
        problems.append(f"{where}: parameter {shown} passes {c_type} by value; pass a float and convert inside")
    else:
        problems.append(
            f"{where}: parameter {shown} has unsupported type {_text(type_node)!r}; use pointers to or "
            "values of float, double, __half, __nv_bfloat16, (u)int8..64_t, int, size_t, bool "
            "(reinterpret_cast vector types like float4 inside the launcher)"
        )
    return None


def _type_name(node: tree_sitter.Node | None) -> str:
    if node is None:
        return ""
    text = re.sub(r"\s+", " ", _text(node)).strip()
    text = text.removeprefix("std::").removeprefix("::")
    if node.type == "primitive_type" or node.type == "sized_type_specifier" or text in _TYPES:
        return _TYPES.get(text, text)
    return text


def _function_name(fn: tree_sitter.Node) -> str | None:
    node = fn.child_by_field_name("declarator")
    while node is not None and node.type != "function_declarator":
        node = node.child_by_field_name("declarator")
    if node is None:
        return None
    ident = node.child_by_field_name("declarator")
    return _text(ident) if ident is not None and ident.type == "identifier" else None


def _first(node: tree_sitter.Node, kind: str) -> tree_sitter.Node | None:
    return next((c for c in node.named_children if c.type == kind), None)


def _text(node: tree_sitter.Node) -> str:
    return node.text.decode(errors="replace") if node.text is not None else ""
