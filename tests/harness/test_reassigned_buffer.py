"""A buffer the task's forward updates by assignment (`self.avg = 0.9 * self.avg + 0.1 * x`, a new
tensor under the buffer's name) rather than in place. Reference.outputs takes the buffers it
compares *before* forward runs (dict(named_buffers())), so it compares the old tensor objects,
which forward never touched: state_after stays empty and the harness believes the task's forward
leaves the buffer alone. A candidate that updates it as the task does is then `state_write` (read-only),
reward -1; one that skips the update is correct."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.reference import Reference
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.task_code import TaskCodeError
from cuda_agent.task import load_task

TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("avg", torch.zeros(64))

    def forward(self, x):
        self.avg = 0.9 * self.avg + 0.1 * x  # an exponential average, assigned (not in place)
        return x * 2.0

def get_inputs():
    return [torch.randn(64)]

def get_init_inputs():
    return []
"""

MODEL_NEW = """
import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("avg", torch.zeros(64))

    def forward(self, x):
        out = torch.empty_like(x)
        kernels.ema(x, self.avg, out, x.numel(), UPDATE)
        return out
"""

SOURCE = """
#include <cuda_runtime.h>
#include <cstdint>
extern "C" void ema(const float* x, float* avg, float* out, int64_t n, int64_t update, cudaStream_t stream) {
  (void)stream;
  for (int64_t i = 0; i < n; ++i) {
    out[i] = 2.0f * x[i];
    if (update) avg[i] = 0.9f * avg[i] + 0.1f * x[i];
  }
}
"""


def _candidate(root: Path, update: int) -> Path:
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "k.cu").write_text(SOURCE)
    (root / "model_new.py").write_text(MODEL_NEW.replace("UPDATE", str(update)))
    return root


def test_a_buffer_updated_by_assignment_is_judged_like_one_updated_in_place(tmp_path_factory, tmp_path):
    task = tmp_path_factory.mktemp("task") / "model.py"
    task.write_text(TASK)
    cfg = EvalConfig(device="cpu", baselines=["eager"], n_sets=2, timeout_s=120, cache_dir=tmp_path / "cache")
    with Evaluator(load_task(str(task)), cfg) as ev:
        honest = ev.evaluate(_candidate(tmp_path / "honest", 1), timing=False)
        skips = ev.evaluate(_candidate(tmp_path / "skips", 0), timing=False)
    # the honest one leaves `avg` exactly as the task's forward does
    assert honest.status == "correct", (honest.status, honest.reward, [f.message for f in honest.findings])
    # and one that never updates it is as wrong as with an in-place update (test_updated_buffers.py)
    assert skips.reward == -1 and "state_write" in {f.guard for f in skips.failing_findings}, (
        skips.status,
        [f.message for f in skips.findings],
    )


def test_each_reference_call_starts_from_the_buffer_the_task_built(tmp_path):
    # the output reads the buffer: a reference that started its next call from the last one's
    # assigned tensor (or a float64 model never reset) would drift from what a candidate is given
    task = tmp_path / "model.py"
    task.write_text(TASK.replace("return x * 2.0", "return x + self.avg"))
    ref = Reference(load_task(str(task)), "cpu")
    x = torch.randn(64)
    for _ in range(2):
        r32, r64 = ref.outputs([x.clone()])
        assert torch.allclose(ref.state_after["avg"], 0.1 * x)
        assert torch.allclose(r32[0], 1.1 * x) and torch.allclose(r64[0], 1.1 * x.double())
    assert ref.updated_buffers == {"avg"}


# a task that keeps its running state in a parameter: "parameters unchanged" cannot judge it
PARAMETER_TASKS = {
    "in place": "self.avg.mul_(0.9).add_(0.1 * x)",
    "assigned": "self.avg = nn.Parameter(0.9 * self.avg + 0.1 * x, requires_grad=False)",
}


@pytest.mark.parametrize("update", PARAMETER_TASKS.values(), ids=PARAMETER_TASKS.keys())
def test_a_task_whose_forward_changes_a_parameter_is_unscorable(tmp_path, update):
    source = TASK.replace(
        'self.register_buffer("avg", torch.zeros(64))', "self.avg = nn.Parameter(torch.zeros(64), False)"
    )
    task = tmp_path / "model.py"
    task.write_text(
        source.replace("self.avg = 0.9 * self.avg + 0.1 * x  # an exponential average, assigned (not in place)", update)
    )
    cfg = EvalConfig(device="cpu", baselines=["eager"], n_sets=2, timeout_s=120, cache_dir=tmp_path / "cache")
    with Evaluator(load_task(str(task)), cfg) as ev:
        verdict = ev.evaluate(_candidate(tmp_path / "honest", 1), timing=False)
    assert verdict.status == "unscorable" and "parameter avg" in verdict.error and "register_buffer" in verdict.error
    # and a forward that changes it on some input set only is caught there, not judged
    ref = Reference(load_task(str(task)), "cpu")
    with pytest.raises(TaskCodeError, match="parameter avg"):
        ref.outputs([torch.randn(64)])
