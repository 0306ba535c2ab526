"""On the GPU: the parent's clock against what a candidate does inside the judge's process, with
the static guards and the library audit off (as if a route past them were found). Work on a
stream of the candidate's own (the events on the given stream miss it) and forged event answers
are caught as `timing_mismatch`, and the figure is the parent's; the examples' honest kernels
agree with their events."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.eval import checks
from cuda_agent.eval import evaluator as evaluator_mod
from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.task import load_task

pytestmark = pytest.mark.gpu
ADV = Path(__file__).resolve().parents[1] / "adversarial"


@pytest.fixture(scope="module")
def ev(tmp_path_factory):
    cfg = EvalConfig(
        cache_dir=tmp_path_factory.mktemp("clock"),
        baselines=[],
        timeout_s=60,
        timing=TimingConfig(warmup_ms=20, min_batches=5, max_batches=10),
    )
    with Evaluator(load_task(str(ADV / "task.py")), cfg) as e:
        yield e


@pytest.fixture()
def no_first_layers(monkeypatch):
    monkeypatch.setattr(evaluator_mod, "check_candidate_static", lambda *a, **k: [])
    monkeypatch.setattr(evaluator_mod, "check_build_inputs", lambda *a, **k: [])
    monkeypatch.setattr(checks, "audit_native", lambda *a, **k: [])


def test_work_on_a_side_stream_is_caught_by_the_parents_clock(ev, no_first_layers):
    honest = ev.evaluate(ADV / "honest" / "elementwise")
    v = ev.evaluate(ADV / "side_stream_cu")
    assert honest.correct, honest.findings
    if v.correct:  # the side stream's work landed before the parent copied the outputs: it was inside E0..E1
        assert v.timing.median_ms >= 0.8 * honest.timing.median_ms, (v.timing, honest.timing)
    else:  # its outputs were computed before the parent copied the inputs in (poisoned), or after the copies
        caught = {"timing_mismatch", "timed_output_mismatch"} & {f.guard for f in v.failing_findings}
        assert v.status == "incorrect" or caught, v.findings


def test_forged_event_answers_are_flagged_and_never_counted_on_the_gpu_timeline(ev, monkeypatch):
    """The parent's own events time the batch. The judge's events (reported with Settle) are a
    tripwire: honest ones agree with the parent and may stand as the finer estimate; events that
    read far lower are `timing_mismatch`, and the parent's figure counts."""
    from hostile import judge_clock_reads_low

    honest = ev.evaluate(ADV / "honest" / "elementwise")
    assert honest.correct and honest.timing.event_median_ms is not None, honest.findings  # the tripwire is live
    judge_clock_reads_low(monkeypatch)
    v = ev.evaluate(ADV / "honest" / "elementwise")
    assert "timing_mismatch" in {f.guard for f in v.failing_findings}, v.findings
    assert v.timing.median_ms == pytest.approx(v.timing.parent_median_ms)
    assert v.timing.median_ms == pytest.approx(honest.timing.median_ms, rel=0.2)


def test_the_gpu_timeline_figure_is_repeatable_on_an_honest_kernel(ev):
    a, b = (ev.evaluate(ADV / "honest" / "elementwise") for _ in range(2))
    assert a.correct and b.correct, (a.findings, b.findings)
    low, high = sorted((a.timing.median_ms, b.timing.median_ms))
    assert high - low <= 0.05 * low + 0.002, (a.timing, b.timing)
