"""The review's Python attacks on the judge, with the static guard switched off: the process split
alone must hold. A candidate's Python runs only in the recorder, which holds no judge code or
state, so patching what it can reach changes nothing the verdict rests on; signals from the jail
reach no process of ours."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from cuda_agent.eval import evaluator as evaluator_mod
from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.jail import jail_problem
from cuda_agent.task import load_task

HERE = Path(__file__).parent / "cpu_task"
pytestmark = pytest.mark.skipif(jail_problem() is not None, reason=str(jail_problem()))

from hostile import KILLS, PATCHES, hostile_copy, judge_clock_reads_low  # noqa: E402  (tests/helpers)


@pytest.fixture()
def no_static_guard(monkeypatch):
    """As if the first layer had a hole: every static finding dropped."""
    monkeypatch.setattr(evaluator_mod, "check_candidate_static", lambda *a, **k: [])


def _config(tmp_path: Path) -> EvalConfig:
    return EvalConfig(
        device="cpu",
        n_sets=2,
        baselines=["eager"],
        timeout_s=60,
        timing=TimingConfig(warmup_ms=5, min_batches=2, max_batches=3, budget_ms=30),
        cache_dir=tmp_path / "cache",
    )


def _candidate(tmp_path: Path, forward: str | None, prelude: str) -> Path:
    return hostile_copy(HERE / "honest", tmp_path / "cand", prelude, forward)


def test_patching_the_harness_from_model_new_changes_nothing(tmp_path, no_static_guard):
    """No kernel at all (torch.add) plus every patch: still rejected for the torch compute."""
    cand = _candidate(tmp_path, "        return torch.add(self.alpha * x, y)", PATCHES)
    with Evaluator(load_task(str(HERE / "model.py")), _config(tmp_path)) as ev:
        v = ev.evaluate(cand)
    assert v.status == "guard_violation" and v.reward == -1 and not v.correct
    guards = {f.guard for f in v.failing_findings}
    assert "aten_in_forward" in guards and "no_kernel" in guards, guards


def test_patched_clocks_in_the_recorder_do_not_move_the_timing(tmp_path, no_static_guard):
    """An honest kernel whose Python patches every clock it can reach: timed as usual, by the
    parent's clock (the patches live in the recorder only). As usual: at least min_batches measured
    batches, every call of them counted (R, the calls per batch, depends on the machine's load)."""
    cand = _candidate(tmp_path, None, PATCHES)
    cfg = _config(tmp_path)
    with Evaluator(load_task(str(HERE / "model.py")), cfg) as ev:
        v = ev.evaluate(cand)
    assert v.status == "correct", (v.error, v.findings)
    t = v.timing
    assert t is not None and t.median_ms > 0 and t.batches >= cfg.timing.min_batches, t
    assert t.reps == t.batches * t.batch_reps == t.input_sets, t


def test_signals_from_the_candidate_reach_no_process_of_ours(tmp_path, no_static_guard):
    """`torch.os.kill(torch.os.getppid(), 9)` at import (it killed the agent before) and a kill of
    every process group it can name: the evaluator and this test go on."""
    cand = _candidate(tmp_path, None, KILLS)
    me = os.getpid()
    with Evaluator(load_task(str(HERE / "model.py")), _config(tmp_path)) as ev:
        v = ev.evaluate(cand)
        again = ev.evaluate(HERE / "honest")
    assert os.getpid() == me
    assert v.status in ("correct", "runtime_error"), (v.status, v.error)
    assert again.status == "correct", (again.error, again.findings)


def test_a_judge_whose_clock_reads_low_is_caught_by_the_parents_clock(tmp_path, monkeypatch):
    """As if native code had slowed the judge's clock 1000x, or written the judge's answers itself:
    the events it reports are a thousandth of the truth. The figure is the parent's own clock's,
    and the gap is `timing_mismatch`."""
    from cpu_candidates import slow_honest

    judge_clock_reads_low(monkeypatch)
    cfg = _config(tmp_path).model_copy(update={"timing": TimingConfig(warmup_ms=5, min_batches=2, max_batches=3)})
    with Evaluator(load_task(str(HERE / "model.py")), cfg) as ev:
        cand = slow_honest(tmp_path)  # ~50x the honest kernel; 20x more, so the lie is far above noise
        cu = cand / "kernels" / "scale_add.cu"
        cu.write_text(cu.read_text().replace("r < 50;", "r < 1000;"))
        honest = ev.evaluate(cand)
    assert honest.status == "guard_violation", (honest.status, honest.findings)
    assert "timing_mismatch" in {f.guard for f in honest.failing_findings}
    t = honest.timing
    assert t.median_ms == pytest.approx(t.parent_median_ms) and t.event_median_ms < t.parent_median_ms / 100


def test_the_agent_killed_with_9_leaves_no_evaluation_process_behind(tmp_path):
    """An agent holding a warm Evaluator (spare recorders and judges started) is killed with -9 in
    the middle of an evaluation: no jail, recorder or judge of it lives on, nothing is left in
    /dev/shm by it."""
    from cpu_candidates import slow_honest
    from procs import kill_agent_mid_evaluation

    config = f"device='cpu', n_sets=50, baselines=[], timeout_s=60, cache_dir=Path({str(tmp_path / 'cache')!r})"
    alive, shm_left = kill_agent_mid_evaluation(HERE / "model.py", slow_honest(tmp_path), config, tmp_path / "started")
    assert not alive, f"left behind after kill -9 of the agent: {alive}"
    assert not shm_left, shm_left


THREADING_KERNEL = r"""
#include <cuda_runtime.h>
#include <stdint.h>
#include <pthread.h>
#include <unistd.h>

static void* idle(void*) { sleep(60); return 0; }

// does the work, and leaves a native thread behind (work off the books would run there)
extern "C" void scale_add(const float* x, const float* y, float* out, float alpha, int64_t n,
                          cudaStream_t stream) {
    pthread_t t;
    if (pthread_create(&t, 0, idle, 0) == 0) pthread_detach(t);
    for (int64_t i = 0; i < n; ++i) out[i] = alpha * x[i] + y[i];
}
"""


def test_native_threads_are_counted_from_outside(tmp_path, no_static_guard, monkeypatch):
    """With the source guard and the library audit both switched off (pthread_create is on neither's
    list), a launcher that starts a native thread: the parent counts the judge's threads in /proc
    and calls it side work. Python's thread count would never see it."""
    from cuda_agent.eval import checks

    monkeypatch.setattr(checks, "audit_native", lambda *a, **k: [])
    cand = _candidate(tmp_path, None, "")
    (cand / "kernels" / "scale_add.cu").write_text(THREADING_KERNEL)
    with Evaluator(load_task(str(HERE / "model.py")), _config(tmp_path)) as ev:
        v = ev.evaluate(cand)
    assert v.status == "guard_violation", (v.status, v.error, v.findings)
    assert any(f.guard == "side_stream" and "thread" in f.message for f in v.failing_findings), v.findings


def test_scratch_of_a_killed_evaluator_is_swept_by_the_next(tmp_path):
    """Folders named after a process that is gone are removed; ours and live ones' stay."""
    import subprocess
    import sys

    from cuda_agent.eval.scratch import sweep_stale

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    gone = tmp_path / f"cuda-agent-judge-{dead.pid}-abc"
    mine = tmp_path / f"cuda-agent-recorder-{os.getpid()}-def"
    other = tmp_path / "cuda-agent-judgement-1-x"  # not ours by name
    for d in (gone, mine, other):
        (d / "sub").mkdir(parents=True)
    assert sweep_stale(tmp_path) == 1
    assert not gone.exists() and mine.exists() and other.exists()


@pytest.mark.parametrize("name", ["lazy_after_checks", "pointer_cache", "value_cache"])
def test_state_across_calls_gains_nothing_unseen_with_every_static_rule_off(
    tmp_path, no_static_guard, monkeypatch, name
):
    """With the source guards and the library audit off (as if a new route past them were found), a
    launcher that keeps state across calls: a call counter that stops working after the checked
    sets, a result cache keyed by the input's address, one keyed by sampled input values. Every
    call has inputs no earlier call saw and sampled outputs are checked: a cache that serves a call
    is a wrong output (`incorrect`, `timed_output_mismatch`), and one that never serves is no faster."""
    from cuda_agent.eval import checks

    monkeypatch.setattr(checks, "audit_native", lambda *a, **k: [])
    # one call a batch, each checked; value_cache is judged on its time instead, so R is free there: a
    # batch of one honest call holds too little work to tell from the overhead (clocked.RESOLVE)
    one = {} if name == "value_cache" else {"max_batch_reps": 1}
    cfg = _config(tmp_path).model_copy(
        update={"timing": TimingConfig(warmup_ms=5, min_batches=12, max_batches=12, **one)}
    )
    with Evaluator(load_task(str(HERE / "model.py")), cfg) as ev:
        honest = ev.evaluate(HERE / "honest")
        v = ev.evaluate(HERE / name)
    assert honest.correct, honest.findings
    caught = v.reward == -1 and (
        "timed_output_mismatch" in {f.guard for f in v.failing_findings} or v.status == "incorrect"
    )  # a served call on a checked set
    if name == "value_cache":  # every call a miss, ~1000 passes where honest makes one: no copy was ever timed
        # (the fastest batch of each: on a loaded 2-core machine a median can be anyone's)
        assert v.correct and v.timing.min_ms > 8 * honest.timing.min_ms, (v.findings, v.timing, honest.timing)
    else:
        assert caught, (v.status, v.findings, v.timing)


@pytest.mark.parametrize("name", ["pointer_cache", "value_cache"])
def test_a_result_cache_in_a_static_is_still_flagged_by_the_audit(tmp_path, name):
    """The rule that stays -1: writable static state in the library (docs/guards.md)."""
    with Evaluator(load_task(str(HERE / "model.py")), _config(tmp_path)) as ev:
        v = ev.evaluate(HERE / name)
    assert v.reward == -1 and "static_state" in {f.guard for f in v.failing_findings}, v.findings


def test_timing_replays_the_checked_plan_and_never_asks_the_recorder_again(tmp_path, monkeypatch, no_static_guard):
    """The review's counter in model_new.py: the real plan for the first recordings, a forward that
    launches nothing and returns nothing after. The recorder is asked once per correctness set and
    never by the timing, which replays the plan whose outputs were checked: the switch never
    reaches a timed call, and the checked work is what is timed."""
    from cuda_agent.eval.channel import JailedChild

    records: list[str] = []
    request = JailedChild.request

    def spy(self, req, timeout, lend=None):
        if req.op == "record":
            records.append(self.name)
        return request(self, req, timeout, lend)

    monkeypatch.setattr(JailedChild, "request", spy)
    counter = (
        "        if next(_calls) >= 2:\n            return ()\n"
        "        out = torch.empty_like(x)\n        kernels.scale_add(x, y, out, self.alpha, x.numel())\n"
        "        return out"
    )
    cand = _candidate(tmp_path, counter, "_calls = iter(range(1 << 30))\n")
    cfg = _config(tmp_path)
    with Evaluator(load_task(str(HERE / "model.py")), cfg) as ev:
        v = ev.evaluate(cand)
    assert records == ["recorder"] * cfg.n_sets, records
    assert v.correct and v.timing is not None and v.timing.reps >= v.timing.batches, (v.findings, v.timing)


def test_calls_cheaper_in_a_batch_than_alone_are_flagged(tmp_path, no_static_guard, monkeypatch):
    """Every call's inputs are in the block once a batch starts, so native code could compute the
    batch's calls ahead of their turn or side by side: then a call in a long batch costs far less
    than a call alone. The kernel at the end of this file shows that signature (the first call of a batch pays for
    all of it); the parent's batches of one call catch it (`calls_overlap`), the honest kernel passes."""
    from cuda_agent.eval import checks

    monkeypatch.setattr(checks, "audit_native", lambda *a, **k: [])  # its timestamp is a static
    cfg = _config(tmp_path).model_copy(
        update={"timing": TimingConfig(warmup_ms=5, batch_ms=200, min_batches=2, max_batches=3, budget_ms=400)}
    )
    cand = _candidate(tmp_path, None, "")
    (cand / "kernels" / "scale_add.cu").write_text(AHEAD_CU)
    with Evaluator(load_task(str(HERE / "model.py")), cfg) as ev:
        honest = ev.evaluate(HERE / "honest")
        v = ev.evaluate(cand)
    assert honest.correct and honest.timing.single_call_ms is not None, (honest.findings, honest.timing)
    assert "calls_overlap" not in {f.guard for f in honest.findings}
    assert v.reward == -1 and "calls_overlap" in {f.guard for f in v.failing_findings}, (v.status, v.findings)


AHEAD_CU = r"""#include <cuda_runtime.h>
#include <stdint.h>
#include <time.h>

// The signature of a batch computed ahead of its turn or side by side, on the host: the first call
// of a batch (the first after a pause) pays for the whole batch, the calls after it are cheap. Alone,
// every call pays; in a long batch the cost spreads over all of them.
static double last_call = 0;

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

extern "C" void scale_add(const float* x, const float* y, float* out, float alpha, int64_t n,
                          cudaStream_t stream) {
    double start = now_ms();
    if (start - last_call > 5.0) {
        while (now_ms() - start < 80.0) {
        }
    }
    for (int64_t i = 0; i < n; ++i) out[i] = alpha * x[i] + y[i];
    last_call = now_ms();
}
"""
