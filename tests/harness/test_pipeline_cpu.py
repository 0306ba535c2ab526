"""The whole harness on CPU tensors: nvcc build -> worker process -> poisoned outputs compared in the
parent -> guards -> timing -> eager baseline -> reward. Candidates here are host-only launchers
(host loops behind the same extern "C" layout), so every step but the GPU itself runs for real.
"""

from __future__ import annotations

import weakref
from pathlib import Path

import pytest

from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig, next_reps
from cuda_agent.task import load_task

HERE = Path(__file__).parent / "cpu_task"


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    cfg = EvalConfig(
        device="cpu",
        n_sets=3,
        baselines=["eager"],
        timeout_s=60,
        timing=TimingConfig(warmup_ms=5, min_batches=2, max_batches=3, budget_ms=50),
        cache_dir=tmp_path_factory.mktemp("cache"),
    )
    with Evaluator(load_task(str(HERE / "model.py")), cfg) as ev:
        yield ev


def guards(verdict) -> set[str]:
    return {f.guard for f in verdict.failing_findings}


def test_honest_candidate_is_correct_timed_and_rewarded(evaluator):
    v = evaluator.evaluate(HERE / "honest")
    assert v.status == "correct", (v.error, v.findings, v.sets)
    assert v.correct and len(v.sets) == 3 and all(s.ok for s in v.sets)
    assert len({s.seed for s in v.sets}) == 3  # fresh seeds per set
    t = v.timing
    assert t is not None and t.batches >= 2 and t.reps == t.batches * t.batch_reps == t.input_sets and t.median_ms > 0
    assert v.eager is not None and v.speedup_vs_eager is not None
    assert v.reward in (1, 2)  # no compile baseline here: 3 is out of reach
    assert max(o.max_abs_err for s in v.sets for o in s.outputs) < 1e-5
    # what was judged, byte for byte: a version must hold these to be this verdict's (workspace/history.py)
    assert set(v.judged_files) == {"model_new.py", "kernels/scale_add.cu"} and all(
        len(sha) == 64 for sha in v.judged_files.values()
    )
    # where the timing phase's time went: its parts lie within it, the host's work within the batches
    parts = {k: v.seconds[f"timing_{k}"] for k in ("warmup", "measured", "single", "inputs", "checks")}
    assert all(x > 0 for x in parts.values()), parts
    assert parts["warmup"] + parts["measured"] + parts["single"] <= v.seconds["timing"], (parts, v.seconds)
    assert parts["inputs"] + parts["checks"] <= parts["measured"] + parts["single"], parts


def test_the_parent_holds_one_input_sets_references_at_a_time(evaluator, monkeypatch):
    """Each set's fp32 and float64 references are gone before the next set's are made: on the
    H200 a name left bound to the first set's (the zero trap's loop) kept a third of the parent's
    peak alive through every later set."""
    made, alive_at_call = [], []
    real = evaluator.ref.outputs

    def outputs(inputs):
        alive_at_call.append(sum(r() is not None for r in made))
        ref32, ref64 = real(inputs)
        made.extend(weakref.ref(t) for t in [*ref32, *(ref64 or [])])
        return ref32, ref64

    monkeypatch.setattr(evaluator.ref, "outputs", outputs)
    v = evaluator.evaluate(HERE / "honest")
    assert v.status == "correct", (v.error, v.findings)
    # the correctness sets, then the sampled reps after each timed batch
    assert len(alive_at_call) >= 3 + v.timing.batches, (len(alive_at_call), v.timing)
    assert alive_at_call == [0] * len(alive_at_call), alive_at_call


def test_seeds_are_fresh_each_evaluation(evaluator):
    a = evaluator.evaluate(HERE / "honest")
    b = evaluator.evaluate(HERE / "honest")
    assert not {s.seed for s in a.sets} & {s.seed for s in b.sets}


