"""Baselines timed beside the candidate (issue 15, item 6): during a run eager and torch.compile
come from the cache, timed once; an evaluation with `baseline_rounds` (the final re-verification)
times them again in interleaved rounds of candidate, eager, compile, in a judge that never loads
the candidate's library, and neither reads nor writes the cache. On CPU (host-only kernels)."""

from __future__ import annotations

import json
from pathlib import Path

from cuda_agent.eval.channel import JailedChild
from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.render import verdict_text
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.eval.timing_phase import _middle
from cuda_agent.eval.verdict import Timing
from cuda_agent.task import load_task

TASK = Path(__file__).parent / "cpu_task"
STALE_MS = 1000.0  # a cached eager figure no CPU run of this task comes near


def config(tmp_path) -> EvalConfig:
    return EvalConfig(
        device="cpu",
        n_sets=2,
        baselines=["eager"],
        timeout_s=60,
        baseline_timeout_s=120,
        cache_dir=tmp_path / "cache",
        timing=TimingConfig(warmup_ms=5, min_batches=2, max_batches=3, budget_ms=30),
    )


def stale_cache(ev: Evaluator) -> str:
    """Time eager once into the cache, then store a stale figure under its key (tagged, so trusted)."""
    ev.time_baselines()
    (key,) = json.loads(ev.baseline_cache.path.read_text())
    entry = ev.baseline_cache.get(key)
    entry["timing"]["median_ms"] = STALE_MS
    ev.baseline_cache.put(key, entry)
    return key


def test_rounds_time_the_baselines_beside_the_candidate_not_from_the_cache(tmp_path, monkeypatch):
    calls: list[tuple[int, str]] = []
    request = JailedChild.request

    def spy(self, req, timeout, lend=None):
        calls.append((id(self), req.op))
        return request(self, req, timeout, lend)

    send = JailedChild.send

    def spy_send(self, req, lend=None):  # the timed batches: sent, then answered
        if req.op == "batch":
            calls.append((id(self), "batch"))
        return send(self, req, lend)

    with Evaluator(load_task(str(TASK / "model.py")), config(tmp_path), ahead="none") as ev:
        key = stale_cache(ev)
        during_run = ev.evaluate(TASK / "honest")
        assert during_run.status == "correct", (during_run.error, during_run.findings)
        assert during_run.baselines == "cached" and during_run.eager.median_ms == STALE_MS  # the cached figure
        text = verdict_text(during_run)
        assert (
            "(cached: timed once for this task and GPU and reused by every benchmark until the final "
            "re-verification" in text
        )

        ev.cfg = ev.cfg.model_copy(update={"baseline_rounds": 3})
        monkeypatch.setattr(JailedChild, "request", spy)
        monkeypatch.setattr(JailedChild, "send", spy_send)
        final = ev.evaluate(TASK / "honest")
        assert final.status == "correct", (final.error, final.findings)
        assert final.baselines == "interleaved" and final.eager.median_ms < STALE_MS / 10
        assert final.speedup_vs_eager == final.eager.median_ms / final.timing.counted_ms
        assert ev.baseline_cache.get(key)["timing"]["median_ms"] == STALE_MS  # nothing written back
        timed = [who for who, op in calls if op == "batch"]
        runs = [who for k, who in enumerate(timed) if k == 0 or timed[k - 1] != who]  # who ran batches, in turn
        candidate, baselines = runs[0], runs[1]
        assert candidate != baselines
        assert runs[:6] == [candidate, baselines] * 3  # interleaved, 3 rounds
        assert len(runs) == 7 and runs[6] not in (candidate, baselines)  # then alone, the candidate gone
        loaded = {who for who, op in calls if op == "load_library"}
        assert loaded == {candidate}  # the baselines' judge never loads the candidate's library
        (note,) = [n for n in final.notes if n.startswith("baselines timed again beside the candidate")]
        assert "3 interleaved rounds of candidate, eager" in note and note.count("/") == 4
        assert "(timed again beside your kernel, in interleaved rounds)" in verdict_text(final)


def slowed_beside(monkeypatch, *, alone: bool = True) -> None:
    """The baseline judge's figures beside the candidate made three times slower, as a hog can make
    them (a red-team library left threads spinning between its own calls: eager read slow, and the
    candidate 1.11-1.27x faster than eager, honestly 0.69-0.92x). `alone=False`: the baselines' run
    alone after the candidate gives no figure (unresolved, a crash or a timeout of its judge)."""
    import cuda_agent.eval.timing_phase as phase

    beside = {"now": False}
    real_interleave, real_time = phase.interleave, phase._time_reference

    def interleave(*args, **kwargs):
        beside["now"] = True
        try:
            return real_interleave(*args, **kwargs)
        finally:
            beside["now"] = False

    def slowed(*args, **kwargs):
        if not (alone or beside["now"]):
            return None, "not timed alone (the test's stub)"
        t, why = real_time(*args, **kwargs)
        return (t.model_copy(update={"median_ms": 3 * t.median_ms}) if t is not None and beside["now"] else t), why

    monkeypatch.setattr(phase, "interleave", interleave)
    monkeypatch.setattr(phase, "_time_reference", slowed)


