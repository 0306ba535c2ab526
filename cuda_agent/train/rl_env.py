"""The environment for online RL: reset(task) -> first observation; step(tool call) ->
observation, reward, done. A thin episode wrapper over cuda_agent.environment.Environment, the
object the agent loop drives: the same workspace, tools, harness and reward, no second dispatch.

Rewards: the episode's is the milestone reward of the best correct version found in it (-1 when
none), as the paper scores a task, given on the step that ends the episode (`finish`, or the step
limit). Before it, a step's reward is shaping: the milestone reward of the version a `verify` or
`benchmark` step evaluated, None for other tools. The paper's setting uses only the final one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cuda_agent.task import Task
from cuda_agent.tools.settings import ToolSettings


@dataclass
class Step:
    observation: str
    reward: int | None  # on the last step: the episode's reward; before it: shaping (see the module doc)
    done: bool
    info: dict[str, Any]


class KernelEnv:
    def __init__(
        self, runs_dir: Path, *, eval_config=None, max_steps: int = 150, tool_settings: ToolSettings | None = None
    ):
        self.runs_dir, self.eval_config, self.max_steps = Path(runs_dir), eval_config, max_steps
        self.tool_settings = tool_settings
        self.env = None
        self.steps = 0

    def reset(self, task: Task) -> list[dict]:
        """A fresh workspace for `task`; the first observation: the system and task messages the loop starts from."""
        from cuda_agent.agent.limits import AgentConfig
        from cuda_agent.agent.prompts import env_task_message, system_message
        from cuda_agent.environment import Environment

        self.close()
        self.env = Environment.create(
            task, runs_dir=self.runs_dir, eval_config=self.eval_config, tool_settings=self.tool_settings
        )
        self.steps = 0
        user = env_task_message(self.env, AgentConfig(max_steps=self.max_steps).model_dump())  # as the loop words it
        return [{"role": "system", "content": system_message(native_tools=True)}, {"role": "user", "content": user}]

    def tools(self) -> list[dict]:
        return self._env().tool_schemas()

    def step(self, name: str, arguments: str | dict) -> Step:
        env = self._env()
        self.steps += 1
        out = env.step(name, arguments)
        done = out.done or self.steps >= self.max_steps
        reward = env.episode_reward() if done else out.reward
        return Step(
            observation=out.result.observation,
            reward=reward,
            done=done,
            info={
                "status": out.result.status,
                "version": out.result.version.version if out.result.version else None,
                "version_reward": out.reward,
                "workspace": str(env.workspace.root),
            },
        )

    def episode_reward(self) -> int:
        return self._env().episode_reward()

    def close(self) -> None:
        if self.env is not None:
            self.env.close()
            self.env = None

    def _env(self):
        if self.env is None:
            raise RuntimeError("call reset(task) first: no episode is running")
        return self.env
