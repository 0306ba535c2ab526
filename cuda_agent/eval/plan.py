"""A launch plan: one forward of a candidate as plain data, made where its Python runs and
replayed where it is judged.

A candidate's forward may only allocate outputs, take views and call its launchers, so all it
does can be written down: the tensors it touches (an input, a parameter or buffer of Model by
name, or an allocation with how it was filled), fills (`zeros`, `fill_`), the launcher calls
with each pointer as (tensor, byte offset, bytes) and each scalar as its value, and which
tensors it returns. The recorder (recorder.py, jailed, candidate Python on meta tensors) makes
it; the parent checks it here against the launchers' signatures, the inputs and the reference's
parameters; the judge (judge.py, jailed, never imports model_new.py) replays it on real data.
"""

from __future__ import annotations

import math
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field

POISON = "poison"  # an allocation whose contents were never set: NaN bytes where it is judged

# The ATen ops a forward may dispatch, the only ones a plan can say; anything else is torch compute.
# Allocations, with where their fill value is (None: empty, unset; "arg1": the second argument):
ALLOC_FILL = {  # ATen allocation -> where its fill value is (None: empty, unset)
    "empty": None, "empty_like": None, "empty_strided": None, "new_empty": None, "new_empty_strided": None,
    "empty_permuted": None, "zeros": 0, "zeros_like": 0, "new_zeros": 0, "ones": 1, "ones_like": 1,
    "new_ones": 1, "full": "arg1", "full_like": "arg1", "new_full": "arg1",
}  # fmt: skip
VIEWS = frozenset({
    "view", "_unsafe_view", "reshape", "as_strided", "t", "transpose", "permute", "expand", "squeeze",
    "unsqueeze", "detach", "alias", "slice", "select", "split", "split_with_sizes", "unbind", "narrow",
    "chunk", "flatten", "unflatten", "view_as", "expand_as", "lift_fresh", "sym_size", "sym_stride",
    "sym_numel", "sym_storage_offset", "is_contiguous", "size", "stride", "numel", "dim", "_reshape_alias",
})  # fmt: skip
FILLS = frozenset({"fill_", "zero_"})

# dtype names as torch prints them, to and from the launchers' C element types
ELEMENT_SIZE = {
    "float32": 4,
    "float64": 8,
    "float16": 2,
    "bfloat16": 2,
    "bool": 1,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "complex64": 8,
    "complex128": 16,
}
C_TO_DTYPE = {
    "float": "float32",
    "double": "float64",
    "__half": "float16",
    "__nv_bfloat16": "bfloat16",
    "bool": "bool",
    "int8_t": "int8",
    "uint8_t": "uint8",
    "int16_t": "int16",
    "uint16_t": "uint16",
    "int32_t": "int32",
    "uint32_t": "uint32",
    "int64_t": "int64",
    "uint64_t": "uint64",
    "__nv_fp8_e4m3": "float8_e4m3fn",
    "__nv_fp8_e5m2": "float8_e5m2",
    "void": None,
}
INT_RANGE = {
    c: (0, (1 << bits) - 1) if c.startswith("u") else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    for bits in (8, 16, 32, 64)
    for c in (f"int{bits}_t", f"uint{bits}_t")
}  # int8_t: (-128, 127)...


class Storage(BaseModel):
    kind: Literal["input", "param", "alloc"]
    index: int | None = None  # input position
    name: str | None = None  # state_dict name of a parameter or buffer
    nbytes: int = Field(ge=0)
    fill: float | int | bool | str | None = POISON  # allocations: how they start ("poison": unset)
    dtype: str = "uint8"  # allocations: the dtype the fill is written in


class View(BaseModel):
    """A strided view of a storage, in elements of `dtype` (fills and outputs)."""

    storage: int
    offset: int = Field(ge=0)
    shape: list[int]
    stride: list[int]
    dtype: str


class Fill(BaseModel):
    op: Literal["fill"] = "fill"
    view: View
    value: float | int | bool


class Pointer(BaseModel):
    storage: int
    offset: int = Field(ge=0)  # bytes from the storage's start
    nbytes: int = Field(ge=0)
    dtype: str


class Scalar(BaseModel):
    value: float | int | bool


class Call(BaseModel):
    op: Literal["call"] = "call"
    launcher: str
    args: list[Union[Pointer, Scalar, None]]


class Plan(BaseModel):
    storages: list[Storage]
    steps: list[Annotated[Union[Call, Fill], Field(discriminator="op")]]
    outputs: list[View]


def view_span(v: View) -> tuple[int, int]:
    """[first, last+1) byte range a view touches (empty views touch nothing)."""
    size = ELEMENT_SIZE[v.dtype]
    if any(n == 0 for n in v.shape):
        return v.offset * size, v.offset * size
    last = v.offset + sum((n - 1) * s for n, s in zip(v.shape, v.stride))
    first = v.offset + sum((n - 1) * s for n, s in zip(v.shape, v.stride) if s < 0)
    return first * size, (last + 1) * size


