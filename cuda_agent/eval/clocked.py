"""Timed batches by the parent's clock: lend a block, wait for the judge, copy what will be
checked, stop the clock (docs/harness.md, "Timing"). One loop serves the candidate and the
baselines; what differs between them (the layout, how a rep is filled, what is checked) is a
`Batches` of its own in timing_phase.py.
"""

from __future__ import annotations

import statistics
import time
import weakref
from dataclasses import dataclass, field
from typing import Any, Callable

from cuda_agent.eval.batch import Layout
from cuda_agent.eval.channel import ChildError, JailedChild
from cuda_agent.eval.handover import DONE_OFFSET, GO_OFFSET, Block, wait_value, write_value
from cuda_agent.eval.protocol import Batched, Keep, Reply, Request, RunBatch, Settle, sane_ms

CALIBRATION_REPS = 9  # calibration batches; their median is the overhead
CALIBRATION_LAYOUT_REPS = 8
# A batch's work (its time less the calibrated overhead) must reach this many times the overhead's
# possible error, or R grows: an overhead calibrated too high then makes a figure read at most
# 1/RESOLVE too fast, never the floor of 1e-4 ms (on a loaded 2-core machine an honest candidate
# slower than eager read 29,273x faster: reward 2). The error: on the host the whole overhead (a
# median of wall times, all of them raised while the machine was busy); on a GPU the tail's noise
# (Overhead.noise), since its smallest of 18 GPU-timed tails is the figure, repeatable within a
# microsecond: nine times a 0.64 ms tail (a switch and two large output copies) left three of the
# five examples untimed for any candidate.
RESOLVE = 9.0
NOISE_FLOOR_MS = 0.002  # the least error a GPU tail is taken to have (one call's noise, as in OVERLAP_SLACK_MS)
EVENT_SLACK = 0.05  # events may read this much below the parent's figure (and the overhead's spread)
# the lead: the parent's stream idles this long (on the GPU, before its clock starts) while the judge queues
# its reps; the next batch's lead is 1.5x the host time the judge took to say they were queued (+0.2 ms)
LEAD_MS = (0.3, 2.0, 20.0)  # the least, the first batch's, the most
FILL_MARGIN = 0.02  # the calibrated fill may be this much slower in a batch before a judge gains from it


@dataclass
class Batches:
    """What one kind of timed call needs from the loop."""

    judge: JailedChild
    device: str
    prepare: Callable[[Layout, bool], Request]  # the prepare request for a layout (noop: calibration)
    layout: Callable[[int], Layout]  # R reps
    fill_shared: Callable[[Block, Layout], None]  # parameters (once per block)
    fill_rep: Callable[[Block, Layout, int], int]  # rep r's fresh inputs; returns their seed
    timeout_s: float
    snapshot: Callable[[Block, Layout, list[int]], dict] | None = None  # rep -> copies of its outputs
    max_reps: int = 1  # the most reps one block may hold (memory)
    timeline: Timeline | None = None  # on a GPU: the batches are timed on the GPU's own timeline

    @property
    def copies(self) -> int:
        """Sampled outputs a measured batch copies: as many as the calibration's batches did
        (`calibration_copies` of their layouts, two reps each wherever a block holds two)."""
        return len(calibration_copies(min(2, self.max_reps)))


def calibration_copies(reps: int) -> list[int]:
    """The reps whose outputs a calibration batch of `reps` copies, as a measured batch copies its
    sampled ones: the first and the last."""
    return sorted({0, reps - 1})


