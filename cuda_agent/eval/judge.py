"""The judge: replays a candidate's launch plan on memory the parent lends it, jailed, and never
imports its Python.

    python -m cuda_agent.eval.judge --reply-fd N --handover-fd M --device D --task PATH::Class [--inputs F]

Started ahead of need. Before any candidate code is loaded it imports torch, starts the CUDA
context and loads the task from the judge's private copy (for baselines). Then `load_library`
binds the built library's launchers with ctypes (the library passed the native audit), `prepare`
binds a checked plan to a layout, and `run` / `batch` replay it: the parent has put every rep's
inputs, the parameters and the allocations into a block (handover.py) and passes its descriptor
with the request; the judge maps it, runs every rep back to back, synchronizes and unmaps it.
Nothing it answers decides a verdict: the outputs are in the parent's memory, and the parent's
clock brackets the request. A judge that times baselines (`prepare_reference`) never loads a library.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

from cuda_agent.eval.handover import strided, typed
from cuda_agent.eval.plan import POISON, Call, Fill, Plan, Pointer
from cuda_agent.eval.protocol import Keep, LayoutSpec, LoadLibrary, Prepare, PrepareReference, Run, RunBatch, Settle
from cuda_agent.kernels.binding import RawLibrary


class Replay:
    """One checked plan bound to a library and a layout: per rep, the launcher calls with their
    pointers as offsets into the block (the block's address is known only once it is lent)."""

    def __init__(self, torch, plan: Plan, lib: RawLibrary | None, layout: LayoutSpec, device: str):
        self.torch, self.plan, self.device, self.lib = torch, plan, device, lib
        self.cuda = device.startswith("cuda")
        self.noop = lib is None  # the calibration's replay: the same layout, nothing run
        self.stream = torch.cuda.current_stream().cuda_stream if self.cuda else None
        self.rows: list[list[int]] = layout.reps
        self.sizes: list[int] = layout.sizes
        self.nbytes: int = layout.nbytes
        # allocations that start filled: filled inside the call, as forward would
        self.fills = [
            (i, s.fill, s.dtype) for i, s in enumerate(plan.storages) if s.kind == "alloc" and s.fill != POISON
        ]
        self.steps = []
        for step in plan.steps:
            if isinstance(step, Fill):
                self.steps.append((step, None, False, None))
                continue
            fn, checked = lib.fns[step.launcher] if lib is not None else (None, False)
            args = [
                None if a is None else (a.storage, a.offset) if isinstance(a, Pointer) else a.value for a in step.args
            ]
            pointers = [k for k, a in enumerate(step.args) if isinstance(a, Pointer)]
            self.steps.append((step, fn, checked, (args, pointers)))

    def rep(self, block, base: int, r: int) -> None:
        """One forward of rep `r`: allocation fills, then each step in order."""
        if self.noop:
            return
        row = self.rows[r]
        for i, value, dtype in self.fills:
            typed(block[row[i] : row[i] + self.sizes[i]], dtype).fill_(value)
        stream = self.stream
        for step, fn, checked, bound in self.steps:
            if bound is None:
                v = step.view
                i = v.storage
                strided(typed(block[row[i] : row[i] + self.sizes[i]], v.dtype), v.shape, v.stride, v.offset).fill_(
                    step.value
                )
                continue
            args, pointers = bound
            args = list(args)
            for k in pointers:
                storage, offset = args[k]
                args[k] = base + row[storage] + offset
            rc = fn(*args, stream)
            if checked and rc:
                raise RuntimeError(f"{step.launcher} returned {rc}")
            if not self.cuda:  # host-only: whether this call launched a kernel (which does nothing there)
                self.lib.check_error(step.launcher)

    def check_errors(self) -> None:
        """On a GPU, CUDA's error state once per batch (launch errors, and faults once they surface)."""
        if self.cuda and not self.noop:
            self.lib.check_error(", ".join(sorted({s.launcher for s, *_ in self.steps if isinstance(s, Call)})))


class _Judge:
    def __init__(
        self,
        device: str,
        task_ref: str,
        inputs_path: str | None,
        init_seed: int,
        task_hash: str | None,
        handover: socket.socket,
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
        self.init_seed = init_seed
        self.model = None  # the task's module, built by the first prepare_reference: a candidate's judge
        # (its parameters come from the parent's block) never needs it, nor its memory on the device
        self.started["task"] = time.perf_counter() - t - self.started["context"]
        self.sync = torch.cuda.synchronize if self.cuda else (lambda: None)
        self.lib: RawLibrary | None = None
        self.handover = handover  # where the parent's blocks arrive
        self._prepared: Replay | _Forward | None = None
        self._kept = None  # Keep: the data block batches with a `k` run on, and the flag block
        self._flags = None
        self._loaded = None  # the prepared layout whose kernels a queued batch has launched once
        self._queued_events: list | None = None  # around the last queued batch's reps, for Settle
        self._compiled: dict[str, object] = {}  # compile mode -> torch.compile(model)
        t = time.perf_counter()
        if self.cuda and trace:
            self._warm_profiler()
        self.started["profiler"] = time.perf_counter() - t
        t = time.perf_counter()
        self._warm_paths()
        self.started["paths"] = time.perf_counter() - t

    def _warm_paths(self) -> None:
        """Run the harness's own code paths once (a block, its views, events, an input draw), so
        thread pools they start exist before the library is loaded: the parent counts this
        process's threads from then on, and new ones are the library's."""
        from cuda_agent.eval.handover import Block

        self.task.draw_inputs(0, self.device)
        with Block(1 << 20, self.device) as block:  # the judge's own: the same code as a lent one
            block.tensor.fill_(0xFF)
            block.tensor[:4096].view(self.torch.float32).as_strided([32, 32], [32, 1], 0).fill_(1.0)
            if self.cuda:
                a, b = self.torch.cuda.Event(enable_timing=True), self.torch.cuda.Event(enable_timing=True)
                a.record()
                b.record()
        self.sync()

    def _warm_profiler(self) -> None:
        """CUPTI's first start costs about a second: pay it while waiting, not in a verdict."""
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]):
            self.torch.empty(1024, device=self.device).zero_()
            self.sync()

    # -- requests ------------------------------------------------------------------------------
    def load_library(self, req: LoadLibrary) -> dict:
        self.lib = RawLibrary(Path(req.build_dir), self.cuda)
        return {"ok": True}

    def prepare(self, req: Prepare) -> dict:
        """Bind a checked plan to a layout (`noop`: the same layout with no launcher called, which
        is how the parent calibrates its clock before any candidate code is here)."""
        if self.lib is None and not req.noop:
            raise RuntimeError("no kernel library loaded: a candidate needs kernels/*.cu")
        self._prepared = Replay(self.torch, Plan(**req.plan), None if req.noop else self.lib, req.layout, self.device)
        return {"ok": True}

    def prepare_reference(self, req: PrepareReference) -> dict:
        """Bind the task's own forward (eager, or torch.compile in `compile_mode`) to a layout of
        its tensor inputs. A judge that does this never loads a library."""
        if self.lib is not None:
            raise RuntimeError("a judge that loaded a candidate's library times no baseline")
        if self.model is None:
            self.model = self.task.build_model(self.task.init_inputs(self.init_seed), self.device, self.init_seed)
        model = self.model
        if mode := req.compile_mode:  # compiled once per judge: interleaved rounds time it again
            if mode not in self._compiled:
                self._compiled[mode] = self.torch.compile(model, mode=None if mode == "default" else mode)
            model = self._compiled[mode]
        self._prepared = _Forward(self.torch, model, req.inputs, req.layout, noop=req.noop)
        return {"ok": True}

    def _lent(self, nbytes: int):
        from cuda_agent.eval.handover import Block, receive_fd

        return Block(nbytes, self.device, receive_fd(self.handover))

    def _ready(self) -> Replay | _Forward:
        if self._prepared is None:
            raise RuntimeError("nothing prepared: a run or a batch follows a prepare request")
        return self._prepared

    def run(self, req: Run) -> dict:
        """One checked call (correctness): rep 0 of the prepared layout, on the lent block."""
        replay = self._ready()
        kernels: list[str] = []
        with self._lent(replay.nbytes) as block:
            t0 = time.perf_counter()
            if req.trace and self.cuda:
                from torch.profiler import ProfilerActivity, profile

                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    replay.rep(block.tensor, block.base, 0)
                    self.sync()
                kernels = [
                    e.name for e in prof.events() if str(getattr(e, "device_type", "")).endswith("CUDA") and e.name
                ]
            else:
                replay.rep(block.tensor, block.base, 0)
            self.sync()
            replay.check_errors()
            ms = (time.perf_counter() - t0) * 1e3
        return {"ok": True, "kernels": kernels, "ms": ms}

    def keep(self, req: Keep) -> dict:
        """Map the block lent with the request and keep it (the flag block, or the data block that
        replaces the last one)."""
        block = self._lent(req.nbytes)
        old, self._flags, self._kept = (
            (self._flags, block, self._kept) if req.flags else (self._kept, self._flags, block)
        )
        if old is not None:
            old.close()
        return {"ok": True}

    def queued_batch(self, k: int) -> dict:
        """The reps on the kept block, queued behind a wait for the flag block's `go` word to reach
        k and followed by a write of k to its `done` word; answered without synchronizing (the
        parent's events bracket the batch; Settle reports its faults)."""
        from cuda_agent.eval.handover import DONE_OFFSET, GO_OFFSET, wait_value, write_value

        prepared = self._ready()
        if self._kept is None or self._flags is None or not self.cuda:
            raise RuntimeError("a queued batch needs a GPU, a kept block and the flag block (Keep)")
        base, tensor = self._kept.base, self._kept.tensor
        if self._loaded is not prepared:
            # one rep first, not queued: with CUDA's lazy module loading a kernel's first launch loads
            # its module and waits for the device, which behind the wait on `go` would never return
            prepared.rep(tensor, base, 0)
            self.sync()
            self._loaded = prepared
        stream = self.torch.cuda.current_stream().cuda_stream
        go, done = self._flags.base + GO_OFFSET, self._flags.base + DONE_OFFSET
        events = [self.torch.cuda.Event(enable_timing=True) for _ in range(2)]
        wait_value(stream, go, k)
        events[0].record()
        for r in range(len(prepared.rows)):
            prepared.rep(tensor, base, r)
        events[1].record()
        write_value(stream, done, k)
        self._queued_events = events
        return {"ok": True}

    def settle(self, req: Settle) -> dict:
        """The queued batch's end: its faults, and its events (the parent's tripwire, never its figure
        unless its own clock agrees)."""
        self.sync()
        self._ready().check_errors()
        events, self._queued_events = self._queued_events, None
        return {"ok": True, "event_ms": events[0].elapsed_time(events[1]) if events else None}

    def batch(self, req: RunBatch) -> dict:
        """Every rep of the prepared layout back to back on the lent block, then synchronize: the
        parent's wall clock brackets this request (the host; on a GPU every batch is queued, with
        `k`: queued_batch). `phases` say where the judge's own time went (for benchmarks: not
        evidence)."""
        if req.k is not None:
            return self.queued_batch(req.k)
        prepared = self._ready()
        t = [time.perf_counter()]
        block = self._lent(prepared.nbytes)
        try:
            t.append(time.perf_counter())
            base, tensor = block.base, block.tensor
            for r in range(len(prepared.rows)):
                prepared.rep(tensor, base, r)
            t.append(time.perf_counter())
            self.sync()
            t.append(time.perf_counter())
            prepared.check_errors()
        finally:
            block.close()
        t.append(time.perf_counter())
        phases = {k: (b - a) * 1e3 for k, a, b in zip(("map_ms", "queue_ms", "sync_ms", "unmap_ms"), t, t[1:])}
        return {"ok": True, "phases": phases}


