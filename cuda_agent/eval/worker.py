"""The worker process: runs one candidate (or the reference, for baselines) on one device.

Started by worker_client.Worker with multiprocessing's spawn. It receives requests from the
parent on a queue (parent -> worker pickling is safe: the parent is the trusted side; CUDA
tensors arrive through IPC) and answers with JSON bytes only, so the judge never unpickles
anything a candidate could have shaped. Outputs travel back by being copied into buffers the
parent allocated and shared. One worker serves one candidate and is then discarded: a device
fault poisons its CUDA context for good.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
import threading
import time
import traceback
from pathlib import Path

# imported before the worker says it is ready, not inside the first timed request
from cuda_agent.eval.reference import flatten, pin_full_fp32
from cuda_agent.eval.timing import TimingConfig, read_clocks, time_callable

RUNTIME_MODULE = "kernel_runtime"  # the name model_new.py imports
RUNTIME_PATH = Path(__file__).resolve().parent.parent / "kernels" / "runtime.py"


def _precision_state(torch) -> dict:
    return {
        "matmul.allow_tf32": bool(torch.backends.cuda.matmul.allow_tf32),
        "cudnn.allow_tf32": bool(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
    }


def _watched(torch) -> dict:
    """What a candidate might patch to look fast: timers, synchronize, the output copy."""
    return {
        "torch.cuda.synchronize": torch.cuda.synchronize,
        "torch.cuda.Event": torch.cuda.Event,
        "torch.cuda.Event.elapsed_time": torch.cuda.Event.elapsed_time,
        "torch.cuda.Event.record": torch.cuda.Event.record,
        "time.perf_counter": time.perf_counter,
        "time.time": time.time,
        "torch.Tensor.copy_": torch.Tensor.copy_,
        "torch.cuda._sleep": getattr(torch.cuda, "_sleep", None),  # the timing's stream hold
    }


class _Worker:
    def __init__(self, device: str, scratch: Path):
        import torch

        self.torch = torch
        self.device = device
        self.scratch = scratch
        self.model = None
        self.is_candidate = False
        self.own_kernels: list[str] = []
        self.notes: list[str] = []
        if device.startswith("cuda"):
            torch.cuda.set_device(device)
            torch.cuda.init()
            torch.empty(1, device=device)  # create the context now, not inside the first timing
            self._warm_profiler()
        pin_full_fp32()
        self.precision = _precision_state(torch)
        # our own references, taken before any candidate code runs
        self.sync = torch.cuda.synchronize if device.startswith("cuda") else (lambda: None)
        self.event_cls = torch.cuda.Event
        self.perf_counter = time.perf_counter
        self.originals = _watched(torch)

    def _warm_profiler(self) -> None:
        """CUPTI's first start costs about a second: pay it while the worker waits, not in a verdict."""
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]):
            self.torch.empty(1024, device=self.device).zero_()
            self.torch.cuda.synchronize()

    # -- loading ---------------------------------------------------------------------------
    def load_candidate(self, req: dict) -> dict:
        from cuda_agent.eval.sandbox import restrict_writes

        notes = list(self.notes)
        if req.get("sandbox", True):
            why = restrict_writes([self.scratch, Path("/dev")])
            if why:
                notes.append(f"worker ran without write protection: {why}")
        os.environ["CUDA_AGENT_KERNELS"] = req["build_dir"]
        if not self.device.startswith("cuda"):
            os.environ["CUDA_AGENT_HOST_ONLY"] = "1"  # host pointers even where a GPU exists
        spec = importlib.util.spec_from_file_location(RUNTIME_MODULE, RUNTIME_PATH)
        runtime = importlib.util.module_from_spec(spec)
        sys.modules[RUNTIME_MODULE] = runtime
        spec.loader.exec_module(runtime)
        self.own_kernels = req.get("own_kernels", [])
        path = Path(req["candidate_dir"]) / "model_new.py"
        spec = importlib.util.spec_from_file_location("model_new", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["model_new"] = module
        spec.loader.exec_module(module)
        cls = getattr(module, "ModelNew", None)
        if cls is None:
            raise RuntimeError("model_new.py defines no class ModelNew")
        self.model = self._construct(cls, req)
        self.is_candidate = True
        return {"ok": True, "notes": notes, "findings": self._tamper_findings("importing model_new.py")}

    def load_reference(self, req: dict) -> dict:
        from cuda_agent.task import load_task

        task = load_task(req["task_ref"], inputs=Path(req["inputs_path"]) if req.get("inputs_path") else None)
        model = self._construct(task.model_cls, req)
        if req.get("compile_mode"):
            model = self.torch.compile(model, mode=None if req["compile_mode"] == "default" else req["compile_mode"])
        self.model = model
        return {"ok": True, "notes": [], "findings": []}

    def _construct(self, cls, req: dict):
        from cuda_agent.task import seed_everything

        torch = self.torch
        seed_everything(req["init_seed"])
        with torch.device(self.device):
            model = cls(*req["init_inputs"])
        model = model.to(self.device)
        state = req["state_dict"]
        mine = model.state_dict()
        missing, extra = sorted(set(state) - set(mine)), sorted(set(mine) - set(state))
        if missing or extra:
            raise RuntimeError(
                "ModelNew's parameters/buffers must carry the same names as Model's "
                f"(missing: {missing[:5]}, unexpected: {extra[:5]})"
            )
        model.load_state_dict(state, strict=True)
        return model

    # -- running ---------------------------------------------------------------------------
    def _poison_allocator(self, nbytes: int) -> None:
        """Fill memory the caching allocator will hand out next with NaN bytes, so outputs the
        candidate allocates but never writes cannot look like anything but garbage."""
        if nbytes and self.device.startswith("cuda"):
            torch = self.torch
            block = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
            block.fill_(0xFF)
            del block

    def run(self, req: dict) -> dict:
        torch = self.torch
        inputs = req["inputs"]
        self._poison_allocator(req.get("poison_bytes", 0))
        self.sync()
        threads_before = threading.active_count()
        aten: list[str] = []
        kernels: list[str] = []
        t0 = self.perf_counter()
        with torch.no_grad():
            if req.get("record"):
                out, aten, kernels = self._recorded_forward(inputs)
            else:
                out = self.model(*inputs)
        self.sync()
        ms = (self.perf_counter() - t0) * 1e3
        outs = flatten(out)
        meta = []
        for o, buf in zip(outs, req["outputs"]):
            plain = type(o) is torch.Tensor
            m = {"plain": plain, "type": type(o).__name__}
            if isinstance(o, torch.Tensor):
                m.update(shape=list(o.shape), dtype=str(o.dtype).removeprefix("torch."), stride=list(o.stride()),
                         device=str(o.device))
                if plain and o.shape == buf.shape and o.dtype == buf.dtype:
                    self.originals["torch.Tensor.copy_"](buf, o)
            meta.append(m)
        self.sync()
        findings = self._tamper_findings("forward")
        return {
            "ok": True,
            "n_outputs": len(outs),
            "outputs": meta,
            "aten": aten,
            "kernels": kernels,
            "threads_delta": threading.active_count() - threads_before,
            "ms": ms,
            "findings": findings,
        }

    def _recorded_forward(self, inputs):
        from torch.utils._python_dispatch import TorchDispatchMode

        ops: list[str] = []

        class Recorder(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                ops.append(str(func))
                return func(*args, **(kwargs or {}))

        kernels: list[str] = []
        if self.device.startswith("cuda"):
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                with Recorder():
                    out = self.model(*inputs)
                self.sync()
            kernels = [e.name for e in prof.events() if getattr(e, "device_type", None) is not None
                       and str(e.device_type).endswith("CUDA") and e.name]
        else:
            with Recorder():
                out = self.model(*inputs)
        return out, ops, kernels

    def time(self, req: dict) -> dict:
        torch = self.torch
        cfg = TimingConfig(**req["config"])
        model = self.model

        def fn(*xs):
            with torch.no_grad():
                return model(*xs)

        threads_before = threading.active_count()
        summary, last = time_callable(
            fn, req["input_sets"], self.device, cfg,
            synchronize=self.sync, event_cls=self.event_cls, perf_counter=self.perf_counter,
            spin=self.originals["torch.cuda._sleep"],
        )
        # hand back the last output of every set, so the parent checks what the timed reps computed
        for k, bufs in enumerate(req.get("outputs") or []):
            for o, buf in zip(flatten(last[k]), bufs):
                if type(o) is torch.Tensor and o.shape == buf.shape and o.dtype == buf.dtype:
                    self.originals["torch.Tensor.copy_"](buf, o)
        self.sync()
        summary["clocks"] = read_clocks(req.get("nvml_index", 0)) if self.device.startswith("cuda") else {}
        summary["device"] = torch.cuda.get_device_name(self.device) if self.device.startswith("cuda") else "cpu"
        return {"ok": True, "timing": summary, "threads_delta": threading.active_count() - threads_before,
                "findings": self._tamper_findings("timing") if self.is_candidate else []}

    # -- checks the candidate's process can see -------------------------------------------
    def _tamper_findings(self, when: str) -> list[dict]:
        torch = self.torch
        found = []
        current = _watched(torch)
        for name, orig in self.originals.items():
            if current[name] is not orig:
                found.append({"guard": "timer_patch", "message": f"{name} was replaced while {when}: "
                              "never patch torch or the timers", "severity": "fail"})
        now = _precision_state(torch)
        for k, v in now.items():
            if v != self.precision[k]:
                found.append({"guard": "precision", "message": f"{k} changed to {v!r} while {when}: "
                              "the task is fp32; keep full precision", "severity": "fail"})
        return found


def main(device: str, scratch: str, requests, reply, log_path: str, isolate: bool = True) -> None:
    """Entry point in the spawned process."""
    os.setsid()  # its own process group: the parent kills the whole group on timeout
    from cuda_agent.eval.sandbox import isolate_network

    # no network for candidate code; done first, while the process is still single-threaded
    net_note = isolate_network() if isolate else "network isolation off (EvalConfig.sandbox)"
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log, 1)
    os.dup2(log, 2)
    from cuda_agent.eval.sandbox import scrubbed_env

    clean = scrubbed_env(dict(os.environ))  # no API keys or cloud credentials for candidate code
    os.environ.clear()
    os.environ.update(clean)
    os.environ["TMPDIR"] = scratch
    os.environ.setdefault("CUDA_CACHE_PATH", os.path.join(scratch, "nv-cache"))

    def send(obj: dict) -> None:
        reply.send_bytes(json.dumps(obj).encode())

    try:
        worker = _Worker(device, Path(scratch))
    except Exception as e:
        send({"ok": False, "error": f"worker start failed: {type(e).__name__}: {e}"})
        return
    send({"ok": True, "ready": True, "pid": os.getpid()})
    worker.notes = [net_note] if net_note else []
    handlers = {
        "load_candidate": worker.load_candidate,
        "load_reference": worker.load_reference,
        "run": worker.run,
        "time": worker.time,
    }
    while True:
        req = requests.get()
        if req.get("op") == "exit":
            return
        try:
            send(handlers[req["op"]](req))
        except BaseException as e:  # the candidate's failure is a verdict, not a worker crash
            tb = traceback.format_exception(type(e), e, e.__traceback__)
            send({"ok": False, "error": f"{type(e).__name__}: {e}", "traceback": "".join(tb[-6:])[-3000:]})
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
