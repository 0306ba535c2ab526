"""The task's own code failing in the parent (get_init_inputs, get_inputs, __init__, forward: an
exception, a call that never returns): `cuda-agent eval` answers with an `unscorable` verdict that
names the call and the task's line, exit code 5, and `--json` prints one JSON object; never a
traceback, never a wait without end."""

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.task_code import TaskCodeError, task_code
from cuda_agent.task import load_task

TASK = Path(__file__).parents[1] / "harness" / "cpu_task"
SRC = (TASK / "model.py").read_text()
GET_INPUTS = "    return [torch.randn(N), torch.randn(N)]"
INIT = "        self.alpha = alpha"
FORWARD = "        return self.alpha * x + y"


def variant(tmp_path: Path, old: str, new: str) -> Path:
    assert old in SRC
    path = tmp_path / "task.py"
    path.write_text(SRC.replace(old, new))
    return path


def line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def eval_json(task: Path, *extra: str, timeout: float = 120) -> tuple[subprocess.CompletedProcess, dict]:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuda_agent.cli",
            "eval",
            str(task),
            "--candidate",
            str(TASK / "honest"),
            "--device",
            "cpu",
            "--no-compile-baseline",
            "--sets",
            "2",
            "--json",
            *extra,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return proc, json.loads(proc.stdout)


@pytest.mark.parametrize(
    "old, new, call, marker",
    [
        (
            GET_INPUTS,
            "    raise ValueError('no inputs today')",
            "get_inputs() raised ValueError: no inputs today",
            "raise ValueError",
        ),
        (
            INIT,
            "        raise RuntimeError('bad alpha')",
            "Model(...) (its __init__) raised RuntimeError: bad alpha",
            "bad alpha",
        ),
        (FORWARD, "        return x.view(3, -1)", "forward raised RuntimeError", "x.view(3, -1)"),
        (
            "def get_init_inputs():\n    return [2.0]",
            "def get_init_inputs():\n    return [1 / 0]",
            "get_init_inputs() raised ZeroDivisionError",
            "1 / 0",
        ),
    ],
)
def test_task_code_that_raises_is_an_unscorable_verdict_naming_the_call_and_line(tmp_path, old, new, call, marker):
    task = variant(tmp_path, old, new)
    proc, out = eval_json(task)
    v = out["verdict"]
    assert proc.returncode == 5 and v["status"] == "unscorable" and v["reward"] == -1, proc.stderr[-2000:]
    assert f"the task's {call}" in v["error"] and f"(task.py line {line_of(task, marker)})" in v["error"]
    assert "Traceback" not in proc.stderr and out["task"]["hash"]


@pytest.mark.parametrize(
    "old, new, call",
    [
        (GET_INPUTS, "    import time\n    time.sleep(3600)", "get_inputs()"),
        (FORWARD, "        import time\n        time.sleep(3600)", "forward"),
    ],
)
def test_task_code_that_never_returns_is_stopped_at_the_time_limit(tmp_path, old, new, call):
    t0 = time.monotonic()
    proc, out = eval_json(variant(tmp_path, old, new), "--timeout", "3")
    assert time.monotonic() - t0 < 60
    assert proc.returncode == 5 and out["verdict"]["status"] == "unscorable"
    assert f"the task's {call} did not return within 3 s" in out["verdict"]["error"]


def test_a_task_that_swallows_exceptions_cannot_swallow_the_time_limit(tmp_path):
    task = variant(
        tmp_path,
        GET_INPUTS,
        "    import time\n    while True:\n        try:\n            time.sleep(3600)\n"
        "        except Exception:\n            pass",
    )
    proc, out = eval_json(task, "--timeout", "3")
    assert proc.returncode == 5 and "did not return within 3 s" in out["verdict"]["error"]


def test_a_reference_that_fails_on_a_later_input_set_stops_every_evaluation(tmp_path):
    """The reference passes the evaluator's start (init, a sample, the determinism check) and
    raises on the correctness phase's sets: that verdict and every later one are unscorable."""
    task = variant(
        tmp_path,
        FORWARD,
        "        if float(x.abs().max()) > 0 and _calls.append(1) is None and len(_calls) > 3:\n"
        "            raise RuntimeError('reference broke')\n        return self.alpha * x + y",
    )
    task.write_text(task.read_text().replace("N = 1 << 15", "N = 1 << 15\n_calls = []"))
    cfg = EvalConfig(device="cpu", n_sets=2, baselines=[], spares=0)
    with Evaluator(load_task(str(task)), cfg, ahead="none") as ev:
        assert ev.unscorable is None
        first = ev.evaluate(TASK / "honest")
        assert first.status == "unscorable" and "the task's forward raised RuntimeError: reference broke" in first.error
        again = ev.evaluate(TASK / "honest")
        assert again.status == "unscorable" and again.error == first.error and again.reward == -1


