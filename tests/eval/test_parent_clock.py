"""The parent's clock (eval/clocked.py, batch.py, handover.py) on CPU blocks: what a judge answers
is never the measurement, what it writes after answering is not what is checked, and a batch's
layout keeps every rep's memory apart."""

from __future__ import annotations

import fcntl
import math
import os
import threading
import time

import pytest
import torch

from cuda_agent.eval import batch as lay
from cuda_agent.eval.clocked import (
    NOISE_FLOOR_MS,
    RESOLVE,
    Batch,
    Batches,
    Overhead,
    _events,
    calibrate,
    clocked,
    figure,
    secret_sample,
)
from cuda_agent.eval.handover import ALIGN, Block
from cuda_agent.eval.plan import Plan
from cuda_agent.eval.protocol import Batched, Prepare, Reply

PLAN = Plan(
    storages=[
        {"kind": "input", "index": 0, "nbytes": 64},
        {"kind": "param", "name": "w", "nbytes": 64},
        {"kind": "alloc", "nbytes": 64, "dtype": "float32"},
    ],
    steps=[],
    outputs=[{"storage": 2, "offset": 0, "shape": [16], "stride": [1], "dtype": "float32"}],
)


def test_a_layout_shares_the_parameters_and_keeps_every_rep_apart():
    layout = lay.plan_layout(PLAN, 3)
    assert {row[1] for row in layout.reps} == {layout.reps[0][1]}  # one copy of the parameters
    regions = sorted({(row[i], row[i] + 64) for row in layout.reps for i in range(3)})
    assert all(a % ALIGN == 0 for a, _ in regions)
    assert all(end <= start for (_, end), (start, _) in zip(regions, regions[1:]))  # no overlap
    assert regions[-1][1] <= layout.nbytes


def test_the_parent_fills_poisons_and_reads_back_its_own_block():
    layout = lay.plan_layout(PLAN, 2)
    x, w = torch.arange(16.0), torch.ones(16)
    with Block(layout.nbytes, "cpu") as block:
        lay.fill_params(block, PLAN, layout, {"w": w})
        for r in range(2):
            lay.fill_plan_rep(block, PLAN, layout, r, [x + r], {"w": w})
        (out,) = lay.output_views(block, PLAN, layout, 1)
        assert out.isnan().all()  # poisoned: an unwritten output fails
        assert lay.changed_inputs(block, PLAN, layout, 1, [x + 1]) == []
        assert lay.changed_inputs(block, PLAN, layout, 1, [x]) == [0]
        assert lay.changed_state(block, PLAN, layout, {"w": w}) == []
        block.region(layout.reps[0][1], 4).fill_(0)
        assert lay.changed_state(block, PLAN, layout, {"w": w}) == ["w"]


def test_a_lent_block_is_the_same_memory_in_the_other_process():
    with Block(4096, "cpu") as block:
        lent = Block(4096, "cpu", fd=os.dup(block.fd))
        lent.tensor[:4].fill_(7)
        assert block.tensor[:4].tolist() == [7, 7, 7, 7]
        lent.close()


def test_the_other_side_cannot_resize_or_seal_a_lent_block():
    # a judge that shrank it would turn the parent's read-back into a SIGBUS
    with Block(4096, "cpu") as block:
        fd = os.dup(block.fd)  # what the judge receives
        try:
            for size in (0, 8192):
                with pytest.raises(PermissionError):
                    os.ftruncate(fd, size)
            with pytest.raises(PermissionError):  # nor seal it against the parent's writes
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE)
            os.pwrite(fd, b"\x07" * 4, 0)  # its outputs it can still write
        finally:
            os.close(fd)
        assert block.tensor[:4].tolist() == [7, 7, 7, 7]


class _EarlyJudge:
    """A judge that answers at once and writes its outputs afterwards (as if the candidate's code
    had written the answer line itself)."""

    def __init__(self, block: Block, layout: lay.Layout):
        self.block, self.layout, self.late = block, layout, None

    def send(self, req, lend=None):
        pass

    def answer(self, req, timeout):
        def write_late():
            time.sleep(0.2)
            for v in lay.output_views(self.block, PLAN, self.layout, 0):
                v.fill_(1.0)

        self.late = threading.Thread(target=write_late)
        self.late.start()
        return Batched.model_validate({"ok": True, "event_ms": [0.0]})  # a list: no estimate


def test_outputs_written_after_the_answer_are_not_what_is_checked():
    layout = lay.plan_layout(PLAN, 1)
    with Block(layout.nbytes, "cpu") as block:
        lay.fill_plan_rep(block, PLAN, layout, 0, [torch.zeros(16)], {})
        judge = _EarlyJudge(block, layout)
        b = Batches(
            judge=judge,
            device="cpu",
            prepare=None,
            layout=None,
            fill_shared=None,
            fill_rep=None,
            timeout_s=5,
            snapshot=lambda blk, lo, reps: {r: lay.snapshot(blk, PLAN, lo, r) for r in reps},
        )
        _, resp, snaps, _ = clocked(b, block, layout, [0])
        judge.late.join()
        assert lay.output_views(block, PLAN, layout, 0)[0].eq(1.0).all()  # written, but too late:
        assert snaps[0][0].isnan().all()  # the copy the checks read is the poison


