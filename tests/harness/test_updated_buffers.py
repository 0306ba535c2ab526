"""A buffer the task's own forward updates (BatchNorm's running statistics in training mode) must
come back from the candidate's call as the reference's forward left it, like an output. A red-team
candidate computed BatchNorm's output and never touched the running statistics (or passed
running_mean to its launcher and left it as it was): both were correct, reward 1, because only
storages whose bytes the call changed were compared."""

from __future__ import annotations

import textwrap
from pathlib import Path
from string import Template

import pytest

from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.task import load_task

TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(64)

    def forward(self, x):
        return self.bn(x)

def get_inputs():
    return [torch.randn(256, 64)]

def get_init_inputs():
    return []
"""

# training-mode BatchNorm1d over (n, c), channel j: the output from the batch's statistics, and
# (where the running statistics are passed and `update` is set) those updated as torch does:
# momentum 0.1, the unbiased variance. One body for the host loop and the GPU's thread per channel.
CHANNEL = """
    double m = 0, v = 0;
    for (int64_t i = 0; i < n; ++i) m += x[i * c + j];
    m /= n;
    for (int64_t i = 0; i < n; ++i) { double d = x[i * c + j] - m; v += d * d; }
    double inv = 1.0 / sqrt(v / n + 1e-5);
    for (int64_t i = 0; i < n; ++i) out[i * c + j] = (float)((x[i * c + j] - m) * inv * w[j] + b[j]);
    $per_channel
"""
SOURCE = {
    "cpu": """
#include <cuda_runtime.h>
#include <cstdint>
#include <cmath>
using std::sqrt;
extern "C" void bn_train(const float* x, const float* w, const float* b, $stats
                         float* out, int64_t n, int64_t c, cudaStream_t stream) {
  (void)stream;
  for (int64_t j = 0; j < c; ++j) {$channel}
  $once
}
""",
    "cuda": """
#include <cuda_runtime.h>
#include <cstdint>
__global__ void bn_kernel(const float* x, const float* w, const float* b, $stats float* out, int64_t n, int64_t c) {
  int64_t j = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (j >= c) return;
  $channel
  if (j == 0) { $once }
}
extern "C" void bn_train(const float* x, const float* w, const float* b, $stats
                         float* out, int64_t n, int64_t c, cudaStream_t stream) {
  bn_kernel<<<(unsigned)((c + 63) / 64), 64, 0, stream>>>(x, w, b, $args out, n, c);
}
""",
}
UPDATE = {
    "stats": "float* rm, float* rv, int64_t* nbt, int64_t update,",
    "args": "rm, rv, nbt, update,",
    "per_channel": (
        "if (update) { rm[j] = (float)($keep * rm[j] + $mom * m); "
        "rv[j] = (float)($keep * rv[j] + $mom * v / (n - 1)); }"
    ),
    "once": "if (update) nbt[0] += 1;",
}
NO_STATS = dict.fromkeys(UPDATE, "")  # the statistics not even passed


def kernel(device: str, parts: dict, momentum: float = 0.1) -> str:
    per_channel = Template(parts["per_channel"]).substitute(keep=repr(1 - momentum), mom=repr(momentum))
    channel = Template(CHANNEL).substitute(per_channel=per_channel)
    return Template(SOURCE[device]).substitute(parts, channel=channel)


MODEL_NEW = """
import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(64)

    def forward(self, x):
        out = torch.empty_like(x)
        bn = self.bn
        kernels.bn_train(x, bn.weight, bn.bias, bn.running_mean, bn.running_var, bn.num_batches_tracked, UPDATE,
                         out, x.shape[0], x.shape[1])
        return out
