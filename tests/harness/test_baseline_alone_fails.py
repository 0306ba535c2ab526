"""A baseline timed beside the candidate is only an upper bound (its process could slow it); with
baseline_rounds each is timed again alone after the candidate's processes are gone. Red team: where
the run alone gave no figure (unresolved, a crash or a timeout of the baseline's judge), the figure
from beside it counted, silently. Eager's figures beside the candidate are made three times slower
here (what a hog left running between calls did) and the run alone fails: the honest candidate, no
faster than eager, read 3x faster, reward 2. That figure no longer counts, and a note says why."""

from __future__ import annotations

from pathlib import Path

from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.task import load_task

TASK = Path(__file__).parent / "cpu_task"


def test_a_baseline_slowed_beside_is_not_trusted_when_alone_gives_no_figure(tmp_path, monkeypatch):
    import cuda_agent.eval.timing_phase as phase

    beside = {"now": False}
    real_interleave, real_time = phase.interleave, phase._time_reference

    def interleave(*args, **kwargs):
        beside["now"] = True
        try:
            return real_interleave(*args, **kwargs)
        finally:
            beside["now"] = False

    def timed(*args, **kwargs):
        if not beside["now"]:
            return None  # alone: no figure (unresolved, a crash or a timeout of the baseline's judge)
        t = real_time(*args, **kwargs)
        return t.model_copy(update={"median_ms": 3 * t.median_ms}) if t is not None else t

    monkeypatch.setattr(phase, "interleave", interleave)
    monkeypatch.setattr(phase, "_time_reference", timed)
    cfg = EvalConfig(
        device="cpu",
        n_sets=2,
        baselines=["eager"],
        timeout_s=60,
        baseline_timeout_s=120,
        baseline_rounds=2,
        cache_dir=tmp_path / "cache",
        timing=TimingConfig(warmup_ms=5, min_batches=2, max_batches=3, budget_ms=30),
    )
    with Evaluator(load_task(str(TASK / "model.py")), cfg, ahead="none") as ev:
        v = ev.evaluate(TASK / "honest")
    assert v.status == "correct", (v.error, v.findings)
    # a correct judge: a figure from beside the candidate, unconfirmed alone, earns no reward
    assert v.reward <= 1 and v.speedup_vs_eager is None, (v.reward, v.speedup_vs_eager, v.notes)
    assert any("was not timed alone" in n for n in v.notes), v.notes
