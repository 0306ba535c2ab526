"""Buffers of the task's Model that its forward updates, in the checked sets and the timed calls
(second red team on them). Each timed call has its own copy of every buffer, so a sampled call's
update is checked against the reference's from the same start:

1. A buffer registered transposed: the block's bytes are viewed with the task buffer's own strides
   (only contiguous ones were viewed, and an honest candidate was a state_write).
2. A buffer the forward updates on some inputs only, none of them in the checked sets: it stayed
   one copy shared by a batch's calls, so a candidate that never updated it passed (reward 2), and
   an honest one that updated it in a call the parent did not sample was a state_write (-1).
3. A running maximum whose untouched entries stay -inf: their step is NaN, and the "did it move"
   rule (state_check.moved) read an honest update as none; it now looks at finite entries only.
"""

from __future__ import annotations

import random
import types
from pathlib import Path

import pytest

from cuda_agent.eval import correctness_phase
from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.task import load_task

MODEL_NEW = """
import torch
import torch.nn as nn
import kernel_runtime

kernels = kernel_runtime.load_kernels()


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        BUFFER

    def forward(self, x):
        out = torch.empty_like(x)
        CALL
        return out
"""


def _write(root: Path, buffer: str, call: str, source: str) -> Path:
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "k.cu").write_text(source)
    (root / "model_new.py").write_text(MODEL_NEW.replace("BUFFER", buffer).replace("CALL", call))
    return root


def _evaluator(tmp_path_factory, task_text: str, **kw) -> Evaluator:
    task = tmp_path_factory.mktemp("task") / "model.py"
    task.write_text(task_text)
    cfg = EvalConfig(device="cpu", baselines=["eager"], timeout_s=120, cache_dir=tmp_path_factory.mktemp("cache"), **kw)
    return Evaluator(load_task(str(task)), cfg)


# -- 1. a transposed buffer ---------------------------------------------------------------------

TRANSPOSED_TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("acc", torch.zeros(16, 8).t())  # (8, 16), strides (1, 8)

    def forward(self, x):
        self.acc.mul_(0.5).add_(x, alpha=0.5)
        return x * 2.0

def get_inputs():
    return [torch.randn(8, 16)]

def get_init_inputs():
    return []
"""

TRANSPOSED_SOURCE = """
#include <cuda_runtime.h>
#include <cstdint>
// acc_t: the buffer's storage, (16, 8) row-major, i.e. acc[i][j] at j * 8 + i
extern "C" void ema(const float* x, float* acc_t, float* out, int64_t rows, int64_t cols, cudaStream_t stream) {
  (void)stream;
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      float v = x[i * cols + j];
      out[i * cols + j] = 2.0f * v;
      float* a = acc_t + j * rows + i;
      *a = 0.5f * *a + 0.5f * v;
    }
}
"""


# -- 2. an update on some inputs only ---------------------------------------------------------

THRESHOLD = 0.0  # half the inputs update `hits`
SOME_TASK = f"""
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("hits", torch.zeros(1, dtype=torch.int64))

    def forward(self, x):
        self.hits += (x[0] > {THRESHOLD}).long()  # counts inputs whose first value is large
        return x * 2.0

def get_inputs():
    return [torch.randn(4096)]

def get_init_inputs():
    return []