"""


def _candidate(root: Path, device: str, update: int, momentum: float = 0.1) -> Path:
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "bn.cu").write_text(kernel(device, UPDATE, momentum))
    (root / "model_new.py").write_text(textwrap.dedent(MODEL_NEW).replace("UPDATE", str(update)))
    return root


def _untouched(root: Path, device: str) -> Path:
    """The output only; the running statistics are not even passed."""
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "bn.cu").write_text(kernel(device, NO_STATS))
    (root / "model_new.py").write_text(
        MODEL_NEW.replace("bn.running_mean, bn.running_var, bn.num_batches_tracked, UPDATE,", "")
    )
    return root


@pytest.fixture(scope="module", params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def evaluator(request, tmp_path_factory):
    task = tmp_path_factory.mktemp("task") / "model.py"
    task.write_text(TASK)
    cfg = EvalConfig(
        device=request.param, n_sets=2, baselines=["eager"], timeout_s=60, cache_dir=tmp_path_factory.mktemp("cache")
    )
    with Evaluator(load_task(str(task)), cfg) as ev:
        yield ev


def test_a_candidate_that_updates_the_running_statistics_is_correct(evaluator, tmp_path):
    v = evaluator.evaluate(_candidate(tmp_path / "honest", evaluator.cfg.device, 1), timing=False)
    assert v.status == "correct", (v.error, v.findings)
    assert not any(f.guard == "state_write" for f in v.findings)


@pytest.mark.parametrize("make", ["left", "untouched"])
def test_a_candidate_that_skips_the_update_is_a_state_write(evaluator, tmp_path, make):
    device = evaluator.cfg.device
    root = _candidate(tmp_path / "left", device, 0) if make == "left" else _untouched(tmp_path / "untouched", device)
    v = evaluator.evaluate(root, timing=False)
    assert not v.correct and v.reward == -1
    found = [f for f in v.failing_findings if f.guard == "state_write"]
    assert found, (v.status, v.error, v.findings)
    assert "running_mean" in found[0].message and "running_var" in found[0].message
    assert "must be updated the same way" in found[0].message


@pytest.fixture(scope="module")
def small_steps(tmp_path_factory):
    """Momentum 0.001 and 4096 rows: each running statistic moves by about 2e-5 a call, under the
    outputs' absolute tolerance of 1e-4, so that tolerance alone cannot tell an update from none."""
    task = tmp_path_factory.mktemp("small") / "model.py"
    task.write_text(
        TASK.replace("nn.BatchNorm1d(64)", "nn.BatchNorm1d(64, momentum=0.001)").replace("256, 64", "4096, 64")
    )
    cfg = EvalConfig(device="cpu", n_sets=2, baselines=["eager"], timeout_s=60, cache_dir=tmp_path_factory.mktemp("c"))
    with Evaluator(load_task(str(task)), cfg) as ev:
        yield ev


def test_an_update_smaller_than_the_outputs_tolerance_is_still_checked(small_steps, tmp_path):
    honest = small_steps.evaluate(_candidate(tmp_path / "honest", "cpu", 1, momentum=0.001), timing=False)
    assert honest.status == "correct", (honest.error, honest.findings)
    v = small_steps.evaluate(_candidate(tmp_path / "left", "cpu", 0), timing=False)
    assert not v.correct and v.reward == -1
    (found,) = [f for f in v.failing_findings if f.guard == "state_write"]
    assert "running_mean (the task's forward updates it; this call did not, or only in part)" in found.message


# The update made in a batch's first call only: rep 0 lies just past the parameters the reps share
# (w at the block's start), so the distance from w to x tells the first call from the others with
# no state at all. A correctness call is always a first call. While a batch's reps shared one copy
# of the statistics, the timing phase could not check a sampled call's update, and this passed.
FIRST_CALL_ONLY = "update = update && (uintptr_t)((const char*)x - (const char*)w) < 32768;"


def _first_call_only(root: Path, device: str) -> Path:
    _candidate(root, device, 1)
    src = root / "kernels" / "bn.cu"
    text = src.read_text().replace("cudaStream_t stream) {", "cudaStream_t stream) {\n  " + FIRST_CALL_ONLY, 1)
    src.write_text(text)
    return root


def test_the_timed_calls_updates_are_checked_too(evaluator, tmp_path):
    device = evaluator.cfg.device
    honest = evaluator.evaluate(_candidate(tmp_path / "honest", device, 1))
    assert honest.status == "correct" and honest.timing is not None, (honest.error, honest.findings)
    assert not any(f.guard == "state_write" for f in honest.findings)
    v = evaluator.evaluate(_first_call_only(tmp_path / "first", device))
    assert v.reward == -1, (v.status, v.findings)
    (found,) = [f for f in v.failing_findings if f.guard == "state_write"]
    assert "during timing" in found.message and "running_mean" in found.message
