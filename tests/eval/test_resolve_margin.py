"""An overhead calibrated too high makes a figure read fast by its error over R; the resolution floor
(clocked.RESOLVE) bounds that to a ninth, more than the reward's 5% margin. So a candidate's speed-up
is counted from its figure plus that possible error (Timing.counted_ms). Deterministic: the parent's
clock replaced by wall = true overhead + R x the call's true time, the judge a stub. Red team: a
calibration that read 1.05 ms where the protocol costs nothing and a 0.1 ms call read 0.0947 ms,
reward 2 at the same speed as eager; with R capped at 16 by memory, a candidate 4% slower than
eager read 0.09 ms against 0.096."""

from __future__ import annotations

from types import SimpleNamespace

from cuda_agent.eval import clocked as clocked_mod
from cuda_agent.eval import timing_phase
from cuda_agent.eval.batch import input_layout
from cuda_agent.eval.clocked import Batches, Overhead
from cuda_agent.eval.draft import Draft
from cuda_agent.eval.protocol import Batched, Reply
from cuda_agent.eval.reward import milestone_reward
from cuda_agent.eval.timing import TimingConfig

TRUE_MS = 0.1  # the call's real time
TRUE_OVERHEAD_MS = 0.0  # what the protocol really costs per batch
CALIBRATED_MS = 1.0515  # what a busy machine made the calibration read


class _Judge:
    def request(self, req, timeout, lend=None):
        return Reply(ok=True)


def _measure(tmp_path, monkeypatch, calibrated: float, true_ms: float = TRUE_MS, max_reps: int = 4096):
    def fake_clocked(b, block, layout, sample):
        reps = len(layout.reps)
        return TRUE_OVERHEAD_MS + reps * true_ms, Batched(ok=True), {}, {}

    monkeypatch.setattr(clocked_mod, "clocked", fake_clocked)
    b = Batches(
        judge=_Judge(),
        device="cpu",
        prepare=lambda layout, noop: None,
        layout=lambda reps: input_layout([256], reps),
        fill_shared=lambda block, layout: None,
        fill_rep=lambda block, layout, r: 0,
        timeout_s=10,
        max_reps=max_reps,
    )
    ctx = SimpleNamespace(
        cfg=SimpleNamespace(timing=TimingConfig(warmup_ms=0, min_batches=5, max_batches=5)),
        cache_dir=tmp_path,
        cuda=False,
        device="cpu",
    )
    draft = Draft()
    t = timing_phase.measure(ctx, b, Overhead(fixed=calibrated, spread=0.0), draft, check=None)
    return t, draft


def test_an_overhead_calibrated_high_cannot_buy_the_reward_margin(tmp_path, monkeypatch):
    t, draft = _measure(tmp_path, monkeypatch, CALIBRATED_MS)
    assert t is not None, draft._v.notes
    eager, _ = _measure(tmp_path, monkeypatch, TRUE_OVERHEAD_MS)  # eager: same call time, calibrated right
    reward = milestone_reward(True, False, t.counted_ms, eager.median_ms, None)
    # a correct judge: a candidate exactly as fast as eager is not "faster" (reward 1)
    assert reward == 1, (reward, t.batch_reps, t.median_ms, eager.median_ms)


def test_where_memory_caps_r_a_slower_candidate_reads_faster_than_eager(tmp_path, monkeypatch):
    """R capped at 16 by the memory a batch needs: the warm-up cannot reach twice the floor, the
    measured median need only clear 9x the overhead, and a figure reads up to 10% fast. A candidate
    4% slower than eager (0.1 ms against 0.096) reads 0.09 ms: reward 2."""
    t, draft = _measure(tmp_path, monkeypatch, 0.1599, max_reps=16)
    assert t is not None, draft._v.notes
    eager, _ = _measure(tmp_path, monkeypatch, TRUE_OVERHEAD_MS, true_ms=0.096, max_reps=16)
    reward = milestone_reward(True, False, t.counted_ms, eager.median_ms, None)
    assert reward == 1, (reward, t.batch_reps, t.median_ms, eager.median_ms)


def test_only_the_candidates_figure_is_shown_counted(tmp_path, monkeypatch):
    """The verdict shows "counted as" where the speed-up counts it: the candidate's row, never a baseline's,
    whose speed-up counts its median."""
    from rich.console import Console

    from cuda_agent.eval.render import render_verdict
    from cuda_agent.eval.verdict import Verdict

    t, _ = _measure(tmp_path, monkeypatch, CALIBRATED_MS)
    assert t is not None and t.resolution_ms > 0.005 * t.median_ms
    console = Console(record=True, width=300)
    render_verdict(Verdict(status="correct", timing=t, eager=t), console)
    rows = {line.split()[0]: line for line in console.export_text().splitlines() if line.strip()}
    assert "counted as" in rows["candidate"] and "counted as" not in rows["eager"]
