"""The recorder: runs a candidate's Python, jailed, and writes down what forward does as a plan.

    python -m cuda_agent.eval.recorder --reply-fd N      (started by the evaluator, in the jail)

Nothing of the judge lives here: no reference, timer, library or GPU. The model is built and
forward runs on meta tensors (shapes, dtypes, strides, no data), so forward can only be what a
plan can say: allocations (and their fills), views, and calls through a `kernel_runtime` whose
launchers record instead of running. All else forward dispatches is torch compute, named as
such, and so is a tensor that is not an input, a parameter or buffer of Model, or an allocation
(it cannot be bound). Requests: `load` (model_new.py's source, the launchers, init arguments,
the reference's state names) and `record` (one input set's layout) -> plan + findings.
"""

from __future__ import annotations

import math
import sys
import types
from typing import Any

from cuda_agent.eval.plan import ALLOC_FILL, C_TO_DTYPE, FILLS, INT_RANGE, VIEWS
from cuda_agent.eval.protocol import Load, Record


class Recording:
    """The storages forward touches and what it did to them, for one forward (or __init__)."""

    def __init__(self):
        self.storages: list[dict] = []
        self.ids: dict[int, int] = {}  # storage cdata -> index
        self.keep: list[Any] = []  # tensors held so no storage address is reused while recording
        self.steps: list[dict] = []
        self.compute: list[str] = []
        self.devices: set[str] = set()
        self.problems: list[tuple[str, str]] = []  # (guard, message)
        self.dirty: set[int] = set()  # cdata of tensors written by torch compute

    def add(self, t, entry: dict) -> int:
        key = t.untyped_storage()._cdata
        if key not in self.ids:
            self.ids[key] = len(self.storages)
            self.storages.append({**entry, "nbytes": t.untyped_storage().nbytes()})
            self.keep.append(t)
        return self.ids[key]

    def find(self, t) -> int | None:
        key = t.untyped_storage()._cdata
        return None if key in self.dirty else self.ids.get(key)

    def view(self, t) -> dict | None:
        sid = self.find(t)
        return (
            None
            if sid is None
            else {
                "storage": sid,
                "offset": t.storage_offset(),
                "shape": list(t.shape),
                "stride": list(t.stride()),
                "dtype": _dtype(t),
            }
        )


def _dtype(t) -> str:
    return str(t.dtype).removeprefix("torch.")


def _fill_value(base: str, args: tuple, kwargs: dict):
    how = ALLOC_FILL[base]
    if how == "arg1":
        v = kwargs.get("fill_value", args[1] if len(args) > 1 else None)
        return v.item() if hasattr(v, "item") and not isinstance(v, (int, float, bool)) else v
    return "poison" if how is None else how