@dataclass
class Overhead:
    """What the protocol costs around a batch of reps that do nothing (ms), as the parent's clock
    saw it in a process with no candidate code; `spread` is the calibration's range less its ends."""

    fixed: float
    spread: float
    # the GPU timeline: copying a batch's block in takes fill_ms + fill_ms_per_gib x its GiB (fitted on two
    # layouts); `fixed` is then the tail after the copy (the switch back, the sampled outputs' copies)
    fill_ms: float = 0.0
    fill_ms_per_gib: float = 0.0
    # the GPU timeline: the tails' noise within one layout (the range less its ends); None on the host
    noise: float | None = None

    def fill(self, nbytes: int) -> float:
        return self.fill_ms + self.fill_ms_per_gib * nbytes / 2**30

    def error_ms(self) -> float:
        """How far `fixed` may read above what a batch really pays: the tail's noise on a GPU, the whole
        overhead on the host."""
        return self.fixed if self.noise is None else max(self.noise, NOISE_FLOOR_MS)

    def floor_ms(self) -> float:
        """The least work a batch must hold for its figure to count (RESOLVE)."""
        return RESOLVE * self.error_ms()

    # medians of where a calibration batch's time went (the judge's map/queue/sync/unmap as it says,
    # the parent's ipc/snap): for benchmarks that compare them with a measured batch's
    phases: dict = field(default_factory=dict)


@dataclass
class Batch:
    reps: int
    wall_ms: float
    per_call_ms: float  # the parent's figure
    event_ms: float | None  # the judge's estimate per call
    seeds: list[int] = field(default_factory=list)
    snaps: dict = field(default_factory=dict)
    # where the parent's time went: lending to the answer, the answer to holding the copies (benchmarks)
    parent_phases: dict = field(default_factory=dict)


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


def clocked(b: Batches, block: Block, layout: Layout, sample: list[int]) -> tuple[float, Batched, dict, dict]:
    """One batch on `block`: (wall ms, the judge's answer, snapshots of the sampled reps, where the
    parent's time went). The clock runs from lending the block to holding the copies: a judge that
    answers before its work is done gains nothing, as what it writes later is not in them."""
    req = RunBatch()
    _sync(b.device)
    t0 = time.perf_counter()
    b.judge.send(req, lend=block.fd)
    resp: Batched = b.judge.answer(req, b.timeout_s)
    t1 = time.perf_counter()
    snaps = b.snapshot(block, layout, sample) if b.snapshot is not None and resp.ok else {}
    _sync(b.device)
    t2 = time.perf_counter()
    return (t2 - t0) * 1e3, resp, snaps, {"ipc_ms": (t1 - t0) * 1e3, "snap_ms": (t2 - t1) * 1e3}