@pytest.mark.parametrize(
    "name, status, guard",
    [
        ("wrong", "incorrect", None),
        ("partial", "incorrect", None),
        ("torch_compute", "guard_violation", "aten_in_forward"),
        ("mutate", "guard_violation", "plan"),  # returns its input: an output must be a new tensor
        ("clobber", "incorrect", "input_mutation"),
        ("subclass", "guard_violation", "tensor_subclass"),
        ("lazy_after_checks", "guard_violation", "static_state"),  # its call counter is static C state
        ("tamper", "guard_violation", "timer_patch"),
        ("crash", "runtime_error", None),
        ("exit_zero", "runtime_error", None),  # the right answer, then exit(0): a judge gone mid-request
    ],
)
def test_bad_candidates_are_rejected_for_the_right_reason(evaluator, name, status, guard):
    v = evaluator.evaluate(HERE / name)
    assert v.status == status, (v.status, v.error, [f.message for f in v.findings])
    assert v.reward == -1 and not v.correct
    if guard:
        assert guard in guards(v), [f.guard for f in v.findings]


def test_timed_outputs_are_judged_against_references_made_after_the_batch(evaluator, monkeypatch):
    """The parent keeps no input set's references through a timed batch: it draws the sampled reps
    again from their seeds afterwards. A timed output that was wrong (here: changed after the
    judge answered, in one batch only) is caught, for that batch."""
    from cuda_agent.eval import batch as lay
    from cuda_agent.eval.clocked import CALIBRATION_REPS

    real = lay.snapshot
    calibration = 2 * CALIBRATION_REPS  # two sampled reps per calibration batch: before the library
    seen: list[int] = []

    def one_batch_off(block, plan, layout, rep, into=None):
        snaps = real(block, plan, layout, rep, into=into)
        seen.append(rep)
        return [s + 1.0 for s in snaps] if len(seen) > calibration else snaps

    monkeypatch.setattr(lay, "snapshot", one_batch_off)
    v = evaluator.evaluate(HERE / "honest")
    assert len(seen) > calibration
    assert "timed_output_mismatch" in guards(v) and v.reward == -1


def test_what_a_forward_may_allocate_is_a_share_of_the_budget_fixed_at_the_start(evaluator, monkeypatch):
    """Not of what is free when the plan is checked, which this evaluation's own processes lower."""
    out_bytes = (1 << 15) * 4  # the task's one float output
    monkeypatch.setattr(evaluator.ctx, "budget_bytes", 2 * out_bytes)  # memory_fraction 0.5: exactly the output
    assert evaluator.evaluate(HERE / "honest").correct
    monkeypatch.setattr(evaluator.ctx, "budget_bytes", out_bytes)
    v = evaluator.evaluate(HERE / "honest")
    assert not v.correct and any("forward allocates" in f.message for f in v.findings if f.guard == "plan")


def test_partial_write_names_the_poisoned_elements(evaluator):
    v = evaluator.evaluate(HERE / "partial")
    bad = [o for s in v.sets for o in s.outputs if not o.ok]
    # the unwritten half, NaN poison on a GPU; on CPU malloc'd garbage, of which a few elements may
    # happen to fall within tolerance
    assert bad and bad[0].mismatched >= (1 << 14) - 64


def test_hang_is_killed_at_the_time_limit(tmp_path):
    cfg = EvalConfig(device="cpu", n_sets=1, baselines=[], timeout_s=8, cache_dir=tmp_path)
    with Evaluator(load_task(str(HERE / "model.py")), cfg) as ev:
        v = ev.evaluate(HERE / "hang")
    assert v.status == "timeout" and v.reward == -1
    assert "8 s" in v.error


def test_pow2_rounding_times_batches_of_a_power_of_two_calls(tmp_path, monkeypatch):
    """`eval.timing.reps_rounding = "pow2"`: the warm-up asks `next_reps` in that mode and settles on a
    power of two over one, and every measured batch holds that many calls, each on inputs of its own."""
    from cuda_agent.eval import timing_phase

    asked: list[tuple[str, int]] = []

    def spy(reps, wall_ms, cfg, cap):
        asked.append((cfg.reps_rounding, want := next_reps(reps, wall_ms, cfg, cap)))
        return want

    monkeypatch.setattr(timing_phase, "next_reps", spy)
    timing = TimingConfig(warmup_ms=5, min_batches=2, max_batches=3, budget_ms=50, reps_rounding="pow2")
    cfg = EvalConfig(device="cpu", n_sets=1, baselines=[], timeout_s=60, timing=timing, cache_dir=tmp_path)
    with Evaluator(load_task(str(HERE / "model.py")), cfg) as ev:
        v = ev.evaluate(HERE / "honest")
    t = v.timing
    assert v.status == "correct" and t is not None, (v.error, v.findings)
    assert asked and {mode for mode, _ in asked} == {"pow2"}
    assert t.batch_reps > 1 and t.batch_reps & (t.batch_reps - 1) == 0, t
    assert t.reps == t.batches * t.batch_reps == t.input_sets, t