def check_plan(
    plan: Plan, spec: dict, inputs: list[dict | None], state: dict[str, int], max_alloc_bytes: int
) -> list[str]:
    """What is wrong with a plan the recorder sent, as messages; empty when it can be replayed.

    `inputs[i]` is {"nbytes": storage bytes} for tensor inputs (None otherwise); `state` maps the
    reference's parameter and buffer names to their storage bytes."""
    problems: list[str] = []
    launchers = {launcher["name"]: launcher for launcher in spec.get("launchers", [])}
    total = 0
    for i, s in enumerate(plan.storages):
        if s.kind == "input":
            if s.index is None or not 0 <= s.index < len(inputs) or inputs[s.index] is None:
                problems.append(f"tensor {i} names input {s.index}, which is not a tensor input")
            elif s.nbytes != inputs[s.index]["nbytes"]:
                problems.append(f"tensor {i}: input {s.index} has {inputs[s.index]['nbytes']} bytes, not {s.nbytes}")
        elif s.kind == "param":
            if s.name not in state:
                problems.append(f"tensor {i} names {s.name!r}, which is not a parameter or buffer of Model")
            elif s.nbytes != state[s.name]:
                problems.append(f"tensor {i}: {s.name} has {state[s.name]} bytes, not {s.nbytes}")
        else:
            total += s.nbytes
            if s.dtype not in ELEMENT_SIZE:
                problems.append(f"tensor {i}: unknown dtype {s.dtype}")
            if not (s.fill == POISON or isinstance(s.fill, (int, float, bool))):
                problems.append(f"tensor {i}: fill {s.fill!r} is not a number")
    if total > max_alloc_bytes:
        problems.append(f"forward allocates {total / 2**30:.2f} GiB; the limit is {max_alloc_bytes / 2**30:.2f} GiB")

    def in_storage(idx: int, lo: int, hi: int, what: str) -> None:
        if not 0 <= idx < len(plan.storages):
            problems.append(f"{what} names tensor {idx}, which the plan does not have")
        elif lo < 0 or hi > plan.storages[idx].nbytes:
            problems.append(f"{what} reaches bytes [{lo}, {hi}) of a tensor of {plan.storages[idx].nbytes} bytes")

    for n, step in enumerate(plan.steps):
        if isinstance(step, Fill):
            if step.view.dtype not in ELEMENT_SIZE or len(step.view.shape) != len(step.view.stride):
                problems.append(f"step {n}: fill has a bad view")
                continue
            in_storage(step.view.storage, *view_span(step.view), f"step {n} (fill)")
            continue
        launcher = launchers.get(step.launcher)
        if launcher is None:
            problems.append(f"step {n}: no launcher {step.launcher!r} in the built library")
            continue
        params = launcher["params"][:-1]  # the stream is passed by the judge
        if len(step.args) != len(params):
            problems.append(f"step {n}: {step.launcher} takes {len(params)} arguments, the plan gives {len(step.args)}")
            continue
        for p, a in zip(params, step.args):
            where = f"step {n}: {step.launcher}({p['name']})"
            if p["kind"] == "pointer":
                if isinstance(a, Scalar):
                    problems.append(f"{where} is a pointer, the plan gives a number")
                elif isinstance(a, Pointer):
                    want = C_TO_DTYPE.get(p["type"])
                    if want is not None and a.dtype != want:
                        problems.append(f"{where} takes {want}, the plan gives {a.dtype}")
                    in_storage(a.storage, a.offset, a.offset + a.nbytes, where)
            else:
                problems += _scalar_problem(where, p["type"], a)
    for j, out in enumerate(plan.outputs):
        if not 0 <= out.storage < len(plan.storages):
            problems.append(f"output {j} names tensor {out.storage}, which the plan does not have")
            continue
        if plan.storages[out.storage].kind != "alloc":
            problems.append(f"output {j} is an input or a parameter itself: return a new tensor your kernels wrote")
        if out.dtype not in ELEMENT_SIZE or len(out.shape) != len(out.stride):
            problems.append(f"output {j} has a bad view")
            continue
        in_storage(out.storage, *view_span(out), f"output {j}")
    return problems


def _scalar_problem(where: str, ctype: str, a: Any) -> list[str]:
    if not isinstance(a, Scalar):
        return [f"{where} is a number, the plan gives a tensor"]
    v = a.value
    if ctype in ("float", "double"):
        return [] if isinstance(v, (int, float)) and not isinstance(v, bool) else [f"{where}: {v!r} is not a number"]
    if ctype == "bool":
        return [] if isinstance(v, bool) or v in (0, 1) else [f"{where}: {v!r} is not a bool"]
    if ctype not in INT_RANGE:
        return [f"{where}: unknown scalar type {ctype}"]
    lo, hi = INT_RANGE[ctype]
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        return [f"{where}: {v!r} is not an integer in [{lo}, {hi}]"]
    return []


# -- values crossing between processes (inputs described, never pickled) --------------------
def describe(x: Any) -> Any:
    """A JSON description of an input or init argument: tensors by layout, plain values as is."""
    import torch

    if isinstance(x, torch.Tensor):
        return {
            "tensor": {
                "shape": list(x.shape),
                "stride": list(x.stride()),
                "offset": x.storage_offset(),
                "dtype": str(x.dtype).removeprefix("torch."),
                "nbytes": x.untyped_storage().nbytes(),
            }
        }
    if isinstance(x, (tuple, list)):
        return {"tuple" if isinstance(x, tuple) else "list": [describe(v) for v in x]}
    if isinstance(x, float) and not math.isfinite(x):
        return {"float": repr(x)}
    if x is None or isinstance(x, (bool, int, float, str)):
        return {"value": x}
    raise TypeError(f"cannot describe a {type(x).__name__} for the recorder")


def tensor_nbytes(desc: Any) -> dict | None:
    return {"nbytes": desc["tensor"]["nbytes"]} if isinstance(desc, dict) and "tensor" in desc else None
