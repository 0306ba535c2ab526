"""The review's Python attacks on the judge, with the static guard switched off: the process split
alone must hold. A candidate's Python runs only in the recorder, which holds no judge code or
state, so patching what it can reach changes nothing the verdict rests on; signals from the jail
reach no process of ours."""

from __future__ import annotations

import os
import shutil
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

# What a hostile model_new.py did at import in the review, and more: reach the harness's modules
# through torch's own attributes and replace its recorded forward, its timer and its clocks.
PATCHES = """
import time as _t
_sys = torch.sys
for _name, _mod in list(_sys.modules.items()):
    if _name.startswith("cuda_agent"):
        for _attr in ("time_callable", "RepTimer", "judge_aten", "judge_set", "compare_output", "wall_clock_bound",
                      "milestone_reward", "mutated_inputs", "judge_kernels"):
            if hasattr(_mod, _attr):
                setattr(_mod, _attr, lambda *a, **k: None)
_t.perf_counter = lambda: 0.0
_t.time = lambda: 0.0
torch.cuda.synchronize = lambda *a, **k: None
"""


@pytest.fixture()
def no_static_guard(monkeypatch):
    """As if the first layer had a hole: every static finding dropped."""
    monkeypatch.setattr(evaluator_mod, "check_candidate_static", lambda *a, **k: [])


def _config(tmp_path: Path) -> EvalConfig:
    return EvalConfig(device="cpu", n_sets=2, timing_sets=1, baselines=["eager"], timeout_s=60,
                      timing=TimingConfig(warmup_ms=5, min_reps=10, max_reps=20, budget_ms=30),
                      cache_dir=tmp_path / "cache")


def _candidate(tmp_path: Path, forward: str | None, prelude: str) -> Path:
    cand = tmp_path / "cand"
    shutil.copytree(HERE / "honest", cand, ignore=shutil.ignore_patterns("__pycache__"))
    src = (cand / "model_new.py").read_text()
    src = src.replace("kernels = kernel_runtime.load_kernels()", "kernels = kernel_runtime.load_kernels()\n" + prelude)
    if forward is not None:
        src = src.replace("        out = torch.empty_like(x)\n        kernels.scale_add(x, y, out, self.alpha, x.numel())\n"
                          "        return out", forward)
    (cand / "model_new.py").write_text(src)
    return cand


def test_patching_the_harness_from_model_new_changes_nothing(tmp_path, no_static_guard):
    """No kernel at all (torch.add) plus every patch: still rejected for the torch compute."""
    cand = _candidate(tmp_path, "        return torch.add(self.alpha * x, y)", PATCHES)
    with Evaluator(load_task(str(HERE / "model.py")), _config(tmp_path)) as ev:
        v = ev.evaluate(cand)
    assert v.status == "guard_violation" and v.reward == -1 and not v.correct
    guards = {f.guard for f in v.failing_findings}
    assert "aten_in_forward" in guards and "no_kernel" in guards, guards


def test_patched_clocks_in_the_recorder_do_not_move_the_timing(tmp_path, no_static_guard):
    """An honest kernel whose Python patches every clock it can reach: timed as usual, by the judge."""
    cand = _candidate(tmp_path, None, PATCHES)
    with Evaluator(load_task(str(HERE / "model.py")), _config(tmp_path)) as ev:
        v = ev.evaluate(cand)
    assert v.status == "correct", (v.error, v.findings)
    assert v.timing is not None and v.timing.median_ms > 0 and v.timing.reps >= 10


def test_signals_from_the_candidate_reach_no_process_of_ours(tmp_path, no_static_guard):
    """`torch.os.kill(torch.os.getppid(), 9)` at import (it killed the agent before) and a kill of
    every process group it can name: the evaluator and this test go on."""
    prelude = ("_os = torch.os\nfor _pid in {_os.getppid(), 1, -1}:\n    try:\n        _os.kill(_pid, 9)\n"
               "    except OSError:\n        pass\n")
    cand = _candidate(tmp_path, None, prelude)
    me = os.getpid()
    with Evaluator(load_task(str(HERE / "model.py")), _config(tmp_path)) as ev:
        v = ev.evaluate(cand)
        again = ev.evaluate(HERE / "honest")
    assert os.getpid() == me
    assert v.status in ("correct", "runtime_error"), (v.status, v.error)
    assert again.status == "correct", (again.error, again.findings)