def test_a_baseline_slowed_beside_the_candidate_counts_as_timed_alone(tmp_path, monkeypatch):
    slowed_beside(monkeypatch)
    cfg = config(tmp_path).model_copy(update={"baseline_rounds": 2})
    with Evaluator(load_task(str(TASK / "model.py")), cfg, ahead="none") as ev:
        v = ev.evaluate(TASK / "honest")
    assert v.status == "correct" and v.baselines == "interleaved", (v.error, v.findings)
    (found,) = [f for f in v.findings if f.guard == "baseline_slowed"]
    assert found.severity == "warn" and f"and {v.eager.median_ms:.4f} ms alone after it" in found.message
    assert v.speedup_vs_eager == v.eager.median_ms / v.timing.counted_ms


def test_a_baseline_slowed_beside_is_not_trusted_when_alone_gives_no_figure(tmp_path, monkeypatch):
    """Red team: where the run alone gave no figure, the one from beside the candidate counted,
    silently: the honest candidate, no faster than eager, read 3x faster (reward 2)."""
    slowed_beside(monkeypatch, alone=False)
    cfg = config(tmp_path).model_copy(update={"baseline_rounds": 2})
    with Evaluator(load_task(str(TASK / "model.py")), cfg, ahead="none") as ev:
        v = ev.evaluate(TASK / "honest")
    assert v.status == "correct", (v.error, v.findings)
    assert v.reward <= 1 and v.eager is None and v.speedup_vs_eager is None, (v.reward, v.notes)
    assert any("was not timed alone" in n for n in v.notes), v.notes


def test_each_figure_is_its_median_round():
    def t(ms: float) -> Timing:
        return Timing(
            median_ms=ms, mean_ms=ms, min_ms=ms, max_ms=ms, p20_ms=ms, p80_ms=ms, reps=1, warmup=0, input_sets=1
        )

    assert _middle([t(3.0), t(1.0), t(2.0)]).median_ms == 2.0
    assert _middle([t(4.0), t(1.0), t(3.0), t(2.0)]).median_ms == 2.0  # an even count: the lower middle
    assert _middle([t(5.0)]).median_ms == 5.0


def test_the_baselines_judge_compiles_once_for_all_rounds(monkeypatch):
    import torch

    from cuda_agent.eval.judge import _Judge
    from cuda_agent.eval.protocol import LayoutSpec, PrepareReference

    compiled: list[object] = []

    def fake_compile(model, mode=None):  # torch.compile's cost is what is counted, not its speed
        compiled.append(mode)
        return model

    monkeypatch.setattr(torch, "compile", fake_compile)
    threads = torch.get_num_threads()
    try:
        judge = _Judge("cpu", f"{TASK / 'model.py'}::Model", None, 0, None, None)  # sets one thread on the CPU
    finally:
        torch.set_num_threads(threads)
    layout = LayoutSpec(nbytes=256, reps=[[0]], sizes=[16])
    described = [{"tensor": {"shape": [4], "stride": [1], "offset": 0, "dtype": "float32", "nbytes": 16}}]
    for _ in range(3):
        req = PrepareReference(inputs=described, layout=layout, compile_mode="default")
        assert judge.prepare_reference(req)["ok"]
    assert compiled == [None]


def test_both_renderings_say_where_the_baselines_come_from():
    from rich.console import Console

    from cuda_agent.eval.render import render_verdict
    from cuda_agent.eval.verdict import Verdict

    t = Timing(
        median_ms=1.0, mean_ms=1.0, min_ms=1.0, max_ms=1.0, p20_ms=1.0, p80_ms=1.0, reps=1, warmup=0, input_sets=1
    )
    for source, says in (
        ("cached", "cached (timed once per task, GPU and torch version)"),
        ("interleaved", "timed again beside the candidate, interleaved rounds"),
        ("fresh", "timed again after the candidate"),
    ):
        v = Verdict(status="correct", timing=t, eager=t, baselines=source)
        console = Console(record=True, width=200)
        render_verdict(v, console)
        assert says in console.export_text()
    assert "cached" not in verdict_text(Verdict(status="correct", timing=t, eager=t))  # unknown: nothing claimed


def test_a_later_round_not_timed_withdraws_the_first_rounds_figure(tmp_path, monkeypatch):
    """The candidate's second round gets no figure (here: its batches under the resolution floor, a
    note): the first round's figure must not count beside a note that says no speed is claimed."""
    import cuda_agent.eval.timing_phase as phase

    real = phase.measure
    rounds = {"n": 0}

    def measure(ctx, b, overhead, draft, check=None):
        if check is not None:  # the candidate's rounds (baselines are measured with no check)
            rounds["n"] += 1
            if rounds["n"] == 2:
                draft.note("not timed: (the second round, made unresolved here)")
                return None
        return real(ctx, b, overhead, draft, check)

    monkeypatch.setattr(phase, "measure", measure)
    cfg = config(tmp_path).model_copy(update={"baseline_rounds": 2})
    with Evaluator(load_task(str(TASK / "model.py")), cfg, ahead="none") as ev:
        v = ev.evaluate(TASK / "honest")
    assert rounds["n"] == 2
    assert v.status == "correct" and v.timing is None and v.reward == 1, (v.status, v.timing, v.notes)
    assert v.speedup_vs_eager is None