def test_task_code_restores_a_timer_already_running(tmp_path):
    """pytest-timeout (and any caller) may have SIGALRM armed: the task's limit does not cancel it."""
    import signal

    fired = []
    old = signal.signal(signal.SIGALRM, lambda *a: fired.append(1))
    try:
        signal.setitimer(signal.ITIMER_REAL, 30)
        with pytest.raises(TaskCodeError, match="did not return within 0.2 s"):
            with task_code("get_inputs()", (), 0.2):
                time.sleep(5)
        left = signal.getitimer(signal.ITIMER_REAL)[0]
        assert 25 < left <= 30 and not fired
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def test_a_judge_that_dies_says_how_and_what_it_printed_last(tmp_path):
    """A launcher that prints a line, then writes through a null pointer: the verdict names the
    signal (not "exit code None") and keeps the line (the log is read before the jail is removed)."""
    import shutil

    cand = tmp_path / "crash"
    shutil.copytree(TASK / "honest", cand, ignore=shutil.ignore_patterns("__pycache__"))
    (cand / "kernels" / "scale_add.cu").write_text(
        "#include <cuda_runtime.h>\n#include <stdint.h>\n#include <stdio.h>\n"
        'extern "C" void scale_add(const float* x, const float* y, float* out, float alpha, int64_t n,\n'
        "                          cudaStream_t stream) {\n"
        '    printf("about to write through a null pointer\\n");\n    fflush(stdout);\n'
        "    *(volatile float*)(out - out) = alpha;\n}\n"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuda_agent.cli",
            "eval",
            str(TASK / "model.py"),
            "--candidate",
            str(cand),
            "--device",
            "cpu",
            "--no-compile-baseline",
            "--sets",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    v = json.loads(proc.stdout)["verdict"]
    assert proc.returncode == 4 and v["status"] == "runtime_error", proc.stderr[-2000:]
    assert "the judge died while running an input set (killed by SIGSEGV" in v["error"]
    assert v["error"].rstrip().endswith("about to write through a null pointer")


def test_a_task_that_cannot_fit_the_memory_budget_is_unscorable_before_any_candidate():
    from cuda_agent.eval.checks import memory_problem

    gib = 2**30
    assert memory_problem(10 * gib, 30 * gib) is None  # the float64 reference (twice) and the candidate: 30 GiB fit
    said = memory_problem(13 * gib, 38 * gib)
    assert said.startswith("unscorable: needs about 39.0 GiB") and "budget 38.0 GiB" in said
    assert "--memory-budget" in said


def test_a_timed_batch_is_sized_by_memory():
    """One batch's block (fresh inputs and outputs of every rep, the parameters once) stays within
    the memory budget's share and BLOCK_BYTES; a task too big for two reps still gets one."""
    from types import SimpleNamespace

    from cuda_agent.eval.batch import Layout
    from cuda_agent.eval.context import EvalContext
    from cuda_agent.eval.timing import TimingConfig
    from cuda_agent.eval.timing_phase import BLOCK_BYTES, _max_reps

    gib = 2**30

    def ev(budget, cuda=False):  # an EvalContext's budget and settings, its plan_budget() the real one's
        cfg = SimpleNamespace(memory_fraction=0.5, timing=TimingConfig())
        ctx = SimpleNamespace(budget_bytes=budget, cfg=cfg, cuda=cuda)
        ctx.plan_budget = lambda: EvalContext.plan_budget(ctx)
        return ctx

    def one_rep(nbytes):
        return Layout(reps=[[0]], nbytes=nbytes, sizes=[nbytes])

    assert _max_reps(ev(80 * gib), one_rep(gib // 4), 0) == BLOCK_BYTES // (gib // 4)  # layernorm: 8 reps
    assert _max_reps(ev(2 * gib), one_rep(gib // 4), 0) == 4  # a tight budget: its half
    # on a GPU the parent fills a private twin of the block too: half of that
    assert _max_reps(ev(2 * gib, cuda=True), one_rep(gib // 4), 0) == 2
    assert _max_reps(ev(80 * gib), one_rep(12 * gib), 0) == 1  # 19_ReLU's 12 GiB: one rep, never none
    assert _max_reps(ev(80 * gib), one_rep(1 << 10), 0) == TimingConfig().max_batch_reps  # tiny: the cap
    # parameters are in a block once, not once per rep
    assert _max_reps(ev(80 * gib), one_rep(gib // 4 + gib), gib) == (BLOCK_BYTES - gib) // (gib // 4)


def test_memory_budget_is_a_flag_of_eval_and_batch_and_a_setting(tmp_path, monkeypatch):
    from typer.testing import CliRunner

    from cuda_agent.cli import app
    from cuda_agent.settings import resolve

    for command in ("eval", "batch", "optimize"):
        assert "--memory-budget" in CliRunner().invoke(app, [command, "--help"], terminal_width=200).output
    monkeypatch.setenv("CUDA_AGENT_EVAL__MEMORY_BUDGET_GIB", "80")
    r = resolve({}, project_dir=tmp_path, user=tmp_path / "none.toml")
    assert r.settings.eval.memory_budget_gib == 80 and r.origins["eval.memory_budget_gib"] == "environment"
