"""What a pool is. It has two sides, because a batch runs each task in a process of its own:
- the scheduler side (the batch process): `place()` picks a task's device, `release()` gives it back;
- the evaluator side (the task's process, rebuilt there from the PoolSpec): `evaluator(task, cfg)`
  has the harness's Evaluator interface, and `slot(device)` holds one of the device's evaluation
  slots (re-verification at the end of a run takes one too).
The harness never imports this package (docs/architecture.md: eval/ imports no pool/, ray or git)."""

from __future__ import annotations

from abc import ABC, abstractmethod
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel, Field


class EvaluatorLike(Protocol):
    """cuda_agent.eval.evaluator.Evaluator's public interface, as tools use it."""

    def evaluate(self, candidate_dir: Path, *, timing: bool = True): ...

    def close(self) -> None: ...


class PoolSpec(BaseModel):
    """Enough to rebuild the pool in another process (JSON)."""

    kind: Literal["local", "ray"] = "local"  # ray: tasks placed by a Ray cluster (--ray)
    devices: list[str] = Field(min_length=1)  # cuda:N, or cpu for host-only test kernels
    slots_per_device: int = Field(2, ge=1)  # evaluations at once per device; timing is serialised anyway
    lock_dir: Path  # where the cross-process slot locks live (shared by every task process)


class EvaluatorPool(ABC):
    def __init__(self, spec: PoolSpec):
        self.spec = spec

    @abstractmethod
    def place(self) -> str:
        """The device for the next task (scheduler side)."""

    @abstractmethod
    def release(self, device: str) -> None:
        """A task placed on `device` ended."""

    def evaluator(self, task, cfg, ahead: str = "keep") -> EvaluatorLike:
        """An evaluator for `task` with `cfg` (whose device is the placed one), evaluator side;
        `ahead` is the Evaluator's (which worker processes start before they are needed)."""
        return SlotEvaluator(self, task, cfg, ahead)

    @abstractmethod
    def slot(self, device: str) -> AbstractContextManager:
        """Hold one evaluation slot of `device` for the duration of a with-block."""


class SlotEvaluator:
    """The harness Evaluator behind a device slot of the pool: made lazily, and each evaluation holds a slot."""

    def __init__(self, pool: EvaluatorPool, task, cfg, ahead: str = "keep"):
        self.pool, self.task, self.cfg, self.ahead = pool, task, cfg, ahead
        self._inner = None

    def evaluate(self, candidate_dir: Path, *, timing: bool = True):
        with self.pool.slot(self.cfg.device):
            if self._inner is None:
                from cuda_agent.eval.evaluator import Evaluator

                self._inner = Evaluator(self.task, self.cfg, ahead=self.ahead)  # builds the reference on the device
            return self._inner.evaluate(candidate_dir, timing=timing)

    def close(self) -> None:
        if self._inner is not None:
            self._inner.close()
            self._inner = None
