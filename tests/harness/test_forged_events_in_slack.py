"""The judge's events come from the candidate's process: they may make a figure slower, never faster.
Red team: the events were the figure wherever they sat within 5% (and the calibration's spread) of
the parent's, as wide as the reward's margin. A candidate 1% faster than eager by the parent's clock
whose judge reported events 4.5% low read 5.4% faster: reward 2. The slower of the two counts now."""

from __future__ import annotations

from pathlib import Path

from cpu_candidates import slow_honest  # tests/helpers
from hostile import judge_clock_reads_low

import cuda_agent.eval.evaluator as evaluator_module
from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.eval.verdict import Timing
from cuda_agent.task import load_task

HERE = Path(__file__).parent / "cpu_task"


def test_events_forged_inside_the_slack_do_not_buy_a_reward(tmp_path, monkeypatch):
    overhead: list = []
    real_calibrate = evaluator_module.calibrate_clock

    def calibrate(*args, **kwargs):
        overhead.append(real_calibrate(*args, **kwargs))
        return overhead[-1]

    monkeypatch.setattr(evaluator_module, "calibrate_clock", calibrate)
    # the forger knows the protocol: its events are its work beyond the calibrated overhead, 4.5% low
    judge_clock_reads_low(
        monkeypatch, 1 / 0.955, less_ms=lambda: overhead[-1].fixed if overhead and overhead[-1] else 0.0
    )

    def fill(ctx, draft, *, fresh=False):
        """Eager 1% slower than the candidate by the parent's own clock (and the overhead's error):
        honestly reward 1, not more than 5% faster."""
        p = 1.01 * (draft.timing.parent_median_ms + draft.timing.resolution_ms)
        draft.baseline(
            "eager",
            Timing(median_ms=p, mean_ms=p, min_ms=p, max_ms=p, p20_ms=p, p80_ms=p, reps=1, warmup=0, input_sets=1),
        )
        return 0

    monkeypatch.setattr(evaluator_module, "fill_baselines", fill)
    cfg = EvalConfig(
        device="cpu",
        n_sets=2,
        baselines=["eager"],
        timeout_s=60,
        timing=TimingConfig(warmup_ms=5, batch_ms=100, min_batches=3, max_batches=3, budget_ms=300),
        cache_dir=tmp_path / "cache",
    )
    with Evaluator(load_task(str(HERE / "model.py")), cfg) as ev:
        v = ev.evaluate(slow_honest(tmp_path))
    t = v.timing
    assert v.status == "correct" and t is not None and t.event_median_ms is not None, (v.status, v.error, v.findings)
    assert t.event_median_ms < t.parent_median_ms and not v.findings  # forged low, inside the tripwire's bound
    assert t.median_ms == t.parent_median_ms
    assert v.reward == 1, (v.reward, t.median_ms, t.parent_median_ms, t.event_median_ms, v.eager.median_ms)