def make_mode(torch, rec: Recording):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Recorder(TorchDispatchMode):
        def __torch_dispatch__(self, func, types_, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            dev = kwargs.get("device")
            if dev is not None and torch.device(dev).type != "meta":
                rec.devices.add(torch.device(dev).type)
                kwargs["device"] = torch.device("meta")
            out = func(*args, **kwargs)
            base = func._schema.name.split("::")[-1]
            if base in ALLOC_FILL:
                value = _fill_value(base, args, kwargs)
                if not (value == "poison" or isinstance(value, (bool, int, float))):
                    rec.compute.append(base)
                else:
                    rec.add(out, {"kind": "alloc", "fill": _json_number(value), "dtype": _dtype(out)})
            elif base in FILLS:
                target = rec.view(args[0])
                value = 0 if base == "zero_" else args[1]
                if target is None or not isinstance(value, (bool, int, float)):
                    rec.compute.append(base)
                else:
                    rec.steps.append({"op": "fill", "view": target, "value": _json_number(value)})
            elif base not in VIEWS:
                rec.compute.append(base)
                outs = out if isinstance(out, (tuple, list)) else [out]
                rec.dirty.update(t.untyped_storage()._cdata for t in outs if isinstance(t, torch.Tensor))
                if base.endswith("_") and args and isinstance(args[0], torch.Tensor):
                    rec.dirty.add(args[0].untyped_storage()._cdata)
            return out

    return Recorder()


def _json_number(v):
    # 'inf' / 'nan' as strings: check_plan rejects strings, so such fills are refused clearly
    return repr(v) if isinstance(v, float) and not math.isfinite(v) else v


# -- the recording kernel_runtime ------------------------------------------------------------
def make_runtime(torch, spec: dict, current: list) -> types.ModuleType:
    """A `kernel_runtime` whose only name is load_kernels; its launchers record calls."""
    launchers = {launcher["name"]: launcher for launcher in (spec or {}).get("launchers", [])}

    def bind(name: str):
        params = launchers[name]["params"][:-1]

        def call(*args):
            rec: Recording = current[0]
            if len(args) != len(params):
                raise TypeError(
                    f"{name} takes {len(params)} argument(s) (the stream is passed for you), got {len(args)}"
                )
            rec.steps.append(
                {"op": "call", "launcher": name, "args": [_bound(torch, rec, name, p, a) for p, a in zip(params, args)]}
            )

        call.__name__ = name
        return call

    class Kernels:
        __slots__ = ()

        def __getattr__(self, name):
            if name in launchers:
                return bind(name)
            raise AttributeError(
                f"no launcher named {name!r} (launchers: {', '.join(launchers) or 'none'}); "
                'define it as extern "C" in kernels/*.cu and compile again'
            )

        def __contains__(self, name):
            return name in launchers

        def __iter__(self):
            return iter(list(launchers))

    def load_kernels(build_dir=None):
        return Kernels()

    mod = types.ModuleType("kernel_runtime")
    mod.load_kernels = load_kernels
    return mod


def _bound(torch, rec: Recording, launcher: str, p: dict, a: Any) -> dict | None:
    """One launcher argument as the plan writes it, checked as kernel_runtime checks it."""
    where = f"{launcher}: parameter {p['name']!r}"
    if p["kind"] == "pointer":
        if a is None:
            return None
        if not isinstance(a, torch.Tensor):
            raise TypeError(f"{where} expects a tensor, got {type(a).__name__}")
        want = C_TO_DTYPE.get(p["type"])
        if want is not None and _dtype(a) != want:
            raise TypeError(f"{where} expects {want}, got {_dtype(a)}")
        if not a.is_contiguous():
            raise ValueError(f"{where} expects a contiguous tensor (make it contiguous, or pass strides)")
        sid = rec.find(a)
        if sid is None:
            rec.problems.append(
                (
                    "plan",
                    f"{launcher}({p['name']}) got a tensor that is not an input, a parameter or buffer of Model, "
                    "or an allocation (torch.empty*/zeros*/full*): only those can reach a launcher",
                )
            )
            sid = -1
        size = a.element_size()
        return {"storage": sid, "offset": a.storage_offset() * size, "nbytes": a.numel() * size, "dtype": _dtype(a)}
    if p["type"] in ("float", "double"):
        if type(a) not in (float, int):
            raise TypeError(f"{where} expects a Python float, got {type(a).__name__}")
        return {"value": float(a) if math.isfinite(a) else repr(a)}
    if p["type"] == "bool":
        if type(a) is not bool and not (type(a) is int and a in (0, 1)):
            raise TypeError(f"{where} expects a bool, got {type(a).__name__}")
        return {"value": bool(a)}
    if type(a) is not int:
        raise TypeError(f"{where} expects a Python int, got {type(a).__name__}")
    lo, hi = INT_RANGE[p["type"]]
    if not lo <= a <= hi:
        raise OverflowError(f"{where} expects an integer in [{lo}, {hi}], got {a}")
    return {"value": a}


# -- the process -----------------------------------------------------------------------------
def _meta_value(torch, desc: Any) -> Any:
    if "tensor" in desc:
        d = desc["tensor"]
        dtype = getattr(torch, d["dtype"])
        store = torch.empty(d["nbytes"] // dtype.itemsize, dtype=dtype, device="meta")
        return store.as_strided(d["shape"], d["stride"], d["offset"])
    if "tuple" in desc:
        return tuple(_meta_value(torch, v) for v in desc["tuple"])
    if "list" in desc:
        return [_meta_value(torch, v) for v in desc["list"]]
    if "float" in desc:
        return float(desc["float"])
    return desc["value"]


class _Recorder:
    def __init__(self):
        import torch

        self.torch = torch
        torch.cuda._lazy_init = lambda: None  # device="cuda" is rewritten to meta; no GPU here
        self.current: list = [None]
        self.model = None
        self.init: Recording | None = None
        self._warm()

    def _warm(self) -> None:
        """The first meta dispatch imports torch's meta registrations and decompositions (about two
        seconds): pay it while this process waits, not in the first recorded forward."""
        torch = self.torch
        rec = Recording()
        x = torch.empty(4, 8, device="meta")
        with torch.no_grad(), make_mode(torch, rec):
            torch.empty_like(x).view(-1)
            torch.zeros(3, device="cuda").fill_(1.0)
            (x.t().contiguous() + 1).sum(0)
            torch.nn.functional.linear(x, torch.empty(2, 8, device="meta"))

    def load(self, req: Load) -> dict:
        torch = self.torch
        sys.modules["kernel_runtime"] = make_runtime(torch, req.spec, self.current)
        module = types.ModuleType("model_new")
        module.__file__ = "model_new.py"
        sys.modules["model_new"] = module
        exec(compile(req.source, "model_new.py", "exec"), module.__dict__)
        cls = getattr(module, "ModelNew", None)
        if cls is None:
            raise RuntimeError("model_new.py defines no class ModelNew")
        init_args = [_meta_value(torch, d) for d in req.init_inputs]
        self.current[0] = rec = Recording()
        torch.manual_seed(req.init_seed)
        with torch.device("meta"), make_mode(torch, rec):
            model = cls(*init_args)
        mine, want = set(model.state_dict(keep_vars=True)), set(req.state)
        if mine != want:
            raise RuntimeError(
                "ModelNew's parameters/buffers must carry the same names as Model's "
                f"(missing: {sorted(want - mine)[:5]}, unexpected: {sorted(mine - want)[:5]})"
            )
        self.model, self.init = model, rec
        return {"ok": True, "init_compute": sorted(set(rec.compute))}

    def record(self, req: Record) -> dict:
        torch = self.torch
        self.current[0] = rec = Recording()
        inputs = [_meta_value(torch, d) for d in req.inputs]
        for i, x in enumerate(inputs):
            if isinstance(x, torch.Tensor):
                rec.add(x, {"kind": "input", "index": i})
        for name, t in self.model.state_dict(keep_vars=True).items():
            rec.add(t, {"kind": "param", "name": name})
        for key, idx in self.init.ids.items():  # module-lifetime allocations of __init__
            if key not in self.init.dirty and self.init.storages[idx]["kind"] == "alloc" and key not in rec.ids:
                rec.add(self.init.keep[idx], dict(self.init.storages[idx]))
        prologue = []  # fills __init__ made on its own allocations happen again before each forward
        for s in self.init.steps:
            sid = rec.find(self.init.keep[s["view"]["storage"]]) if s["op"] == "fill" else None
            if sid is not None and rec.storages[sid]["kind"] == "alloc":
                prologue.append({**s, "view": {**s["view"], "storage": sid}})
        error = None
        with torch.no_grad(), make_mode(torch, rec):
            try:
                out = self.model(*inputs)
            except Exception as e:
                error = (
                    f"{type(e).__name__}: {e} (forward is recorded on meta tensors, without data: it may "
                    "only allocate outputs, take views and call launchers)"
                )
                out = ()
        outputs = []
        for j, o in enumerate(out if isinstance(out, (tuple, list)) else [out]):
            if type(o) is not torch.Tensor:
                rec.problems.append(
                    (
                        "tensor_subclass",
                        f"output {j} is a {type(o).__name__}, not a plain "
                        "torch.Tensor: return the tensors your kernels wrote",
                    )
                )
            elif (v := rec.view(o)) is None:
                rec.problems.append(("plan", f"output {j} is not a tensor forward allocated (torch compute made it)"))
            else:
                outputs.append(v)
        plan = {"storages": rec.storages, "steps": prologue + rec.steps, "outputs": outputs}
        return {
            "ok": error is None,
            "error": error,
            "plan": plan,
            "compute": rec.compute,
            "problems": rec.problems,
            "devices": sorted(rec.devices),
        }


def main(argv: list[str] | None = None) -> None:
    from cuda_agent.eval.channel import reply_fd_arg, serve
    from cuda_agent.eval.protocol import RecorderRequest

    fd, _ = reply_fd_arg(list(sys.argv[1:] if argv is None else argv))

    def start():
        r = _Recorder()
        return {"load": r.load, "record": r.record}

    serve(fd, start, RecorderRequest)


if __name__ == "__main__":
    main()
