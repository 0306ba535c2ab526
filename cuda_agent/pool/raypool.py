"""The Ray pool (`--ray`): Ray places each task's process on a node and a GPU, so this side has
little to do. A task is a Ray task asking for `1 / slots_per_device` of a GPU (none on CPU): at
most `--evals-per-gpu` tasks, and so evaluations (a task evaluates one candidate at a time), share
a GPU, as the local pool's slots allow. Ray sets CUDA_VISIBLE_DEVICES for it, so the task runs on
`cuda:0`; the harness's timing lock maps that back to the physical GPU (device_lock.nvml_index),
so timing stays serialised per GPU on every node. No slot files: the lock folder is on the shared
file system, where `cuda0` would name a different GPU on each node.

No ray import here: the evaluator side runs in the task's process, which needs no Ray."""

from __future__ import annotations

from contextlib import nullcontext

from .base import EvaluatorPool


class RayPool(EvaluatorPool):
    def place(self) -> str:
        return self.spec.devices[0]  # "cuda:0" or "cpu": the node and the GPU are Ray's choice

    def release(self, device: str) -> None:
        pass

    def slot(self, device: str):
        return nullcontext()  # the task's share of the GPU is its slot

    def task_resources(self) -> dict[str, float]:
        """What each task asks Ray for."""
        gpu = self.spec.devices[0].startswith("cuda")
        return {"num_cpus": 1, "num_gpus": 1 / self.spec.slots_per_device if gpu else 0}
