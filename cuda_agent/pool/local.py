"""The local pool: tasks spread over this machine's GPUs (least loaded first); each task's
evaluations run on its GPU through the harness's own Evaluator (fresh worker process per
candidate), at most `slots_per_device` at once per GPU. Builds and correctness checks of different
tasks overlap; timing is serialised per GPU by the harness's device lock."""

from __future__ import annotations

import threading
from pathlib import Path

from .base import EvaluatorPool
from .slots import hold_slot


class LocalPool(EvaluatorPool):
    def __init__(self, spec):
        super().__init__(spec)
        self._load = {d: 0 for d in spec.devices}
        self._lock = threading.Lock()

    def place(self) -> str:
        with self._lock:  # ties go to the first device listed
            device = min(self.spec.devices, key=lambda d: self._load[d])
            self._load[device] += 1
            return device

    def release(self, device: str) -> None:
        with self._lock:
            self._load[device] = max(0, self._load.get(device, 0) - 1)

    def slot(self, device: str):
        return hold_slot(Path(self.spec.lock_dir), device, self.spec.slots_per_device)