class Timeline:
    """The parent's clock on the GPU's own timeline, for one judge. The judge keeps two blocks the
    parent lent it (Keep): a flag block, whose `go` and `done` words order each batch, and the
    data block of the prepared layout. A batch (timeline_clocked), the parent's side queued first
    (the judge is asked once the wait on `done` is queued, before anything behind it):

        parent stream:  E0 | idle for the lead | Es | copy the batch's block in, write over L2 | Ef |
                        write(go = k) | wait(done >= k) | copy the sampled outputs | E1
        judge stream:   wait(go >= k) | R reps | write(done = k)   (queued during the lead)

    Es..E1 are the parent's own CUDA events: no host step (pipe, mapping, wake-up) is inside. The
    inputs stay in the parent's private block until Es; a judge that starts before `go` computes
    on the last batch's data and its outputs are overwritten with poison by the copy. The parent
    never waits for the judge before it queues its side, so no judge can hold it (a judge whose
    queueing blocks, as a kernel's first launch does under CUDA's lazy module loading, is let past
    by `go`); a judge that queues late has its host time inside the interval, never outside."""

    def __init__(self, judge: JailedChild, device: str, timeout: float):
        # the judge itself is not held: a finalizer on it closes these blocks once it is gone
        self.device = device
        self.flags = Block(4096, device)
        self.flags.tensor.zero_()
        self.k = 0
        self.kept: Block | None = None
        # the parent's private block of the same layout (its fd is never sent): each batch's fresh inputs are
        # written here and copied into `kept` inside the interval; one per layout, as calibrated
        self.source: Block | None = None
        import torch

        # written after each copy in (inside the interval, calibrated with it), so every rep's inputs
        # start in memory, not in L2, as the judge's events timed them per call before
        l2 = torch.cuda.get_device_properties(device).L2_cache_size
        self.scrub = torch.empty(2 * max(l2, 1 << 20), dtype=torch.uint8, device=device)
        self.lead_ms = LEAD_MS[1]
        self.cycles_per_ms = self._spin_rate()
        _sync(device)
        if not judge.request(Keep(nbytes=4096, flags=True), timeout, lend=self.flags.fd).ok:
            raise ChildError("crash", "the judge could not map the flag block")

    def _spin_rate(self) -> float:
        """Clock cycles per ms of torch.cuda._sleep (a kernel that spins for so many cycles): the lead."""
        import torch

        ev = [torch.cuda.Event(enable_timing=True) for _ in range(2)]
        torch.cuda._sleep(1000)  # loaded before it is timed
        ev[0].record()
        torch.cuda._sleep(2_000_000)
        ev[1].record()
        ev[1].synchronize()
        return 2_000_000 / max(ev[0].elapsed_time(ev[1]), 1e-3)

    def idle(self) -> None:
        """The lead, queued on the current stream."""
        import torch

        torch.cuda._sleep(int(self.lead_ms * self.cycles_per_ms))

    def queued_in(self, seconds: float) -> None:
        """The judge said its reps were queued `seconds` after the request: the next batch's lead."""
        self.lead_ms = min(LEAD_MS[2], max(LEAD_MS[0], 1.5 * seconds * 1e3 + 0.2))

    @property
    def go(self) -> int:
        return self.flags.base + GO_OFFSET

    @property
    def done(self) -> int:
        return self.flags.base + DONE_OFFSET

    def bind(self, judge: JailedChild, nbytes: int, timeout: float) -> Reply:
        """A data block of `nbytes` the judge keeps (the prepared layout's), lent now."""
        if self.kept is not None and self.kept.nbytes == nbytes:
            return Reply(ok=True)
        self.close_kept()
        self.kept = Block(nbytes, self.device)
        self.kept.tensor.fill_(0xFF)
        _sync(self.device)
        return judge.request(Keep(nbytes=nbytes), timeout, lend=self.kept.fd)

    def release(self) -> None:
        """Let the parent's own stream past its wait for `done` (a judge that never wrote it)."""
        import torch

        side = torch.cuda.Stream(self.device)
        write_value(side.cuda_stream, self.done, self.k)
        side.synchronize()

    def source_for(self, nbytes: int) -> Block:
        """The parent's private block for a layout of `nbytes` (the last one, or a new one)."""
        if self.source is None or self.source.nbytes != nbytes:
            if self.source is not None:
                self.source.close()
            self.source = Block(nbytes, self.device)
        return self.source

    def close_kept(self) -> None:
        if self.kept is not None:
            self.kept.close()
            self.kept = None

    def close(self) -> None:
        self.close_kept()
        if self.source is not None:
            self.source.close()
            self.source = None
        self.flags.close()


_timelines: weakref.WeakKeyDictionary[JailedChild, Timeline] = weakref.WeakKeyDictionary()


def timeline_for(judge: JailedChild, device: str, timeout: float) -> Timeline | None:
    """The judge's GPU-timeline clock (made at its first batch); None on the host."""
    if not device.startswith("cuda"):
        return None
    if judge not in _timelines:
        tl = Timeline(judge, device, timeout)
        _timelines[judge] = tl
        weakref.finalize(judge, tl.close)
    return _timelines[judge]


def prepare(b: Batches, layout: Layout, noop: bool) -> Reply:
    """Bind the prepared call to `layout` in the judge and, on the GPU timeline, lend the data block
    it keeps for that layout."""
    resp = b.judge.request(b.prepare(layout, noop), b.timeout_s)
    if resp.ok and b.timeline is not None:
        return b.timeline.bind(b.judge, layout.nbytes, b.timeout_s)
    return resp


