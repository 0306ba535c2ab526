"""The optimised layer as a drop-in: ModelNew (model_new.py) with every call checked against what
was verified (verified.json). Kernels often hard-code sizes, so another shape, dtype, device or
layout raises ValueError instead of computing garbage. Forward-only: no backward exists.

    from dropin import load_layer
    layer = load_layer(original=my_layer)   # copies my_layer's weights; call it under torch.no_grad()

Imports torch and this folder's files only (cuda-agent need not be installed).
"""

from __future__ import annotations

import importlib.util
import inspect
import json
import os
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
VERIFIED = json.loads((HERE / "verified.json").read_text())
FORWARD_ONLY = "forward-only: wrap the call in torch.no_grad() or use the original layer for training"
OTHERS = "use the original layer for other inputs"


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _model_new() -> type:
    """model_new.py imports `kernel_runtime` and calls load_kernels() with no argument: point both here."""
    env = {"CUDA_AGENT_KERNELS": str(HERE / "build")}
    if VERIFIED["device"] == "cpu":
        env["CUDA_AGENT_HOST_ONLY"] = "1"  # verified with host-only kernels: host pointers, no stream
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        if "kernel_runtime" not in sys.modules:
            _load("kernel_runtime", HERE / "kernel_runtime.py")
        return _load(f"dropin_model_new_{VERIFIED['commit'][:12]}", HERE / "model_new.py").ModelNew
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _describe(x) -> dict:
    if isinstance(x, torch.Tensor):
        return {"shape": list(x.shape), "dtype": str(x.dtype).removeprefix("torch.")}
    return {"value": repr(x)[:80]}


def _text(d: dict) -> str:
    return f"{d['dtype']} {d['shape']}" if "dtype" in d else d["value"]


def verified_init_args() -> list:
    try:
        return list(torch.load(HERE / "init_inputs.pt", weights_only=True))
    except Exception as e:
        raise TypeError(
            f"the verified constructor arguments could not be read back ({type(e).__name__}): pass "
            f"them yourself, as verified: {', '.join(_text(d) for d in VERIFIED['init_inputs'])}"
        ) from e


def check_tensor(what: str, x, spec: dict, exact_shapes: bool) -> None:
    """One argument against its verified description; ValueError naming it, what was verified and what was given."""
    if "value" in spec:
        if isinstance(x, torch.Tensor) or repr(x)[:80] != spec["value"]:
            raise ValueError(f"{what}: verified with {spec['value']}, given {_text(_describe(x))}; {OTHERS}")
        return
    if not isinstance(x, torch.Tensor):
        raise ValueError(f"{what}: verified with a tensor ({_text(spec)}), given {type(x).__name__}; {OTHERS}")
    dtype = str(x.dtype).removeprefix("torch.")
    if dtype != spec["dtype"]:
        raise ValueError(f"{what}: verified with dtype {spec['dtype']}, given {dtype}; convert it or {OTHERS}")
    shape = list(x.shape)
    if (shape != spec["shape"]) if exact_shapes else (len(shape) != len(spec["shape"])):
        raise ValueError(
            f"{what}: verified with shape {spec['shape']}, given {shape} (the kernels may hard-code sizes); {OTHERS}"
        )
    if x.device.type != VERIFIED["device"]:
        raise ValueError(
            f"{what}: verified on {VERIFIED['device']}, given a tensor on {x.device}; move it with "
            f".to('{VERIFIED['device']}')"
        )
    if spec.get("contiguous", True) and not x.is_contiguous():
        raise ValueError(f"{what}: verified contiguous, given strides {list(x.stride())}; call .contiguous() first")


ModelNew = _model_new()


class Layer(ModelNew):
    """ModelNew behind the checks. Same constructor and state_dict names as the original layer."""

    exact_shapes = True  # False: only the number of dimensions must match (only if the kernels allow it)

    def __init__(self, *init_args, **init_kwargs):
        if not init_args and not init_kwargs:
            init_args = tuple(verified_init_args())
        given = [_describe(a) for a in init_args]
        if not init_kwargs and given != VERIFIED["init_inputs"]:
            verified = ", ".join(map(_text, VERIFIED["init_inputs"]))
            raise ValueError(
                f"constructor arguments: verified with ({verified}), given ({', '.join(map(_text, given))}); {OTHERS}"
            )
        super().__init__(*init_args, **init_kwargs)
        self.requires_grad_(False)  # no backward exists: gradients would silently be missing

    def forward(self, *args, **kwargs):
        if kwargs:
            args = inspect.signature(super().forward).bind(*args, **kwargs).args
        inputs = VERIFIED["inputs"]
        if len(args) != len(inputs):
            raise ValueError(
                f"verified with {len(inputs)} inputs ({', '.join(i['name'] for i in inputs)}), "
                f"given {len(args)}; {OTHERS}"
            )
        grad = torch.is_grad_enabled()
        for spec, x in zip(inputs, args):
            if grad and isinstance(x, torch.Tensor) and x.requires_grad:
                raise RuntimeError(f"input {spec['name']!r} requires grad, but this layer is {FORWARD_ONLY}")
            check_tensor(f"input {spec['name']!r}", x, spec, self.exact_shapes)
        for name, t in [*self.named_parameters(), *self.named_buffers()]:
            if grad and t.requires_grad:
                raise RuntimeError(f"parameter {name!r} requires grad, but this layer is {FORWARD_ONLY}")
            spec = VERIFIED["params"].get(name)
            if spec is not None:
                check_tensor(f"parameter {name!r}", t, {**spec, "contiguous": False}, True)
        return super().forward(*args)


def load_layer(
    original: torch.nn.Module | None = None, *init_args, device: str | None = None, exact_shapes: bool = True
) -> Layer:
    """The drop-in, built with the verified constructor arguments (or init_args), with `original`'s
    weights when given, on the verified device type (or `device`)."""
    layer = Layer(*init_args)
    layer.exact_shapes = exact_shapes
    if original is not None:
        layer.load_state_dict(original.state_dict())
    return layer.to(device or VERIFIED["device"])
