"""The judge's events come from the candidate's process: they may make a figure slower, never faster.
Red team: the events were the figure wherever they sat within 5% (and the calibration's spread) of
the parent's, as wide as the reward's margin. A candidate 1% faster than eager by the parent's clock
whose judge reported events 4.5% low read 5.4% faster: reward 2. The slower of the two counts now."""

from __future__ import annotations

from pathlib import Path

import cuda_agent.eval.evaluator as evaluator_module
from cuda_agent.eval import channel, clocked
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
        got = real_calibrate(*args, **kwargs)
        overhead.append(got)
        return got

    monkeypatch.setattr(evaluator_module, "calibrate_clock", calibrate)
    real_send, real_answer = channel.JailedChild.send, channel.JailedChild.answer
    started: dict[int, float] = {}

    def send(self, req, lend=None):
        if req.op == "batch":
            started[id(self)] = clocked.time.perf_counter()
        return real_send(self, req, lend)

    def answer(self, req, timeout):
        resp = real_answer(self, req, timeout)
        if req.op == "batch" and resp.ok and overhead and overhead[-1] is not None and id(self) in started:
            # the forger's estimate of the parent's figure for the batch (its work beyond the overhead),
            # reported 4.5% low: inside the tripwire's 5%
            took = (clocked.time.perf_counter() - started[id(self)]) * 1e3
            resp.event_ms = 0.955 * max(took - overhead[-1].fixed, 0.0)
        return resp

    monkeypatch.setattr(channel.JailedChild, "send", send)
    monkeypatch.setattr(channel.JailedChild, "answer", answer)

    # eager 1% slower than the candidate by the parent's own clock: honestly reward 1 (not >5% faster)
    def fill(ctx, draft, *, fresh=False):
        p = 1.01 * draft.timing.parent_median_ms
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
    from cpu_candidates import slow_honest

    with Evaluator(load_task(str(HERE / "model.py")), cfg) as ev:
        v = ev.evaluate(slow_honest(tmp_path))
    t = v.timing
    assert v.status == "correct" and t is not None, (v.status, v.error, v.findings)
    # a correct judge: 1% real speed-up is reward 1, whatever the judge says of its own events
    assert v.reward == 1, (v.reward, t.median_ms, t.parent_median_ms, t.event_median_ms, v.eager.median_ms)
