"""A probe for a parent's clock that lives on the GPU's own timeline: the parent brackets a batch
with CUDA events in its own process (no candidate code there), and orders the child's work between
them with stream memory operations on a flag block both map (a VMM block lent by descriptor, as
the harness lends its blocks), so no host latency, pipe or mapping falls inside the interval:

    child stream:   wait(go>=k) | R reps | write(done=k)      (queued first; the child answers 'queued')
    parent stream:  E0 | fill inputs, poison outputs | Ef | write(go=k) | wait(done>=k) | copy sampled outputs | E1

Per batch it prints the child's own events (trusted here: this child is the harness's), the parent's
E0->E1 and Ef->E1, and the parent's figure (Ef->E1 less the calibrated tail, per rep). Hostile modes
show what the parent sees when the child answers early, starts before its inputs are there, or
computes every rep's outputs in its first launch (`batch_ahead`: all inputs are in the block at go).

`--per-call` releases each rep's inputs only once the rep before it is done: the parent copies rep r's
inputs in and writes go = r + 1 after waiting for done >= r, and the child waits for go before each
rep; what that handover costs per rep, and how steady it is, is the calibration's tail (work "none").
The parent queues three operations per rep: keep R well under ~600 (a stream holds about 2000 before
queueing blocks the host, and the parent queues before the child is asked).

    python3 benchmarks/gpu_clock_probe.py [--jail] [--batches 20]
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _cu():
    return ctypes.CDLL("libcuda.so.1")


def send(sock: socket.socket, obj: dict) -> None:
    sock.sendall((json.dumps(obj) + "\n").encode())


def receive(f, child_pid: int | None = None) -> dict:
    """One line; the parent, after 30 s of silence, shows where the child is (its Python stack by
    SIGUSR1, its kernel wait channel and state) before it gives up."""
    try:
        line = f.readline()
    except TimeoutError:
        if child_pid is not None:
            os.kill(child_pid, signal.SIGUSR1)
            time.sleep(2)
            for name in ("wchan", "status"):
                try:
                    text = Path(f"/proc/{child_pid}/{name}").read_text()
                except OSError as e:
                    text = str(e)
                say(f"child {name}:", " ".join(text.split("\n")[:3]) if name == "status" else text)
        raise RuntimeError("the child said nothing for 30 s") from None
    if not line:
        raise RuntimeError("the other side hung up")
    return json.loads(line)


# -- the child ------------------------------------------------------------------------------
def say(*what) -> None:
    """Progress on stderr (both processes), so a hang shows where it stopped."""
    print(f"[{os.getpid()}]", *what, file=sys.stderr, flush=True)


def child(fd: int) -> None:
    import faulthandler

    import torch

    faulthandler.dump_traceback_later(40, exit=True)  # a hang prints every thread's stack, then exits (reset per step)
    faulthandler.register(signal.SIGUSR1, all_threads=True)  # the parent asks where this process is

    from cuda_agent.eval.handover import Block, receive_fd, wait_value, write_value

    sock = socket.socket(fileno=fd)
    rf = sock.makefile("r")
    torch.cuda.init()
    flags_fd = receive_fd(sock)
    flags = Block(4096, "cuda", flags_fd)
    block: Block | None = None
    stream = torch.cuda.Stream()  # not the legacy default stream, which waits for every other one
    torch.cuda.set_stream(stream)
    say("child: flags mapped")
    events: list = []
    said_reps = False  # the first batch with work says each rep it queues: a hang shows which
    while True:
        faulthandler.dump_traceback_later(40, exit=True)
        msg = receive(rf)
        op = msg["op"]
        if op == "exit":
            return
        if op == "lend":  # the data block: R reps of (input, output), each n floats
            send(sock, {"ok": True})
            if block is not None:
                block.close()
            block = Block(msg["nbytes"], "cuda", receive_fd(sock))
            m = 256
            w = block.tensor[: 2 * m * m * 4].view(torch.float32)
            torch.mm(w[: m * m].view(m, m), w[: m * m].view(m, m), out=w[m * m :].view(m, m))  # cuBLAS ready
            # every kernel a batch launches, launched once now: with lazy module loading (CUDA's default) a
            # kernel's first launch loads its module, which waits for the device, so behind a queued
            # wait on 'go' it would never return
            torch.mul(w[: m * m], 1.0001, out=w[m * m :])
            w[m * m :].add_(0.5)
            torch.cuda.synchronize()
            say("child: block mapped,", msg["nbytes"], "bytes")
            send(sock, {"ok": True})
            continue
        if op == "batch":
            assert block is not None
            k, reps, n, work, mode = msg["k"], msg["reps"], msg["n"], msg["work"], msg["mode"]
            same = msg.get("same", False)  # every rep on rep 0's memory: what fresh pages per rep cost
            # per call: rep r waits for go >= k0 + r + 1 (its inputs released) and writes done = k0 + r + 1
            per_call, k0 = msg.get("per_call", False), msg.get("k0", k - 1)
            base = block.tensor
            view = base[: 2 * reps * n * 4].view(torch.float32).view(reps, 2, n)
            go, done = flags.base, flags.base + 4
            if k <= 4:
                say("child: batch", k, "received")
            if mode == "early_done":
                write_value(stream.cuda_stream, done, k)
            if mode != "no_wait" and not per_call:
                wait_value(stream.cuda_stream, go, k)
            if k <= 4:
                say("child: batch", k, "wait queued")
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record(stream)
            loud = work != "none" and not said_reps
            pairs = []  # per call: events around each rep's own work, not its wait
            for r in range(reps):
                if loud:
                    say("child: batch", k, "rep", r)
                if per_call:
                    if mode != "no_wait":
                        wait_value(stream.cuda_stream, go, k0 + r + 1)
                    pairs.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
                    pairs[-1][0].record(stream)
                x, y = view[0 if same else r, 0], view[0 if same else r, 1]
                if mode == "batch_ahead":  # every rep's outputs in the first launch, from what the block holds
                    if r == 0:
                        torch.mul(view[:, 0], 1.0001, out=view[:, 1])
                elif work == "ew":
                    torch.mul(x, 1.0001, out=y)
                    y.add_(0.5)
                elif work == "ew1":  # one kernel: read x, write y
                    torch.mul(x, 1.0001, out=y)
                elif work == "mm":
                    m = int(n**0.5)
                    torch.mm(x.view(m, m), x.view(m, m), out=y.view(m, m))
                elif work == "none":
                    pass
                if per_call:
                    pairs[-1][1].record(stream)
                    if mode != "early_done":
                        write_value(stream.cuda_stream, done, k0 + r + 1)
            e1.record(stream)
            said_reps = said_reps or loud
            if k <= 4 or loud:
                say("child: batch", k, "reps queued")
            if mode != "early_done" and not per_call:
                write_value(stream.cuda_stream, done, k)
            events = [e0, e1, pairs]
            if k <= 2:
                say("child: batch", k, "queued")
            send(sock, {"queued": True})
            continue
        if op == "events":
            if msg.get("k", 0) <= 4:
                say("child: events of batch", msg.get("k"))
            torch.cuda.synchronize()
            if events[2]:  # per call: the reps' own work, the waits between them left out
                send(sock, {"ms": sum(a.elapsed_time(b) for a, b in events[2])})
            else:
                send(sock, {"ms": events[0].elapsed_time(events[1])})


# -- the parent -----------------------------------------------------------------------------
class Probe:
    def __init__(
        self, jail: bool, order: str = "child_first", parent_wait: str = "gpu", same: bool = False, per_call=False
    ):
        self.order, self.parent_wait, self.same, self.per_call = order, parent_wait, same, per_call
        import torch

        from cuda_agent.eval.handover import Block, send_fd

        self.torch, self.send_fd, self.Block = torch, send_fd, Block
        parent_sock, child_sock = socket.socketpair()
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(child_sock.fileno())]
        bwrap = os.environ.get("CUDA_AGENT_BWRAP") or shutil.which("bwrap")
        if jail and bwrap:
            cmd = [
                bwrap,
                "--dev-bind",
                "/",
                "/",
                "--proc",
                "/proc",
                "--unshare-pid",
                "--unshare-ipc",
                "--unshare-net",
                "--die-with-parent",
                "--",
            ] + cmd
        self.jailed = jail and bool(bwrap)
        env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
        self.proc = subprocess.Popen(cmd, pass_fds=[child_sock.fileno()], env=env)
        child_sock.close()
        self.sock = parent_sock
        parent_sock.settimeout(30)
        self.rf = parent_sock.makefile("r")
        self.stream = torch.cuda.Stream()
        torch.cuda.set_stream(self.stream)
        self.flags = Block(4096, "cuda")
        self.flags.tensor.zero_()
        torch.cuda.synchronize()
        send_fd(self.sock, self.flags.fd)
        self.k = 0
        self.block = None

    def lend(self, reps: int, n: int) -> None:
        nbytes = 2 * reps * n * 4
        if self.block is not None:
            self.block.close()
        self.block = self.Block(nbytes, "cuda")
        send(self.sock, {"op": "lend", "nbytes": nbytes})
        receive(self.rf, self.proc.pid)
        self.send_fd(self.sock, self.block.fd)
        receive(self.rf, self.proc.pid)
        say("parent: lent", nbytes, "bytes")

    def batch(self, reps: int, n: int, work: str, mode: str = "honest") -> dict:
        import faulthandler

        from cuda_agent.eval.handover import wait_value, write_value

        faulthandler.dump_traceback_later(45, exit=True)  # this batch only: a hang shows where, then exits
        torch = self.torch
        view = self.block.tensor[: 2 * reps * n * 4].view(torch.float32).view(reps, 2, n)
        staging = torch.randn(reps, n, device="cuda")  # the parent's own memory: the child cannot see it
        sample = 0 if self.same else reps - 1
        snap = torch.empty(n, device="cuda")
        s = self.stream
        torch.cuda.synchronize()
        k0 = self.k
        self.k += reps if self.per_call else 1  # per call: one release (go) and one done per rep
        k = self.k
        go, done = self.flags.base, self.flags.base + 4
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(3)]

        def parent_side() -> None:
            ev[0].record(s)
            if not self.per_call:
                view[:, 0].copy_(staging)
            view[:, 1].fill_(float("nan"))
            ev[1].record(s)
            if self.per_call:  # each rep's inputs arrive only once the rep before it is done
                for r in range(reps):
                    if r:
                        wait_value(s.cuda_stream, done, k0 + r)
                    view[r, 0].copy_(staging[r])
                    write_value(s.cuda_stream, go, k0 + r + 1)
            else:
                write_value(s.cuda_stream, go, k)
            if self.parent_wait == "gpu":
                wait_value(s.cuda_stream, done, k)
                snap.copy_(view[sample, 1])
            ev[2].record(s)  # host: nothing of the parent's is pending while the child runs (time slices)

        if self.order == "parent_first":  # the child's host queueing falls inside the interval
            parent_side()
        send(
            self.sock,
            {"op": "batch", "k": k, "k0": k0, "reps": reps, "n": n, "work": work, "mode": mode, "same": self.same}
            | {"per_call": self.per_call},
        )
        try:
            receive(self.rf, self.proc.pid)  # the child's reps are queued behind its wait on 'go'
        except RuntimeError:
            with torch.cuda.stream(torch.cuda.Stream()):  # not behind our own stream
                say("parent: go/done", self.flags.tensor[:8].view(torch.int32).cpu().tolist(), "k", k)
            raise
        if self.order != "parent_first":
            parent_side()
        started = False
        for _ in range(20000):
            if ev[2].query():
                break
            time.sleep(0.0005)
        else:
            with torch.cuda.stream(torch.cuda.Stream()):  # not behind the stuck stream
                flags = self.flags.tensor[:8].view(torch.int32).cpu()
            raise RuntimeError(f"batch {k} never finished: go/done {flags.tolist()}")
        send(self.sock, {"op": "events", "k": k})
        child_ms = receive(self.rf, self.proc.pid)["ms"]
        if self.parent_wait == "host":
            snap.copy_(view[sample, 1])
        if work == "ew" and mode != "batch_ahead":
            want = staging[sample] * 1.0001 + 0.5
        elif work == "ew1" or mode == "batch_ahead":
            want = staging[sample] * 1.0001
        elif work == "mm":
            m = int(n**0.5)
            x = staging[sample].view(m, m)
            want = (x @ x).view(-1)
        else:
            want = None
        wrong = None if want is None else int((~torch.isclose(snap, want, rtol=1e-3, atol=1e-3)).sum())
        return {
            "total": ev[0].elapsed_time(ev[2]),
            "after_fill": ev[1].elapsed_time(ev[2]),
            "fill": ev[0].elapsed_time(ev[1]),
            "child": child_ms,
            "wrong": wrong,
            "gap": started,
        }

    def close(self) -> None:
        send(self.sock, {"op": "exit"})
        self.proc.wait(30)


def smoke() -> None:
    """Stream memory operations within one process first: a wait on one stream released by a write
    on another, on torch's memory and on a VMM block; and the driver's attributes for them."""
    import torch

    from cuda_agent.eval.handover import Block, wait_value, write_value

    torch.zeros(1, device="cuda")  # the primary context, current
    lib = _cu()
    dev = ctypes.c_int(torch.cuda.current_device())  # a CUdevice is its ordinal
    for attr in (92, 93, 94):  # CAN_USE_STREAM_MEM_OPS_V1, ..._64_BIT_..._V1, ..._WAIT_VALUE_NOR_V1 (cuda.h)
        v = ctypes.c_int(-1)
        rc = lib.cuDeviceGetAttribute(ctypes.byref(v), attr, dev)
        say(f"smoke: device attribute {attr} = {v.value} (rc {rc})")
    waiting, writing = torch.cuda.Stream(), torch.cuda.Stream()
    block = Block(4096, "cuda")
    for name, addr in (("torch", torch.zeros(1, dtype=torch.int32, device="cuda").data_ptr()), ("vmm", block.base)):
        torch.cuda.synchronize()
        ev = torch.cuda.Event()
        wait_value(waiting.cuda_stream, addr, 1)
        ev.record(waiting)
        write_value(writing.cuda_stream, addr, 1)
        for _ in range(2000):
            if ev.query():
                say(f"smoke: a wait on {name} memory was released by a write on another stream")
                break
            time.sleep(0.001)
        else:
            say(f"smoke: a wait on {name} memory was NOT released within 2 s")
    torch.cuda.synchronize()
    block.close()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--child", type=int)
    ap.add_argument("--jail", action="store_true")
    ap.add_argument("--batches", type=int, default=20)
    ap.add_argument("--parent-wait", choices=["gpu", "host"], default="gpu")
    ap.add_argument("--same-region", action="store_true", help="every rep on the same memory (fresh pages cost)")
    ap.add_argument("--cases", default="", help="work:n:R,... (default: the built-in list)")
    ap.add_argument("--order", choices=["child_first", "parent_first"], default="parent_first")
    ap.add_argument("--per-call", action="store_true", help="each rep's inputs released when the rep before is done")
    args = ap.parse_args()
    if args.child is not None:
        child(args.child)
        return
    import faulthandler

    import torch

    faulthandler.dump_traceback_later(60, exit=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    smoke()
    p = Probe(args.jail, args.order, args.parent_wait, args.same_region, args.per_call)
    print(
        f"{torch.cuda.get_device_name()}, child {'in bwrap (own PID, IPC, net ns)' if p.jailed else 'unjailed'}, "
        f"{args.order}, parent waits on the {args.parent_wait}, {'per-call release' if args.per_call else 'one go'}"
    )
    cases = [
        ("ew", 1 << 20, 64),
        ("ew", 1 << 22, 16),
        ("ew", 1 << 24, 8),
        ("ew", 1 << 26, 2),
        ("mm", 1024 * 1024, 8),
        ("mm", 2048 * 2048, 4),
    ]
    if args.cases:
        cases = [(w, int(n), int(r)) for w, n, r in (c.split(":") for c in args.cases.split(","))]
    rows = []
    for work, n, reps in cases:
        say("parent: case", work, n, reps)
        p.lend(reps, n)
        cal = [p.batch(0 if False else reps, n, "none") for _ in range(args.batches)]
        tail = min(c["after_fill"] for c in cal)
        tail_med = statistics.median(c["after_fill"] for c in cal)
        for _ in range(3):
            p.batch(reps, n, work)  # warm-up
        got = [p.batch(reps, n, work) for _ in range(args.batches)]
        own = statistics.median(g["child"] for g in got) / reps
        parent = (statistics.median(g["after_fill"] for g in got) - tail) / reps
        spread = statistics.pstdev([(g["after_fill"] - tail) / reps for g in got]) / parent if parent > 0 else 0.0
        rows.append(
            (
                work,
                n,
                reps,
                tail,
                tail_med,
                statistics.median(g["fill"] for g in got),
                own,
                parent,
                parent / own if own > 0 else 0.0,
                spread,
                sum(g["wrong"] or 0 for g in got),
                sum(g["gap"] for g in got),
            )
        )
    print(
        f"\n{'work':4} {'n':>9} {'R':>3} {'tail min':>9} {'tail med':>9} {'fill':>8} {'child/rep':>10} "
        f"{'parent/rep':>10} {'p/c':>6} {'sd':>6} {'wrong':>6} {'gaps':>5}"
    )
    for w, n, r, t, tm, f, c, pa, ratio, sd, wrong, gaps in rows:
        print(
            f"{w:4} {n:9d} {r:3d} {t:9.4f} {tm:9.4f} {f:8.4f} {c:10.4f} {pa:10.4f} {ratio:6.3f} {sd:6.1%} "
            f"{wrong:6d} {gaps:5d}"
        )
    # hostile children: an early 'done' and a start before the inputs are there
    p.lend(8, 1 << 22)
    # batch_ahead: every rep's outputs in the first launch (right where all inputs are there at go)
    for mode in ("early_done", "no_wait", "batch_ahead"):
        got = [p.batch(8, 1 << 22, "ew", mode) for _ in range(5)]
        print(
            f"hostile {mode}: parent after_fill {statistics.median(g['after_fill'] for g in got):.4f} ms, "
            f"child events {statistics.median(g['child'] for g in got):.4f} ms, wrong outputs in the sampled "
            f"rep: {[g['wrong'] for g in got]}"
        )
    p.close()


if __name__ == "__main__":
    main()
