"""On the GPU: the review's Python attacks on the judge, with the static guard switched off, against
a real CUDA kernel (tests/adversarial's task): the process split alone holds, and the agent's
process survives a kill from the candidate."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hostile import KILLS, PATCHES, hostile_copy

from cuda_agent.eval import evaluator as evaluator_mod
from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.task import load_task

pytestmark = pytest.mark.gpu
ADV = Path(__file__).resolve().parents[1] / "adversarial"
HONEST = ADV / "honest" / "elementwise"


@pytest.fixture(scope="module")
def ev(tmp_path_factory):
    cfg = EvalConfig(cache_dir=tmp_path_factory.mktemp("patch"), baselines=["eager"], timeout_s=60,
                     timing=TimingConfig(warmup_ms=10, min_reps=20, max_reps=100, budget_ms=300))
    with Evaluator(load_task(str(ADV / "task.py")), cfg) as e:
        yield e


@pytest.fixture()
def no_static_guard(monkeypatch):
    monkeypatch.setattr(evaluator_mod, "check_candidate_static", lambda *a, **k: [])


def test_torch_add_with_patched_harness_is_rejected(ev, tmp_path, no_static_guard):
    cand = hostile_copy(HONEST, tmp_path / "c", PATCHES, "        return torch.relu(x) * 2 + 1")
    v = ev.evaluate(cand)
    assert v.status == "guard_violation" and v.reward == -1
    assert {"aten_in_forward", "no_kernel"} <= {f.guard for f in v.failing_findings}


def test_patched_clocks_do_not_move_the_timing(ev, tmp_path, no_static_guard):
    honest = ev.evaluate(HONEST)
    v = ev.evaluate(hostile_copy(HONEST, tmp_path / "c", PATCHES))
    assert honest.status == v.status == "correct", (v.error, v.findings)
    assert 0.5 < v.timing.median_ms / honest.timing.median_ms < 2.0  # the same kernel, timed the same


def test_kill_from_the_candidate_reaches_no_process_of_ours(ev, tmp_path, no_static_guard):
    me = os.getpid()
    v = ev.evaluate(hostile_copy(HONEST, tmp_path / "c", KILLS))
    assert os.getpid() == me and v.status in ("correct", "runtime_error")
    assert ev.evaluate(HONEST).status == "correct"