def timeline_clocked(b: Batches, source: Block, layout: Layout, sample: list[int]) -> tuple[dict, Batched, dict]:
    """One batch on the GPU's timeline: `source` (the parent's private block: parameters, the reps'
    fresh inputs, poisoned allocations) copied into the kept block inside the interval. Returns
    ({total_ms, fill_ms, after_fill_ms, lead_ms}, the judge's answer, snapshots of the sampled reps)."""
    import torch

    tl = b.timeline
    assert tl is not None and tl.kept is not None
    tl.k += 1
    req = RunBatch(k=tl.k)
    stream = torch.cuda.current_stream(b.device)
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
    ev[0].record(stream)
    tl.idle()  # the judge queues its reps meanwhile
    ev[1].record(stream)
    tl.kept.tensor.copy_(source.tensor)
    tl.scrub.fill_(tl.k & 0xFF)
    ev[2].record(stream)
    write_value(stream.cuda_stream, tl.go, tl.k)
    wait_value(stream.cuda_stream, tl.done, tl.k)
    # asked now, before anything is queued behind that wait: a launch there may block this thread until
    # `done` (a kernel's first launch under lazy module loading), and `done` needs the judge's reps
    sent = time.monotonic()
    b.judge.send(req)
    snaps = b.snapshot(tl.kept, layout, sample) if b.snapshot is not None else {}
    ev[3].record(stream)
    resp: Batched | None = None
    deadline = sent + b.timeout_s
    while resp is None or not ev[3].query():
        if resp is None and b.judge.answered(0.0002):  # read as it comes: how long its queueing took
            tl.queued_in(time.monotonic() - sent)
            resp = b.judge.answer(req, b.timeout_s)
            if not resp.ok:  # nothing queued: it will never write `done`
                tl.release()
        elif not b.judge.alive():  # it will never write `done`: the parent's stream is let past, answer() says why
            tl.release()
            break
        elif time.monotonic() > deadline:
            tl.release()
            b.judge.kill()
            raise ChildError("timeout", f"the judge's batch did not end within {b.timeout_s:.0f} s")
        elif resp is not None:
            time.sleep(0.0002)
    ev[3].synchronize()
    if resp is None:
        resp = b.judge.answer(req, b.timeout_s)  # it died: says how
    if resp.ok:
        settled = b.judge.request(Settle(), b.timeout_s)
        resp = settled if settled.ok else Batched(ok=False, error=settled.error)  # its events come with Settle
    times = {
        "total_ms": ev[1].elapsed_time(ev[3]),
        "fill_ms": ev[1].elapsed_time(ev[2]),
        "after_fill_ms": ev[2].elapsed_time(ev[3]),
        "lead_ms": ev[0].elapsed_time(ev[1]),
    }
    return times, resp, snaps if resp.ok else {}


def timeline_figure(times: dict, overhead: Overhead, reps: int, nbytes: int) -> float:
    """Per call: the interval after the copy in, or the whole interval less the calibrated copy (with
    its margin), whichever is longer (a judge whose work overlaps the copy gains at most the margin),
    less the calibrated tail (the switch back and the sampled outputs' copies)."""
    work = max(times["after_fill_ms"], times["total_ms"] - overhead.fill(nbytes) * (1 + FILL_MARGIN))
    return max((work - overhead.fixed) / reps, 1e-4)


