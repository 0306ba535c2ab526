"""One RL episode of the verl glue (train/verl_glue.py): a KernelEnv for one task row of the verl
parquet, and where it runs. No verl here (and Ray only inside RayEpisode).

EpisodeHost holds the episode (the task rebuilt from the row, the workspace, the tools, the
harness), synchronously. The agent loop reaches it through an async handle, so that its worker's
event loop keeps serving other rollouts while a build or an evaluation takes seconds:
- LocalEpisode: the host in the calling process, each call in a thread (one machine whose
  agent-loop process sees a GPU, CPU tasks with `eval.device: cpu`, the tests).
- RayEpisode: the host as a Ray actor with 1/evals_per_gpu of a GPU (and as much of `ray_resource`,
  a custom resource only the evaluation nodes have). The workspace, nvcc, the harness, ncu and
  compute-sanitizer then run on an evaluation GPU, apart from the GPUs verl trains and generates
  on. Ray sets CUDA_VISIBLE_DEVICES, so the actor's device is cuda:0; the harness's timing lock
  maps that back to the physical GPU, as for `batch --ray` (pool/raypool.py).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from cuda_agent.eval.settings import EvalConfig
from cuda_agent.run_folder import RunFolder
from cuda_agent.task import DEFAULT_CLASS, Task, TaskError, load_task
from cuda_agent.tools.settings import ToolSettings


class EpisodeSettings(BaseModel):
    """What every episode of a training run gets (the agent loop's `episodes` entry in verl's
    agent-loop config, written by `cuda-agent train ppo`)."""

    model_config = ConfigDict(extra="forbid")

    runs_dir: Path = Path("rl-runs")  # episodes' run folders (workspaces) and rebuilt task files
    pool: Literal["local", "ray"] = "ray"  # where episodes and so evaluations run (module doc)
    evals_per_gpu: int = Field(4, ge=1)  # episodes sharing one evaluation GPU (ray); timing stays serialised
    ray_resource: str | None = None  # a custom Ray resource only the evaluation nodes have
    max_steps: int = Field(150, ge=1)  # tool calls per episode (KernelEnv ends the episode there)
    keep_workspaces: bool = False  # an episode's run folder is deleted when it ends, unless kept
    allow_shell: bool = False  # offer the shell tool (as `optimize --allow-shell`)
    eval: EvalConfig = Field(default_factory=EvalConfig)  # the harness settings (device, baselines, ...)

    @field_validator("eval", mode="before")
    @classmethod
    def _known_eval_keys(cls, v: Any) -> Any:
        if isinstance(v, dict):
            unknown = sorted(set(v) - set(EvalConfig.model_fields))
            if unknown:
                raise ValueError(
                    f"unknown eval setting(s) {', '.join(unknown)}; "
                    f"the settings are: {', '.join(EvalConfig.model_fields)}"
                )
        return v


def task_from_row(extra_info: dict[str, Any], tasks_dir: Path) -> Task:
    """The task a verl row names (extra_info from `cuda-agent export --format verl`), rebuilt from
    its source under tasks_dir and checked against the row's task hash."""
    missing = [k for k in ("task_source", "task_hash", "class_name") if not extra_info.get(k)]
    if missing:
        raise TaskError(
            f"the row's extra_info has no {', '.join(missing)}: make the parquet with "
            "`cuda-agent export RUNS --format verl`"
        )
    task_hash, class_name = str(extra_info["task_hash"]), str(extra_info["class_name"])
    name = str(extra_info.get("task_name") or "task")  # task.py names model.py by its folder: the row's task name
    if class_name != DEFAULT_CLASS and name.endswith(f"-{class_name}"):
        name = name[: -len(class_name) - 1]
    path = Path(tasks_dir) / _safe(task_hash) / _safe(name) / "model.py"
    if not path.is_file():  # episodes of one task may start at once: write whole or not at all
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".model.{os.getpid()}.{id(path)}.tmp")
        tmp.write_text(str(extra_info["task_source"]), encoding="utf-8")
        os.replace(tmp, path)
    task = load_task(f"{path}::{class_name}", module_name="cuda_agent_task_rl")
    if task.source_hash != task_hash:
        raise TaskError(
            f"the row's task_source does not rebuild task {task_hash} (got {task.source_hash}): a task "
            "whose inputs came from a sidecar file is not in the parquet; give it get_inputs() in its file"
        )
    return task


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name).strip(".") or "task"


class EpisodeHost:
    """One episode's KernelEnv, driven by name: reset(row's extra_info), tools(), step(name, args),
    episode_reward(), close(). Made a Ray actor as it is by RayEpisode."""

    def __init__(self, settings: EpisodeSettings):
        from cuda_agent.train.rl_env import KernelEnv

        self.settings = s = settings
        self.env = KernelEnv(
            s.runs_dir, eval_config=s.eval, max_steps=s.max_steps, tool_settings=ToolSettings(allow_shell=s.allow_shell)
        )

    def reset(self, extra_info: dict[str, Any]) -> list[dict]:
        return self.start(task_from_row(extra_info, self.settings.runs_dir / "tasks"))

    def start(self, task: Task) -> list[dict]:
        """A new episode of a task already loaded (`train grpo`: from the task folder on this machine)."""
        return self.env.reset(task)

    def tools(self) -> list[dict]:
        return self.env.tools()

    def step(self, name: str, arguments: str | dict):
        return self.env.step(name, arguments)

    def episode_reward(self) -> int:
        return self.env.episode_reward()

    def workspace(self) -> str | None:
        return str(self.env.env.workspace.root) if self.env.env is not None else None

    def close(self) -> None:
        ws = self.workspace()
        self.env.close()
        if ws is not None and not self.settings.keep_workspaces:
            shutil.rmtree(RunFolder.around(Path(ws)).path, ignore_errors=True)  # the episode's run folder


class LocalEpisode:
    """The host in this process; each call in a thread."""

    def __init__(self, settings: EpisodeSettings):
        self.host = EpisodeHost(settings)

    async def call(self, method: str, *args: Any) -> Any:
        return await asyncio.to_thread(getattr(self.host, method), *args)

    async def close(self) -> None:
        await self.call("close")


_remote_host = None  # EpisodeHost as a Ray actor class, made once per process


class RayEpisode:
    """The host as a Ray actor on the evaluation pool (module doc)."""

    def __init__(self, settings: EpisodeSettings):
        import ray

        global _remote_host
        if _remote_host is None:
            _remote_host = ray.remote(max_restarts=0)(EpisodeHost)
        share = 1 / settings.evals_per_gpu
        opts: dict[str, Any] = {"num_cpus": 1, "num_gpus": share if settings.eval.device.startswith("cuda") else 0}
        if settings.ray_resource:
            opts["resources"] = {settings.ray_resource: share}
        self.ray = ray
        self.actor = _remote_host.options(**opts).remote(settings)

    async def call(self, method: str, *args: Any) -> Any:
        return await getattr(self.actor, method).remote(*args)

    async def close(self) -> None:
        try:
            await self.call("close")
        finally:
            self.ray.kill(self.actor)  # its GPU share goes back to the pool


def open_episode(settings: EpisodeSettings) -> LocalEpisode | RayEpisode:
    return RayEpisode(settings) if settings.pool == "ray" else LocalEpisode(settings)
