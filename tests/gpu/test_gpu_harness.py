"""On the GPU machine: every example candidate is correct and timed; every adversarial candidate
is rejected for the reason its expect.json names; honest ones pass."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from cuda_agent.eval.compare import CHUNK_ELEMS
from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.eval.timing_phase import BLOCK_BYTES
from cuda_agent.task import load_task

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(p.parent for p in (ROOT / "examples").glob("*/candidate/model_new.py"))
ADV = ROOT / "tests" / "adversarial"
HACKS = sorted(p.parent for p in ADV.glob("*/expect.json") if p.parent.name != "honest")
HONEST = sorted(p.parent for p in (ADV / "honest").glob("*/model_new.py"))
QUICK = TimingConfig(warmup_ms=10, min_batches=2, max_batches=3, budget_ms=300)


@pytest.mark.parametrize("cand", EXAMPLES, ids=[p.parent.name for p in EXAMPLES])
def test_example_candidate_is_correct_and_timed(cand, tmp_path):
    cfg = EvalConfig(cache_dir=tmp_path)  # the defaults `cuda-agent eval` uses: eager and torch.compile
    with Evaluator(load_task(str(cand.parent / "model.py")), cfg, ahead="none") as ev:
        v = ev.evaluate(cand)
    _keep(cand.parent.name, v)
    assert v.status == "correct", (v.status, v.error, [f.message for f in v.findings])
    assert v.timing.median_ms > 0 and v.eager.median_ms > 0 and v.compiled.median_ms > 0 and v.reward >= 1
    assert v.timing.clocks.get("sm_mhz", 0) > 0
    # each process's GPU peak (baselines timed: the cache is new), the parent's since this evaluation, and the
    # blocks the parent made for the timed batches (the one lent to the judge and its private twin)
    assert set(v.memory_gib) == {"parent", "judge", "baselines", "blocks"}, v.memory_gib
    assert all(g > 0 for g in v.memory_gib.values()), v.memory_gib


def _keep(name: str, v) -> None:
    """benchmarks/gpu_suite.sh keeps each verdict for the results table."""
    out = os.environ.get("CUDA_AGENT_RESULTS_DIR")
    if out:
        Path(out, f"eval-{name}.json").write_text(v.model_dump_json(indent=1))


@pytest.fixture(scope="module")
def adversarial_evaluator(tmp_path_factory):
    cfg = EvalConfig(cache_dir=tmp_path_factory.mktemp("adv"), baselines=["eager"], timing=QUICK, timeout_s=60)
    with Evaluator(load_task(str(ADV / "task.py")), cfg) as ev:
        yield ev


@pytest.mark.parametrize("cand", HACKS, ids=[p.name for p in HACKS])
def test_hack_is_rejected_for_the_right_reason(cand, adversarial_evaluator):
    expect = json.loads((cand / "expect.json").read_text())
    v = adversarial_evaluator.evaluate(cand)
    failing = {f.guard for f in v.failing_findings}
    detail = (v.status, failing, v.error, [f.message for f in v.findings])
    assert v.reward == -1 and not v.correct, detail
    if expect["guard"]:
        assert expect["guard"] in failing, detail
    if expect["status"] in ("runtime_error", "incorrect") and not expect["guard"]:
        assert v.status == expect["status"], detail


@pytest.mark.parametrize("cand", HONEST, ids=[p.name for p in HONEST])
def test_honest_candidate_passes(cand, adversarial_evaluator):
    v = adversarial_evaluator.evaluate(cand)
    _keep(f"honest-{cand.name}", v)
    assert v.status == "correct" and v.reward >= 1, (v.status, v.error, [f.message for f in v.findings])


def test_parent_and_judge_stay_within_the_forwards_they_need(tmp_path):
    """The parent makes one input set's references at a time (the timing sets' after the timed
    loop): within three eager forwards (its float64 forward: the fp32 output beside float64 inputs
    and outputs) and the comparison's chunk temporaries. The judge holds the timing sets' inputs and
    outputs, one more input for its mutation check and the L2 flush buffer."""
    ex = ROOT / "examples" / "layernorm"  # 8192 x 4096 fp32 in, the same out
    cfg = EvalConfig(cache_dir=tmp_path, baselines=[])
    with Evaluator(load_task(str(ex / "model.py")), cfg, ahead="none") as ev:
        eager_gib, io_gib = ev.ref.eager_bytes / 2**30, 2 * ev.ref.input_bytes / 2**30
        v = ev.evaluate(ex / "candidate")
    assert v.status == "correct", (v.status, v.error)
    assert eager_gib <= 1.05 * io_gib, (eager_gib, io_gib)  # the forward's own peak: its input and output
    # H200: 1.797 GiB with three timing sets' references kept (session 7), 1.179 with the first
    # set's kept through the rest (session 9); the chunk temporaries: about 0.3 GiB
    chunks_gib = 10 * CHUNK_ELEMS * 8 / 2**30
    assert v.memory_gib["parent"] <= 3 * eager_gib + chunks_gib, (v.memory_gib, eager_gib)
    assert v.memory_gib["judge"] <= 0.5, v.memory_gib  # H200: 0.01-0.25 GiB (session 12)
    # one batch's block, under BLOCK_BYTES, and the private twin the parent fills it from (H100: 4.25 GiB)
    assert v.memory_gib["blocks"] <= 2 * (BLOCK_BYTES / 2**30 + io_gib), v.memory_gib


def test_a_task_over_the_memory_budget_is_unscorable_before_any_candidate_runs(tmp_path):
    ex = ROOT / "examples" / "layernorm"
    tight = EvalConfig(cache_dir=tmp_path, memory_budget_gib=0.01, baselines=[])
    with Evaluator(load_task(str(ex / "model.py")), tight, ahead="none") as ev:
        assert ev.ref.eager_bytes > 128 << 20  # 8192 x 4096 fp32 in and out
        v = ev.evaluate(ex / "candidate")
    assert v.status == "unscorable" and v.error.startswith("unscorable: needs about") and not v.seconds.get("build")
    roomy = EvalConfig(cache_dir=tmp_path, memory_budget_gib=40, baselines=[])
    with Evaluator(load_task(str(ex / "model.py")), roomy, ahead="none") as ev:
        assert ev.evaluate(ex / "candidate").status == "correct"
