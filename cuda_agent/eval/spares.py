"""The Evaluator's jailed processes: recorders and judges, started ahead of need.

A recorder or judge takes 4-7 s to start (the torch import), longer than an agent's step, so
more than one of each kind waits; taking one starts its replacement at once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from cuda_agent.eval.channel import ChildError, JailedChild
from cuda_agent.eval.reference import verify_snapshot
from cuda_agent.eval.scratch import private_dir
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.jail import Jail
from cuda_agent.task import Task

# keep: cfg.spares of each kind started now and replaced when taken (many evaluations: an agent run);
# first: one of each started now, so it starts beside the reference and the build, none after (one
# evaluation: `eval`, a batch's eval-only task, re-verification, where a spare starting during the
# timing would disturb it); none: each started when taken (baselines, which judge no candidate).
Ahead = Literal["keep", "first", "none"]


def judge_jail(scratch: Path, readable: list[Path], *, gpu: bool, quota: int, enabled: bool = True) -> Jail:
    """The judge's jail (its GPU's device nodes where gpu): writes its scratch folder only, up to `quota`
    bytes; reads the task copy and the build. The jail tests attack this one too."""
    return Jail(
        writable=[scratch],
        readable=readable,
        gpu=gpu,
        cwd=scratch,
        enabled=enabled,
        quota={scratch: quota},
        file_size=quota,
    )


class Spares:
    """Processes per kind ("judge", "recorder"), started ahead of need as `ahead` says."""

    def __init__(self, task: Task, cfg: EvalConfig, cache_dir: Path, *, ahead: Ahead):
        self.task, self.cfg, self.cache_dir = task, cfg, cache_dir
        self.device = cfg.device
        self.cuda = self.device.startswith("cuda")
        self.refill = ahead == "keep"
        self.waiting: dict[str, list[JailedChild]] = {"judge": [], "recorder": []}
        keep = cfg.spares if cfg.spares is not None else (2 if self.cuda else 1)
        for _ in range({"keep": keep, "first": 1, "none": 0}[ahead]):
            for kind in self.waiting:
                self.waiting[kind].append(self.start(kind))

    def start(self, kind: str) -> JailedChild:
        scratch = private_dir(kind)
        quota = int(self.cfg.scratch_gib * 2**30)  # host disk: watched, and no one file larger
        if kind == "recorder":
            jail = Jail(
                writable=[scratch],
                cwd=scratch,
                address_space=32 << 30,
                enabled=self.cfg.sandbox,
                quota={scratch: quota},
                file_size=quota,
            )
            return JailedChild("cuda_agent.eval.recorder", [], jail, scratch)
        verify_snapshot(self.task)  # the judge loads the copy again: it must still be what was hashed
        jail = judge_jail(
            scratch,
            [self.task.path.parent, self.cache_dir / "build"],
            gpu=self.cuda,
            quota=quota,
            enabled=self.cfg.sandbox,
        )
        args = [
            "--device",
            self.device,
            "--task",
            f"{self.task.path}::{self.task.class_name}",
            "--init-seed",
            str(self.cfg.init_seed),
            "--task-hash",
            self.task.source_hash,
        ]
        if self.task.inputs_path:
            args += ["--inputs", str(self.task.inputs_path)]
        if self.cfg.trace_kernels:
            args += ["--trace"]
        return JailedChild("cuda_agent.eval.judge", args, jail, scratch, handover=True)

    def take(self, kind: str) -> JailedChild:
        """The longest-waiting process; with refill a new one starts now, ready by a later evaluation."""
        queue = self.waiting[kind]
        child = queue.pop(0) if queue else None
        if self.refill:
            queue.append(self.start(kind))
        if child is None or not child.alive():
            if child is not None:
                child.kill()
            child = self.start(kind)
        return child

    def top_up(self) -> None:
        """One of each kind waiting again, started now and waited for: between evaluations (the warm
        eval server, after it answered), so that none is starting during the next one's timing."""
        for kind, queue in self.waiting.items():
            if not any(child.alive() for child in queue):
                queue.append(self.start(kind))
        for queue in self.waiting.values():
            for child in queue:
                try:
                    child.wait_ready()
                except ChildError:
                    pass  # killed: take() starts another in its place

    def close(self) -> None:
        for queue in self.waiting.values():
            while queue:
                queue.pop().close()