def calibrate(b: Batches, *, fresh: bool = False) -> Overhead | None:
    """The overhead of a batch, in the judge before it loaded anything of a candidate's: up to
    CALIBRATION_LAYOUT_REPS reps of the batches' layout with a replay that runs nothing, timed as a
    measured batch is (on a GPU: calibrate_timeline). `fresh`: each calibration batch on a block
    of its own, as every measured batch is (a block the judge mapped before may cost less to map
    again); else one block for all. None when the judge failed (the caller says so)."""
    if b.timeline is not None:
        return calibrate_timeline(b)
    reps = max(1, min(b.max_reps, CALIBRATION_LAYOUT_REPS))
    layout = b.layout(reps)
    if not b.judge.request(b.prepare(layout, True), b.timeout_s).ok:
        return None
    walls = []
    seen: list[dict] = []
    block: Block | None = None
    try:
        for _ in range(CALIBRATION_REPS):
            if block is None or fresh:
                if block is not None:
                    block.close()
                block = Block(layout.nbytes, b.device)
                b.fill_shared(block, layout)  # a noop reads no inputs
            wall, resp, _, mine = clocked(b, block, layout, calibration_copies(reps))
            if not resp.ok:
                return None
            seen.append(mine | (resp.phases or {}))
            walls.append(wall)
    finally:
        if block is not None:
            block.close()
    walls.sort()
    phases = {k: statistics.median(p.get(k, 0.0) for p in seen) for k in seen[0]} | {"reps": reps}
    return Overhead(fixed=statistics.median(walls), spread=walls[-2] - walls[1], phases=phases)


def calibrate_timeline(b: Batches) -> Overhead | None:
    """The GPU timeline's own costs, in the judge before any candidate code is there, with reps that
    run nothing: the copy in on two layouts (two reps, and the most a batch may hold: a line through
    their medians), and the tail after it (its smallest: a figure too high, never too low)."""
    tl = b.timeline
    assert tl is not None
    # two reps at least, so each batch copies two sampled outputs, as a measured batch does; the largest
    # layout a batch may have, so the measured copies lie within the fit, never beyond it
    sizes = sorted({min(2, b.max_reps), b.max_reps})
    fills: dict[int, float] = {}
    tails: list[float] = []
    noise = 0.0
    for reps in sizes:
        layout = b.layout(reps)
        if not prepare(b, layout, True).ok:
            return None
        source = tl.source_for(layout.nbytes)  # the block measured batches fill: same memory, same state
        b.fill_shared(source, layout)
        seen = []
        for _ in range(CALIBRATION_REPS):
            times, resp, _ = timeline_clocked(b, source, layout, calibration_copies(reps))
            if not resp.ok:
                return None
            seen.append(times)
        fills[layout.nbytes] = statistics.median(t["fill_ms"] for t in seen)
        mine = sorted(t["after_fill_ms"] for t in seen)
        noise = max(noise, mine[-2] - mine[1])
        tails += mine
    (small, f_small), (large, f_large) = min(fills.items()), max(fills.items())
    per_gib = (f_large - f_small) / ((large - small) / 2**30) if large > small else 0.0
    tails.sort()
    return Overhead(
        fixed=tails[0],
        spread=tails[-2] - tails[1] if len(tails) > 2 else 0.0,
        fill_ms=max(0.0, f_small - per_gib * small / 2**30),
        fill_ms_per_gib=max(0.0, per_gib),
        noise=noise,
        phases={"tail_median_ms": statistics.median(tails), "fill_ms": fills},
    )