def _with_prelude(tmp_path: Path, prelude: str) -> Path:
    """The honest candidate with `prelude` run at import (an attack), in a folder of its own."""
    import shutil

    cand = tmp_path / "cand"
    shutil.copytree(HERE / "honest", cand, ignore=shutil.ignore_patterns("__pycache__"))
    src = (cand / "model_new.py").read_text()
    (cand / "model_new.py").write_text(
        src.replace("kernels = kernel_runtime.load_kernels()", "kernels = kernel_runtime.load_kernels()\n" + prelude)
    )
    return cand


def test_candidate_cannot_write_outside_the_jail(tmp_path):
    from cuda_agent.jail import jail_problem

    if jail_problem():
        pytest.skip(jail_problem())
    target = tmp_path / "records" / "trajectory.jsonl"
    target.parent.mkdir()
    cand = _with_prelude(tmp_path, f"import os\nopen({str(target)!r}, 'w').write('written by the candidate')\n")
    cfg = EvalConfig(device="cpu", n_sets=1, baselines=[], timeout_s=60, cache_dir=tmp_path / "cache")
    with Evaluator(load_task(str(HERE / "model.py")), cfg) as ev:
        v = ev.evaluate(cand)
    assert not target.exists()
    assert v.status == "runtime_error" and ("No such file" in v.error or "Read-only" in v.error), v.error
    assert "forbidden_call" in guards(v) or "import_not_allowed" in guards(v)


def test_missing_model_new_is_a_clear_error(evaluator, tmp_path):
    v = evaluator.evaluate(tmp_path)
    assert v.status == "error" and "model_new.py" in v.error


def test_compile_error_is_trimmed_and_located(evaluator, tmp_path):
    cand = tmp_path / "cand"
    (cand / "kernels").mkdir(parents=True)
    (cand / "model_new.py").write_text((HERE / "honest" / "model_new.py").read_text())
    src = (HERE / "honest" / "kernels" / "scale_add.cu").read_text().replace("out[i] =", "out[j] =")
    (cand / "kernels" / "scale_add.cu").write_text(src)
    v = evaluator.evaluate(cand)
    assert v.status == "compile_error" and v.reward == -1
    assert "scale_add.cu:" in v.error and '"j"' in v.error and len(v.error) < 4000


def test_worker_environment_has_no_credentials(monkeypatch, tmp_path):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-for-candidates")
    cand = _with_prelude(
        tmp_path,
        "import os\nif any('KEY' in k for k in os.environ) or '/root' in os.environ.get('HOME', ''):\n"
        "    raise RuntimeError('leaked: ' + ','.join(os.environ))\n",
    )
    cfg = EvalConfig(device="cpu", n_sets=1, baselines=[], timeout_s=60, cache_dir=tmp_path / "cache")
    with Evaluator(load_task(str(HERE / "model.py")), cfg, ahead="none") as ev:
        v = ev.evaluate(cand)  # raises in its import if any *KEY* variable is visible
    assert "leaked" not in (v.error or ""), v.error
    assert v.sets and v.sets[0].ok


def test_candidate_cannot_reach_the_network(tmp_path):
    import socket

    from cuda_agent.jail import jail_problem

    if jail_problem():
        pytest.skip(jail_problem())
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    port = server.getsockname()[1]
    cand = _with_prelude(
        tmp_path,
        f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
        "    raise RuntimeError('reached the network')\nexcept OSError:\n    pass\n",
    )
    cfg = EvalConfig(device="cpu", n_sets=1, baselines=[], timeout_s=60, cache_dir=tmp_path / "cache")
    with Evaluator(load_task(str(HERE / "model.py")), cfg, ahead="none") as ev:
        v = ev.evaluate(cand)  # raises in its import if it can connect to the server
    server.close()
    assert "reached the network" not in (v.error or ""), v.error
    assert v.sets and v.sets[0].ok