def test_the_judges_events_can_make_a_figure_slower_never_faster():
    overhead = Overhead(fixed=0.05, spread=0.01)
    agree = Batch(reps=100, wall_ms=100.05, per_call_ms=1.0, event_ms=0.99)
    assert figure(agree, overhead) == (1.0, 0.0)  # within the bound: no finding, and the parent's figure
    inside = Batch(reps=100, wall_ms=100.05, per_call_ms=1.0, event_ms=0.955)
    assert figure(inside, overhead) == (1.0, 0.0)  # 4.5% low, inside the bound: bought nothing
    forged = Batch(reps=100, wall_ms=100.05, per_call_ms=1.0, event_ms=0.01)
    value, gap = figure(forged, overhead)
    assert value == 1.0 and gap > 0.9  # the parent's figure, and the gap is a finding's
    slower = Batch(reps=100, wall_ms=100.05, per_call_ms=1.0, event_ms=1.5)
    assert figure(slower, overhead) == (1.5, 0.0)  # the slower counts
    cpu = Batch(reps=100, wall_ms=100.05, per_call_ms=1.0, event_ms=None)
    assert figure(cpu, overhead) == (1.0, 0.0)


@pytest.mark.parametrize("reported", [None, "fast", [0.1], True, math.nan, math.inf, -1.0, {"a": 1}])
def test_a_malformed_event_answer_is_no_estimate(reported):
    assert _events(reported, 2) is None
    assert _events(3.0, 2) == 1.5
    # the batch reply as the parent parses it: the same, and the answer is still read
    assert Batched.model_validate({"ok": True, "event_ms": reported}).event_ms is None
    assert Batched.model_validate({"ok": True, "event_ms": 3.0}).event_ms == 3.0


def test_the_sample_always_holds_the_last_rep_and_varies():
    import random

    rng = random.Random(1)
    samples = [secret_sample(50, rng) for _ in range(40)]
    assert all(49 in s for s in samples)
    assert len({tuple(s) for s in samples}) > 10
    # a batch of one call copies its output as often as the calibration copied (two, unless a block holds
    # one rep only): the calibrated tail it is charged holds that many copies
    assert secret_sample(1, rng) == [0, 0] and secret_sample(1, rng, copies=1) == [0]


class _CountingJudge:
    def __init__(self, cost_ms: float):
        self.cost_ms, self.prepared = cost_ms, []

    def request(self, req, timeout, lend=None):
        self.prepared.append(req)
        return Reply(ok=True)

    def send(self, req, lend=None):
        pass

    def answer(self, req, timeout):
        time.sleep(self.cost_ms / 1e3)
        return Batched(ok=True)


def test_calibration_runs_a_noop_of_the_same_layout():
    judge = _CountingJudge(2.0)
    b = Batches(
        judge=judge,
        device="cpu",
        timeout_s=5,
        prepare=lambda layout, noop: Prepare(plan=PLAN.model_dump(), layout=layout.request(), noop=noop),
        layout=lambda reps: lay.plan_layout(PLAN, reps),
        fill_shared=lambda block, layout: None,
        fill_rep=lambda block, layout, r: 0,
        max_reps=4,
    )
    overhead = calibrate(b)
    assert all(m.noop for m in judge.prepared) and [len(m.layout.reps) for m in judge.prepared] == [4]
    assert 1.5 < overhead.fixed < 20.0 and overhead.spread >= 0


def test_the_gpu_timeline_figure_takes_the_copy_in_out_and_bounds_work_hidden_in_it():
    """Per call: after the copy in, less the calibrated tail; a judge that computes while the parent
    copies (its after-copy interval short, the copy slow) is charged the whole interval less the
    calibrated copy, so it gains at most the copy's margin."""
    from cuda_agent.eval.clocked import FILL_MARGIN, Overhead, timeline_figure

    gib = 2**30
    o = Overhead(fixed=0.02, spread=0.0, fill_ms=0.01, fill_ms_per_gib=0.3)
    assert o.fill(gib) == pytest.approx(0.31)
    honest = {"fill_ms": 0.31, "after_fill_ms": 2.02, "total_ms": 2.33}
    assert timeline_figure(honest, o, 4, gib) == pytest.approx(0.5)
    hidden = {"fill_ms": 1.31, "after_fill_ms": 1.02, "total_ms": 2.33}  # 1 ms of the work done during the copy
    charged = timeline_figure(hidden, o, 4, gib)
    assert charged == pytest.approx((2.33 - 0.31 * (1 + FILL_MARGIN) - 0.02) / 4)
    assert charged >= 0.5 - 0.31 * FILL_MARGIN / 4
    assert timeline_figure({"fill_ms": 0.0, "after_fill_ms": 0.0, "total_ms": 0.0}, o, 4, gib) > 0


def test_a_gpu_tails_error_is_its_noise_the_hosts_its_whole_overhead():
    """A GPU tail is the smallest of 18 GPU-timed tails, repeatable within a microsecond: nine times
    the whole tail (0.64 ms: a switch and two large output copies) left honest candidates of three of
    the five examples untimed, R being capped by the memory a batch needs."""
    gpu = Overhead(fixed=0.644, spread=0.3, noise=0.0007)
    assert gpu.error_ms() == pytest.approx(NOISE_FLOOR_MS)  # no less than one call's noise
    assert gpu.floor_ms() == pytest.approx(RESOLVE * NOISE_FLOOR_MS)
    assert Overhead(fixed=0.644, spread=0.3, noise=0.01).floor_ms() == pytest.approx(RESOLVE * 0.01)
    host = Overhead(fixed=0.644, spread=0.3)  # a median of wall times, all raised on a busy machine
    assert host.error_ms() == 0.644 and host.floor_ms() == pytest.approx(RESOLVE * 0.644)