def run_batch(
    b: Batches,
    layout: Layout,
    overhead: Overhead,
    sample: list[int],
    *,
    block: Block | None = None,
    after: Callable[[Block, Batch], None] | None = None,
) -> tuple[Batch, Batched]:
    """Fill a block with R fresh reps (or reuse `block`: warm-up), time it, and return the batch
    and the judge's answer; `after(block, batch)` runs on the block the judge ran on (the lent one,
    or on the GPU timeline the kept one) before it is closed (a given block stays open)."""
    reps = len(layout.reps)
    own = block is None
    seeds: list[int] = []
    if block is not None:
        lent = block
    elif b.timeline is not None:  # the parent's private block, refilled: it is never lent
        lent = b.timeline.source_for(layout.nbytes)
    else:
        lent = Block(layout.nbytes, b.device)
    t_inputs = time.perf_counter()
    try:
        if own:
            b.fill_shared(lent, layout)
            seeds = [b.fill_rep(lent, layout, r) for r in range(reps)]
        inputs_ms = (time.perf_counter() - t_inputs) * 1e3  # drawing the fresh inputs, outside the clock
        if b.timeline is not None:  # `lent` stays the parent's: it is copied into the judge's kept block
            times, resp, snaps = timeline_clocked(b, lent, layout, sample)
            per_call = timeline_figure(times, overhead, reps, layout.nbytes)
            events = _events(resp.event_ms, reps)
            done = Batch(reps, times["total_ms"], per_call, events, seeds, snaps, times | {"nbytes": layout.nbytes})
            checked = b.timeline.kept
        else:
            wall, resp, snaps, phases = clocked(b, lent, layout, sample)
            per_call = max((wall - overhead.fixed) / reps, 1e-4)
            done = Batch(reps, wall, per_call, _events(resp.event_ms, reps), seeds, snaps, phases)
            checked = lent
        done.parent_phases["inputs_ms"] = inputs_ms
        if after is not None and resp.ok and checked is not None:
            after(checked, done)
    finally:
        if own and b.timeline is None:
            lent.close()
    return done, resp


def _events(reported: Any, reps: int) -> float | None:
    """The judge's events per call, where its answer holds one sane number for the batch."""
    ms = sane_ms(reported)
    return None if ms is None else ms / reps


def figure(batch: Batch, overhead: Overhead) -> tuple[float, float]:
    """The figure for one batch, and how far the events read below the parent's beyond the bound
    (0 when they agree). The slower of the two counts: the parent's, unless the events read slower
    (an overhead calibrated too high). Never the events below it: they come from the candidate's
    process, and one that wrote them 4.5% low, inside the bound, read 1% faster as 6% (reward 2)."""
    p, e = batch.per_call_ms, batch.event_ms
    if e is None:
        return p, 0.0
    bound = EVENT_SLACK * p + (overhead.spread + 0.002) / batch.reps
    return max(e, p), max(0.0, p - e - bound)


# A call in a long batch may read this share of a call alone and no less: its start hides behind the
# call before it (the launch gap), a start alone does not; a batch faster than that ran its calls
# ahead of their turn or side by side (every call's inputs are in the block from `go`). Honest kernels
# on an H200 read 0.88-1.09 (the lowest a 7 us kernel, 0.9 us of start hidden; the rest 0.97 or more)
OVERLAP_RATIO = 0.8
# one call's noise beyond the calibration's spread: on a GPU its timeline has no host step inside; on
# the host a batch carries costs a calibration batch (whose judge touches nothing) does not, a wake-up
# and the faults of mapping what the call reads: 3 ms more for a call alone on a loaded 2-core machine
OVERLAP_SLACK_MS = {"gpu": 0.002, "host": 20.0}


def overlapped(batch_ms: float, single_ms: float, overhead: Overhead, gpu: bool) -> bool:
    """Whether calls in a batch read cheaper than a call alone allows, beyond one call's noise: the
    parent's figures on both sides (`single_ms`: the fastest of its batches of one call)."""
    slack = overhead.spread + OVERLAP_SLACK_MS["gpu" if gpu else "host"]
    return batch_ms < OVERLAP_RATIO * single_ms - slack


def secret_sample(reps: int, rng: Any, copies: int = 2) -> list[int]:
    """The reps whose outputs the parent checks: the last and one other, chosen here and never
    sent, so the judge cannot know which of its outputs count. As many copies per batch as the
    calibration made (`copies`: two wherever its layouts had two reps, so a batch of one call
    copies its output twice; otherwise its figure would lose one copy's time)."""
    if reps == 1:
        return [0] * copies
    return [rng.randrange(reps - 1), reps - 1]
