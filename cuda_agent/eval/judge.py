"""The judge: replays a candidate's launch plan on real data, jailed, and never imports its Python.

    python -m cuda_agent.eval.judge --reply-fd N --device D --task PATH::Class [--inputs F] --init-seed S

Started ahead of need. Before any candidate code is loaded it imports torch, starts the CUDA
context, loads the task from the judge's private copy and builds the reference's parameters
(the same seed as the parent). Then `load_library` binds the built library's launchers with
ctypes (the library passed the native audit: no load-time code, no symbols outside the
allowlist), and `run` / `time` replay plans: inputs drawn here from the parent's seeds,
allocations poisoned, outputs written as raw bytes into files the parent named. The parent
compares them with references it computed itself and bounds the reported times with its own
clock. A judge that times baselines (`time_reference`) never loads a library.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from cuda_agent.eval.plan import ELEMENT_SIZE, POISON, Call, Fill, Plan, Pointer
from cuda_agent.eval.protocol import Calibrate, LoadLibrary, Run, TimeCollect, TimeLoop, TimePrepare, TimeReference
from cuda_agent.kernels.binding import RawLibrary


class Replay:
    """One validated plan bound to this judge's parameters and a library."""

    def __init__(self, torch, plan: Plan, lib: RawLibrary, state: dict, device: str):
        self.torch, self.plan, self.device = torch, plan, device
        self.params = {i: state[s.name] for i, s in enumerate(plan.storages) if s.kind == "param"}
        self.allocs = [i for i, s in enumerate(plan.storages) if s.kind == "alloc"]
        self.cuda = device.startswith("cuda")
        self.calls = [
            (step, *lib.fns[step.launcher]) if isinstance(step, Call) else (step, None, False) for step in plan.steps
        ]
        self.lib = lib

    def allocate(self) -> dict[int, object]:
        """This call's allocations, every byte poisoned (NaN for floats): unwritten stays garbage."""
        torch = self.torch
        return {
            i: torch.empty(self.plan.storages[i].nbytes, dtype=torch.uint8, device=self.device).fill_(0xFF)
            for i in self.allocs
        }

    def _typed(self, buf, dtype: str):
        size = ELEMENT_SIZE[dtype]
        return buf[: (buf.numel() // size) * size].view(getattr(self.torch, dtype))

    def execute(self, inputs: list, bufs: dict) -> list:
        """The forward: allocation fills, then each step in order; returns the output views."""
        torch = self.torch
        bases = {}
        for i, s in enumerate(self.plan.storages):
            if s.kind == "input":
                t = inputs[s.index]
                if t.untyped_storage().nbytes() != s.nbytes:
                    raise RuntimeError(f"input {s.index} changed layout between recording and replay")
                bases[i] = t.untyped_storage().data_ptr()
            elif s.kind == "param":
                bases[i] = self.params[i].untyped_storage().data_ptr()
            else:
                bases[i] = bufs[i].data_ptr()
                if s.fill != POISON:
                    self._typed(bufs[i], s.dtype).fill_(s.fill)
        stream = torch.cuda.current_stream().cuda_stream if self.cuda else None
        for step, fn, checked in self.calls:
            if isinstance(step, Fill):
                v = step.view
                self._typed(self._storage(v.storage, inputs, bufs), v.dtype).as_strided(
                    v.shape, v.stride, v.offset
                ).fill_(step.value)
                continue
            args = [
                None if a is None else (bases[a.storage] + a.offset if isinstance(a, Pointer) else a.value)
                for a in step.args
            ]
            rc = fn(*args, stream)
            if checked and rc:
                raise RuntimeError(f"{step.launcher} returned {rc}")
            self.lib.check_error(step.launcher)
        return [
            self._typed(bufs[o.storage], o.dtype).as_strided(o.shape, o.stride, o.offset) for o in self.plan.outputs
        ]

    def _storage(self, i: int, inputs: list, bufs: dict):
        s = self.plan.storages[i]
        if s.kind == "alloc":
            return bufs[i]
        t = inputs[s.index] if s.kind == "input" else self.params[i]
        return self.torch.empty(0, dtype=self.torch.uint8, device=self.device).set_(t.untyped_storage())


def write_outputs(torch, outs: list, paths: list[str]) -> list[dict]:
    meta = []
    for o, path in zip(outs, paths):
        meta.append(
            {
                "plain": True,
                "type": "Tensor",
                "shape": list(o.shape),
                "stride": list(o.stride()),
                "dtype": str(o.dtype).removeprefix("torch."),
                "device": str(o.device),
            }
        )
        flat = o.contiguous().reshape(-1)
        if flat.numel():
            torch.from_file(path, shared=True, size=flat.numel(), dtype=o.dtype).copy_(flat)
        else:
            Path(path).write_bytes(b"")
    return meta


class _Judge:
    def __init__(
        self,
        device: str,
        task_ref: str,
        inputs_path: str | None,
        init_seed: int,
        task_hash: str | None,
        trace: bool = False,
    ):
        import torch

        from cuda_agent.eval.reference import pin_full_fp32
        from cuda_agent.task import load_task

        self.torch, self.device = torch, device
        self.cuda = device.startswith("cuda")
        self.started: dict[str, float] = {}  # seconds per start-up step, in the ready message
        t = time.perf_counter()
        if self.cuda:
            torch.cuda.set_device(device)
            torch.empty(1, device=device)  # the context now, not inside the first timing
        self.started["context"] = time.perf_counter() - t
        if not self.cuda:  # CPU mode (tests): no thread pool waking up per op, whose latency under
            torch.set_num_threads(1)  # load would be timed as the candidate's
        pin_full_fp32()
        self.task = load_task(task_ref, inputs=Path(inputs_path) if inputs_path else None, expected_hash=task_hash)
        init = self.task.init_inputs(init_seed)
        self.model = self.task.build_model(init, device, init_seed)
        self.state = {k: v.detach() for k, v in self.model.state_dict().items()}
        self.started["task"] = time.perf_counter() - t - self.started["context"]
        self.sync = torch.cuda.synchronize if self.cuda else (lambda: None)
        self.spin = getattr(torch.cuda, "_sleep", None) if self.cuda else None
        self.lib: RawLibrary | None = None
        self._timing: tuple | None = None
        self._compiled: dict[str, object] = {}  # compile mode -> torch.compile(model)
        t = time.perf_counter()
        if self.cuda and trace:
            self._warm_profiler()
        self.started["profiler"] = time.perf_counter() - t
        t = time.perf_counter()
        self._warm_paths()
        self.started["paths"] = time.perf_counter() - t

    def _warm_paths(self) -> None:
        """Run the harness's own code paths once (input draw, poison, the output file, the mutation
        check), so thread pools they start exist before the library is loaded: the parent counts
        this process's threads from then on, and new ones are the library's."""
        import tempfile

        inputs = self.task.draw_inputs(0, self.device)
        tensors = [x for x in inputs if isinstance(x, self.torch.Tensor)]
        buf = self.torch.empty(1 << 20, dtype=self.torch.uint8, device=self.device).fill_(0xFF)
        with tempfile.TemporaryDirectory() as tmp:
            write_outputs(self.torch, [buf.view(self.torch.float32)] + tensors[:1], [f"{tmp}/a", f"{tmp}/b"])
        self._mutated(inputs, 0)
        self.sync()

    def _warm_profiler(self) -> None:
        """CUPTI's first start costs about a second: pay it while waiting, not in a verdict."""
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]):
            self.torch.empty(1024, device=self.device).zero_()
            self.sync()

    def _timer(self, fn, sets: list, cfg: dict, before_rep=None):
        from cuda_agent.eval.timing import RepTimer, TimingConfig

        return RepTimer(
            fn,
            sets,
            self.device,
            TimingConfig(**cfg),
            synchronize=self.sync,
            event_cls=self.torch.cuda.Event if self.cuda else None,
            perf_counter=time.perf_counter,
            spin=self.spin,
            before_rep=before_rep,
        )

    # -- requests ------------------------------------------------------------------------------
    def calibrate(self, req: Calibrate) -> dict:
        """The timing loop around nothing, exactly `reps` reps, before any candidate code is here:
        the parent's clock over this request is the harness's own cost per rep."""
        timer = self._timer(lambda: None, [[]], req.config)
        timer.measure(req.reps)
        return {"ok": True}

    def load_library(self, req: LoadLibrary) -> dict:
        self.lib = RawLibrary(Path(req.build_dir), self.cuda)
        return {"ok": True}

    def _replay(self, plan: dict) -> Replay:
        if self.lib is None:
            raise RuntimeError("no kernel library loaded: a candidate needs kernels/*.cu")
        return Replay(self.torch, Plan(**plan), self.lib, self.state, self.device)

    def run(self, req: Run) -> dict:
        replay = self._replay(req.plan)
        inputs = self.task.draw_inputs(req.seed, self.device)
        bufs = replay.allocate()
        self.sync()
        kernels: list[str] = []
        t0 = time.perf_counter()
        if req.trace and self.cuda:
            from torch.profiler import ProfilerActivity, profile

            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                outs = replay.execute(inputs, bufs)
                self.sync()
            kernels = [e.name for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA") and e.name]
        else:
            outs = replay.execute(inputs, bufs)
        self.sync()
        ms = (time.perf_counter() - t0) * 1e3
        meta = write_outputs(self.torch, outs, req.files)
        n_outputs = len(outs)
        del outs, bufs  # in the parent's files now: the mutation check's fresh draw takes their place
        return {
            "ok": True,
            "n_outputs": n_outputs,
            "outputs": meta,
            "kernels": kernels,
            "ms": ms,
            "mutated": self._mutated(inputs, req.seed),
        }

    def _mutated(self, inputs: list, seed: int) -> list[int]:
        from cuda_agent.eval.checks import mutated_inputs

        return mutated_inputs(inputs, self.task.draw_inputs(seed, self.device))

    def time_prepare(self, req: TimePrepare) -> dict:
        """Draw the timing sets, bind their plans, warm up; returns the estimate per call. The
        measured loop is its own request (`time_loop`), so the parent's clock sees it alone."""
        sets = [(self.task.draw_inputs(s.seed, self.device), self._replay(s.plan)) for s in req.sets]
        pending: dict = {}

        def before(k: int) -> None:
            pending["bufs"] = sets[k][1].allocate()

        def fn(k: int):
            inputs, replay = sets[k]
            return replay.execute(inputs, pending["bufs"])

        self._timing = (req, sets, self._timer(fn, [[k] for k in range(len(sets))], req.config, before))
        return {"ok": True, "per_call_ms": self._timing[2].warm_up()}

    def time_loop(self, req: TimeLoop) -> dict:
        _, _, timer = self._timing
        return {"ok": True, "timing": self._describe(timer.measure(req.reps), req.nvml_index)}

    def time_collect(self, req: TimeCollect) -> dict:
        """The last output of every timing set into the parent's files; inputs checked unchanged."""
        prep, sets, timer = self._timing
        self.sync()
        for outs, files in zip(timer.last, req.files):
            if outs is not None:
                write_outputs(self.torch, outs, files)
        timer.last = []  # in the parent's files now
        mutated = [k for k, (inputs, _) in enumerate(sets) if self._mutated(inputs, prep.sets[k].seed)]
        self._timing = None  # the timing sets' inputs: nothing later reuses them
        return {"ok": True, "mutated_sets": mutated}

    def time_reference(self, req: TimeReference) -> dict:
        model = self.model
        if mode := req.compile_mode:  # compiled once per judge: interleaved rounds time it again
            if mode not in self._compiled:
                self._compiled[mode] = self.torch.compile(model, mode=None if mode == "default" else mode)
            model = self._compiled[mode]
        sets = [self.task.draw_inputs(seed, self.device) for seed in req.seeds]

        def fn(*xs):
            with self.torch.no_grad():
                return model(*xs)

        timer = self._timer(fn, sets, req.config)
        summary = timer.measure(timer.reps_for(timer.warm_up()))
        return {"ok": True, "timing": self._describe(summary, req.nvml_index)}

    def _describe(self, summary: dict, nvml_index: int) -> dict:
        from cuda_agent.eval.timing import read_clocks

        summary["clocks"] = read_clocks(nvml_index) if self.cuda else {}
        summary["device"] = self.torch.cuda.get_device_name(self.device) if self.cuda else "cpu"
        return summary


def main(argv: list[str] | None = None) -> None:
    import argparse

    from cuda_agent.eval.channel import reply_fd_arg, serve
    from cuda_agent.eval.protocol import JudgeRequest

    fd, rest = reply_fd_arg(list(sys.argv[1:] if argv is None else argv))
    ap = argparse.ArgumentParser(prog="python -m cuda_agent.eval.judge")
    ap.add_argument("--device", required=True)
    ap.add_argument("--task", required=True)
    ap.add_argument("--inputs", default=None)
    ap.add_argument("--init-seed", type=int, default=0)
    ap.add_argument("--task-hash", default=None, help="refuse a task copy that does not hash to this")
    ap.add_argument("--trace", action="store_true", help="warm CUPTI up: runs may list the kernels they launch")
    args = ap.parse_args(rest)
    if not args.device.startswith("cuda"):
        os.environ["CUDA_AGENT_HOST_ONLY"] = "1"

    def start():
        j = _Judge(args.device, args.task, args.inputs, args.init_seed, args.task_hash, args.trace)
        return {
            "calibrate": j.calibrate,
            "load_library": j.load_library,
            "run": j.run,
            "time_prepare": j.time_prepare,
            "time_loop": j.time_loop,
            "time_collect": j.time_collect,
            "time_reference": j.time_reference,
            "_started": j.started,
        }

    serve(fd, start, JudgeRequest)


if __name__ == "__main__":
    main()
