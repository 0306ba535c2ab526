"""On the GPU machine: a kernel that faults or never ends is a verdict with its cause, and the
next evaluation in the same Evaluator works (each candidate has its own worker and context)."""

from pathlib import Path

import pytest

from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.task import load_task

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parents[2]
FAULTS = ROOT / "tests" / "gpu_faults"
HONEST = ROOT / "tests" / "adversarial" / "honest" / "reordered"


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    cfg = EvalConfig(
        cache_dir=tmp_path_factory.mktemp("faults"),
        baselines=[],
        timeout_s=20,
        timing=TimingConfig(warmup_ms=10, min_batches=2, max_batches=3, budget_ms=100),
    )
    with Evaluator(load_task(str(ROOT / "tests" / "adversarial" / "task.py")), cfg) as ev:
        yield ev


def test_illegal_address_is_a_runtime_error_and_the_next_evaluation_works(evaluator):
    v = evaluator.evaluate(FAULTS / "illegal_address")
    assert v.status == "runtime_error" and "illegal" in v.error.lower(), v.error
    assert evaluator.evaluate(HONEST).status == "correct"


def test_hanging_kernel_is_killed_at_the_limit_and_the_next_evaluation_works(evaluator):
    v = evaluator.evaluate(FAULTS / "hang")
    assert v.status == "timeout" and "20 s" in v.error
    assert evaluator.evaluate(HONEST).status == "correct"