class _Forward:
    """The task's own forward bound to a layout: each rep's inputs are views of the lent block."""

    def __init__(self, torch, model, described: list, layout: LayoutSpec, noop: bool = False):
        self.torch, self.model, self.described, self.noop = torch, model, described, noop
        self.rows, self.sizes, self.nbytes = layout.reps, layout.sizes, layout.nbytes

    def _inputs(self, block, row: list[int]) -> list:
        k = iter(range(len(row)))

        def build(d):
            if "tensor" in d:
                t, i = d["tensor"], next(k)
                region = typed(block[row[i] : row[i] + t["nbytes"]], t["dtype"])
                return strided(region, t["shape"], t["stride"], t["offset"])
            if "tuple" in d or "list" in d:
                items = [build(v) for v in d.get("tuple", d.get("list"))]
                return tuple(items) if "tuple" in d else items
            return float(d["float"]) if "float" in d else d["value"]

        return [build(d) for d in self.described]

    def check_errors(self) -> None:
        pass  # torch raises its own

    def rep(self, block, base: int, r: int) -> None:
        inputs = self._inputs(block, self.rows[r])
        if not self.noop:
            with self.torch.no_grad():
                self.model(*inputs)


def main(argv: list[str] | None = None) -> None:
    import argparse

    from cuda_agent.eval.channel import fd_arg, reply_fd_arg, serve
    from cuda_agent.eval.protocol import JudgeRequest

    fd, rest = reply_fd_arg(list(sys.argv[1:] if argv is None else argv))
    lend_fd, rest = fd_arg(rest, "--handover-fd")
    if lend_fd is None:
        raise SystemExit("the judge is started by the evaluator: --reply-fd and --handover-fd are required")
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
        handover = socket.socket(fileno=lend_fd)
        j = _Judge(args.device, args.task, args.inputs, args.init_seed, args.task_hash, handover, args.trace)
        return {
            "load_library": j.load_library,
            "prepare": j.prepare,
            "prepare_reference": j.prepare_reference,
            "run": j.run,
            "batch": j.batch,
            "keep": j.keep,
            "settle": j.settle,
            "_started": j.started,
        }

    serve(fd, start, JudgeRequest)


if __name__ == "__main__":
    main()
