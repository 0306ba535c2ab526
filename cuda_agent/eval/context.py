"""What every phase of an evaluation reads: the task and its reference, the settings, the jailed
processes to take, the memory budget and the baselines cache. The Evaluator makes one per task
(once the reference is built) and hands it to each phase; a phase never sees the Evaluator, so
the pipeline's order lives in evaluator.py alone and no phase reaches back into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.eval.baselines import BaselineCache
from cuda_agent.eval.reference import Reference
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.spares import Spares
from cuda_agent.task import Task


@dataclass
class EvalContext:
    task: Task  # the private snapshot the reference and the judges load
    cfg: EvalConfig
    ref: Reference  # the parent's reference: inputs from seeds, fp32 and float64 outputs
    spares: Spares  # recorders and judges, started ahead of need
    cache_dir: Path
    budget_bytes: int  # GPU memory of one evaluation, fixed when the evaluator started
    baseline_cache: BaselineCache
    state_nbytes: dict[str, int] = field(default_factory=dict)  # each parameter's and buffer's storage size

    @property
    def device(self) -> str:
        return self.cfg.device

    @property
    def cuda(self) -> bool:
        return self.cfg.device.startswith("cuda")

    def plan_budget(self) -> int:
        """What one forward's plan may allocate, and one timed batch's block may hold (its parameters once)."""
        return int(self.budget_bytes * self.cfg.memory_fraction)
