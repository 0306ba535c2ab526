"""A figure must hold enough work beyond the calibrated overhead to be told apart from its error
(clocked.RESOLVE). Red team, on a loaded 2-core machine: spare judges starting while the clock was
calibrated made the overhead read above a whole measured batch, the per-call figure fell to its
floor of 1e-4 ms, and an honest candidate slower than eager read 29,273x faster (reward 2).
Here the calibration is made to read 5 ms high (100 calls of this task), as a busy machine can make it."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

import cuda_agent.eval.evaluator as evaluator_module
from cuda_agent.eval.clocked import RESOLVE
from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.task import load_task

HERE = Path(__file__).parent / "cpu_task"
INFLATED_MS = 5.0


def _evaluator(tmp_path, **timing):
    cfg = EvalConfig(
        device="cpu",
        n_sets=2,
        baselines=["eager"],
        timeout_s=60,
        timing=TimingConfig(warmup_ms=5, min_batches=2, max_batches=3, budget_ms=50, **timing),
        cache_dir=tmp_path / "cache",
    )
    return Evaluator(load_task(str(HERE / "model.py")), cfg)


@pytest.fixture
def inflated(monkeypatch):
    """The candidate's calibration reads INFLATED_MS high; what it returned is kept for the test."""
    real, seen = evaluator_module.calibrate_clock, []

    def calibrate(*args, **kwargs):
        got = real(*args, **kwargs)
        seen.append(got if got is None else replace(got, fixed=got.fixed + INFLATED_MS))
        return seen[-1]

    monkeypatch.setattr(evaluator_module, "calibrate_clock", calibrate)
    return seen


def test_an_overhead_calibrated_high_makes_r_grow_until_the_work_clears_it(tmp_path, inflated):
    with _evaluator(tmp_path) as ev:
        v = ev.evaluate(HERE / "honest")
    assert v.status == "correct", (v.error, v.findings)
    t = v.timing
    assert t is not None and inflated and inflated[0] is not None
    floor = inflated[0].floor_ms()
    assert floor >= RESOLVE * INFLATED_MS
    # every measured batch's figure is clear of the floor: at most 1/RESOLVE too fast, never 1e-4 ms
    assert t.median_ms * t.batch_reps >= floor, (t.median_ms, t.batch_reps, floor)
    assert t.median_ms > 1e-3 and t.batch_reps > 1


def test_where_r_cannot_grow_enough_no_speed_is_claimed(tmp_path, inflated):
    with _evaluator(tmp_path, max_batch_reps=2) as ev:
        v = ev.evaluate(HERE / "honest")
    assert v.status == "correct" and v.correct, (v.error, v.findings)
    assert v.timing is None and v.reward == 1 and v.speedup_vs_eager is None
    assert any("no speed is claimed" in n for n in v.notes), v.notes
