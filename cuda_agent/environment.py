"""One Environment: a workspace, the tools, the evaluator and the reward; the agent loop and the RL
glue drive it (`step(tool, args)` -> observation, reward, done). Observations come back with
credentials redacted (cuda_agent/secrets.py). The reference is built from the workspace's first
commit, never from its work tree, so nothing the model edits can change what it is judged against.
"""

from __future__ import annotations

import contextlib
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuda_agent.eval.reference import write_private
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.secrets import Redactor
from cuda_agent.task import Task, TaskError, load_task, source_digest
from cuda_agent.tools.base import TaskCopy, ToolContext, ToolResult
from cuda_agent.tools.registry import default_tools, dispatch, schemas
from cuda_agent.tools.settings import ToolSettings
from cuda_agent.workspace import Workspace


@dataclass
class StepResult:
    result: ToolResult
    reward: int | None  # the milestone reward when this step evaluated a version, else None
    done: bool  # the model called finish
    unscorable: str | None = None  # the task itself cannot be scored (its own code failed): the run stops


class Environment(contextlib.AbstractContextManager):
    def __init__(
        self, workspace: Workspace, eval_config: EvalConfig | None = None, tool_settings: ToolSettings | None = None
    ):
        self.workspace = workspace
        self.eval_config = eval_config or EvalConfig()
        self.tool_settings = tool_settings or ToolSettings()
        self.tools = default_tools(self.tool_settings)
        # every observation leaves without credentials (cuda_agent/secrets.py); the loop adds its model's keys
        self.redactor = Redactor()
        self._reference_dir: tempfile.TemporaryDirectory | None = None
        self._reference: Task | None = None
        record = workspace.record.task
        # the profile and sanitize tools run the reference task from this private copy
        copy = TaskCopy(ref=f"{self.reference_task().path}::{record.class_name}", hash=record.source_hash)
        self.ctx = ToolContext(
            workspace,
            evaluator_factory=self._make_evaluator,
            tools=self.tool_settings,
            eval=self.eval_config,
            task_copy=copy,
            redact=self.redactor.text,
        )

    @classmethod
    def create(cls, task: Task, runs_dir: Path = Path("runs"), **kw) -> Environment:
        return cls(Workspace.create(task, runs_dir=runs_dir), **kw)

    def add_secrets(self, *values) -> None:
        """More values to keep out of observations: plain strings or (name, value) pairs."""
        self.redactor.add(*values)

    def tool_schemas(self) -> list[dict]:
        return schemas(self.tools)

    def step(self, name: str, args: Any) -> StepResult:
        result = dispatch(self.tools, name, args, self.ctx)  # observations redacted there, before bounding
        v = result.verdict
        return StepResult(
            result=result,
            reward=v.reward if v else None,
            done=bool(result.data.get("finished")),
            unscorable=v.error or "unscorable" if v and v.status == "unscorable" else None,
        )

    def episode_reward(self) -> int:
        """The paper's task score: the reward of the best correct version found, -1 if none, as the
        harness's verdict ledger records it (never the commits' trailers or `best` ref: the model's shell
        can write those). KernelEnv's and verl's episode rewards are this."""
        best = self.workspace.best()
        return best.reward if best is not None else -1

    def reference_task(self) -> Task:
        """The task as the workspace was created with it, from its first commit (a private copy),
        loaded once per run: the prompt, every evaluator and the profilers share it."""
        if self._reference is not None:
            return self._reference
        ws = self.workspace
        if self._reference_dir is None:
            self._reference_dir = tempfile.TemporaryDirectory(prefix="cuda-agent-ref-")
        folder = Path(self._reference_dir.name)
        root = ws.history.root_commit()
        source = ws.history.show(root, "model.py")
        sidecar = ws.history.show(root, "model.inputs.py") if ws.record.task.inputs_path else None
        # checked before anything runs: the workspace's git objects are within the model's reach
        if source_digest(ws.record.task.class_name, source, sidecar) != ws.record.task.source_hash:
            raise TaskError(
                "the workspace's first commit does not hold the task it was made for; "
                "make a new workspace from the task file"
            )
        write_private(folder / "model.py", source)
        inputs = None if sidecar is None else folder / "model.inputs.py"
        if inputs is not None and sidecar is not None:
            write_private(inputs, sidecar)
        self._reference = load_task(
            f"{folder / 'model.py'}::{ws.record.task.class_name}",
            inputs=inputs,
            module_name="cuda_agent_task_env",
            expected_hash=ws.record.task.source_hash,
        )
        return self._reference

    def _make_evaluator(self):
        from cuda_agent.eval.evaluator import Evaluator

        return Evaluator(self.reference_task(), self.eval_config)

    def close(self) -> None:
        self.ctx.close()
        self.workspace.release()
        if self._reference_dir is not None:
            self._reference_dir.cleanup()
            self._reference_dir = None
            self._reference = None

    def __exit__(self, *exc) -> None:
        self.close()