"""

SOME_SOURCE = """
#include <cuda_runtime.h>
#include <cstdint>
extern "C" void twice(const float* x, int64_t* hits, float* out, int64_t n, int64_t update, cudaStream_t stream) {
  (void)stream;
  for (int64_t i = 0; i < n; ++i) out[i] = 2.0f * x[i];
  if (update && x[0] > THRESHOLD) hits[0] += 1;
}
""".replace("THRESHOLD", repr(THRESHOLD) + "f")


def _quiet_seeds(ev: Evaluator, n: int, threshold: float) -> list[int]:
    """Seeds whose input set does not update `hits` (its first value at most `threshold`)."""
    found, rng = [], random.Random(7)
    while len(found) < n:
        s = rng.getrandbits(31)
        if float(ev.task.draw_inputs(s, "cpu")[0][0]) <= threshold:
            found.append(s)
    return found


@pytest.fixture
def quiet_checked_sets(monkeypatch):
    """The checked sets happen to hold no input that updates the buffer (chance (1/2)^n_sets here;
    a rarer update makes it the rule): seeds for the correctness phase only."""

    def patch(ev: Evaluator, threshold: float = THRESHOLD) -> None:
        seeds = iter(_quiet_seeds(ev, 64, threshold))
        monkeypatch.setattr(correctness_phase, "secrets", types.SimpleNamespace(randbits=lambda k: next(seeds)))

    return patch


def _some(root: Path, update: int) -> Path:
    return _write(
        root,
        'self.register_buffer("hits", torch.zeros(1, dtype=torch.int64))',
        f"kernels.twice(x, self.hits, out, x.shape[0], {update})",
        SOME_SOURCE,
    )


def test_a_skipped_update_on_some_inputs_is_seen_in_timing(tmp_path_factory, tmp_path, quiet_checked_sets):
    with _evaluator(tmp_path_factory, SOME_TASK, n_sets=2) as ev:
        quiet_checked_sets(ev)
        v = ev.evaluate(_some(tmp_path / "skip", 0))
    # half of the sampled timed calls' reference forwards updated `hits`; this candidate never does
    assert v.reward == -1 and "state_write" in {f.guard for f in v.failing_findings}, (
        v.status,
        v.reward,
        v.timing and v.timing.median_ms,
        [f.message for f in v.findings],
    )


RARE = 2.878  # P(x > RARE) = 0.2%: a sampled call seldom updates, one of the others in a batch almost surely
RARE_TASK = SOME_TASK.replace(f"> {THRESHOLD})", f"> {RARE})")


def test_an_honest_update_on_rare_inputs_is_no_state_write_in_timing(tmp_path_factory, tmp_path, quiet_checked_sets):
    with _evaluator(tmp_path_factory, RARE_TASK, n_sets=2) as ev:
        quiet_checked_sets(ev, RARE)
        root = _write(
            tmp_path / "honest",
            'self.register_buffer("hits", torch.zeros(1, dtype=torch.int64))',
            "kernels.twice(x, self.hits, out, x.shape[0], 1)",
            SOME_SOURCE.replace(repr(THRESHOLD) + "f", repr(RARE) + "f"),
        )
        v = ev.evaluate(root)
    assert v.status == "correct" and v.reward >= 1, (v.status, v.reward, [f.message for f in v.findings])


# -- 3. a running maximum that stays -inf where no input reached it ----------------------------

INF_TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("peak", torch.full((8,), float("-inf")))  # a running maximum per bucket

    def forward(self, x):
        self.peak[:4] = torch.maximum(self.peak[:4], x[:4])  # buckets 4..7 see nothing in this call
        return x * 2.0

def get_inputs():
    return [torch.randn(64)]

def get_init_inputs():
    return []
"""

INF_SOURCE = """
#include <cuda_runtime.h>
#include <cstdint>
extern "C" void peak(const float* x, float* m, float* out, int64_t n, cudaStream_t stream) {
  (void)stream;
  for (int64_t i = 0; i < n; ++i) out[i] = 2.0f * x[i];
  for (int64_t i = 0; i < 4; ++i) m[i] = x[i] > m[i] ? x[i] : m[i];
}
"""


HONEST = {
    "transposed": (
        TRANSPOSED_TASK,
        'self.register_buffer("acc", torch.zeros(16, 8).t())',
        "kernels.ema(x, self.acc.t(), out, x.shape[0], x.shape[1])",
        TRANSPOSED_SOURCE,
    ),
    "running_maximum": (
        INF_TASK,
        'self.register_buffer("peak", torch.full((8,), float("-inf")))',
        "kernels.peak(x, self.peak, out, x.shape[0])",
        INF_SOURCE,
    ),
}


@pytest.mark.parametrize("case", sorted(HONEST))
def test_an_honest_update_of_an_unusual_buffer_is_correct(tmp_path_factory, tmp_path, case):
    task, buffer, call, source = HONEST[case]
    with _evaluator(tmp_path_factory, task, n_sets=2) as ev:
        v = ev.evaluate(_write(tmp_path / "honest", buffer, call, source), timing=False)
    assert v.status == "correct", (v.status, v.error, [f.message for f in v.findings])
