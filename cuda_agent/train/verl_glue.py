"""verl's multi-turn rollout over our environment (docs/training.md): our tools as verl tools, and
the `cuda_agent` agent loop, which owns one episode (train/episodes.py) per rollout and scores it
with the paper's reward. This module imports verl; nothing else in cuda_agent does at import time
(verl_config only inside its functions), so cuda-agent works without the `[train]` extra.

How verl drives it: its AgentLoopWorker (a Ray actor) loads the tools from
`rollout.multi_turn.tool_config_path` (one CudaAgentTool per tool of ours) and the agent loops
from `rollout.agent.agent_loop_config_path` (our `cuda_agent` entry, with the episode settings),
then, for each row whose agent_name is `cuda_agent`, makes a CudaAgentLoop and awaits run().

Rewards: the rollout's reward_score is the episode's: the milestone reward of the best correct
version the run's verdict ledger records (never git trailers), -1 when none, read when the
rollout ends however it ended (finish, no more tool calls, the turn limit, the context filled
up). verl puts it on the last response token. A tool call's own reward (the version it
evaluated) is shaping only: it goes to extra_fields["tool_rewards"], as verl's ToolAgentLoop
does, and PPO does not see it.
"""

from __future__ import annotations

import json
import time
from typing import Any
from uuid import uuid4

from omegaconf import DictConfig, OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopMetrics, AgentLoopOutput, register
from verl.experimental.agent_loop.tool_parser import FunctionCall, ToolParser
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse

from cuda_agent.tools.base import bound
from cuda_agent.train.episodes import EpisodeSettings, open_episode
from cuda_agent.train.verl_config import tool_entries, tool_schema_for_verl
from cuda_agent.train.verl_data import AGENT_NAME

EPISODE_KEY = "episode_id"  # the create_kwargs key that names the episode a tool call belongs to

# The episodes of this process (one agent-loop worker), by the id the agent loop gives each rollout.
# verl makes one object per tool per worker and creates and releases an *instance* around every
# single call (ToolAgentLoop._call_tool: create(create_kwargs=row's tools_kwargs[name]), execute,
# release), so the workspace cannot live in a tool instance. It lives in the episode, which the
# agent loop opens when a rollout starts and closes when it ends; the loop puts the episode's id
# into create_kwargs beside the row's own (the task hash). verl's request_id is not the key: with
# rollout.full_determinism it is "det-<priority>", the same for different rollouts.
_episodes: dict[str, Any] = {}


def open_episode_for(settings: EpisodeSettings) -> str:
    """Open an episode (not yet reset) and return its id."""
    episode_id = uuid4().hex
    _episodes[episode_id] = open_episode(settings)
    return episode_id


def episode(episode_id: str):
    return _episodes[episode_id]


async def close_episode(episode_id: str) -> None:
    ep = _episodes.pop(episode_id, None)
    if ep is not None:
        await ep.close()


def verl_tool_schema(schema: dict) -> OpenAIFunctionToolSchema:
    """Our tool schema as verl's OpenAIFunctionToolSchema (verl_config.tool_schema_for_verl says what changes)."""
    return OpenAIFunctionToolSchema.model_validate(tool_schema_for_verl(schema))


class CudaAgentTool(BaseTool):
    """One of our tools (the one its schema names) as a verl native tool; a call runs through the
    episode's KernelEnv, the same dispatch as the cuda-agent loop."""

    def __init__(self, config: dict, tool_schema: OpenAIFunctionToolSchema | None = None):
        if tool_schema is None:  # a tools yaml may name the tool in config instead of giving its schema
            tool_schema = OpenAIFunctionToolSchema.model_validate(_verl_schema(config["name"]))
        super().__init__(config, tool_schema)
        self._instances: dict[str, str] = {}  # instance id -> episode id

    async def create(self, instance_id: str | None = None, **kwargs) -> tuple[str, ToolResponse]:
        episode_id = (kwargs.get("create_kwargs") or {}).get(EPISODE_KEY)
        if episode_id not in _episodes:
            raise RuntimeError(
                f"{self.name}: no cuda-agent episode {episode_id!r} in this process; these tools run "
                f"under agent_name {AGENT_NAME!r}, the agent loop that keeps the episode's workspace"
            )
        instance_id = instance_id or uuid4().hex
        self._instances[instance_id] = episode_id
        return instance_id, ToolResponse()

    async def execute(
        self, instance_id: str, parameters: dict[str, Any] | str, **kwargs
    ) -> tuple[ToolResponse, float | None, dict]:
        """The observation; the reward of the version this call evaluated (None when it evaluated
        none: shaping only, see the module doc); status, version and whether the episode ended."""
        step = await self._episode(instance_id).call("step", self.name, parameters)
        reward = step.info.get("version_reward")
        return (
            ToolResponse(text=step.observation),
            float(reward) if reward is not None else None,
            {"status": step.info.get("status"), "version": step.info.get("version"), "done": step.done},
        )

    async def calc_reward(self, instance_id: str, **kwargs) -> float:
        """The episode's reward so far, from the run's verdict ledger: best correct version, -1 if none."""
        return float(await self._episode(instance_id).call("episode_reward"))

    async def release(self, instance_id: str, **kwargs) -> None:
        self._instances.pop(instance_id, None)  # the episode lives on: the agent loop closes it

    def _episode(self, instance_id: str):
        if instance_id not in self._instances:
            raise RuntimeError(f"{self.name}: unknown tool instance {instance_id!r} (released, or never created)")
        return episode(self._instances[instance_id])


_registry_tools: dict[str, CudaAgentTool] = {}  # made from our registry when verl hands the loop none


def _verl_schema(name: str) -> dict:
    found = [
        e["tool_schema"]
        for e in tool_entries(EpisodeSettings(allow_shell=True))
        if e["tool_schema"]["function"]["name"] == name
    ]
    if not found:
        raise ValueError(f"cuda-agent has no tool named {name!r}")
    return found[0]


@register(AGENT_NAME)
class CudaAgentLoop(AgentLoopBase):
    """generate -> parse tool calls (verl's parser for rollout.multi_turn.format) -> run them in
    order through the tools -> append the observations -> generate ..., until the model calls no
    tool, calls finish (or the episode's step limit ends it), max_assistant_turns, or the response
    budget (rollout.response_length) is used up. Calls of one turn run one after another: they edit
    one workspace. The prompt is the episode's first observation (KernelEnv.reset: the system and
    task messages of the cuda-agent loop, with this episode's device and limits), not the row's."""

    def __init__(self, *args, tools=None, episodes: dict | DictConfig | None = None, **kwargs):
        kwargs.pop("name", None)  # the agent-loop config entry's own name, handed back by hydra
        super().__init__(*args, **kwargs)
        self.settings = EpisodeSettings.model_validate(_plain(episodes) or {})
        multi_turn = self.rollout_config.multi_turn
        self.max_turns = multi_turn.max_assistant_turns or self.settings.max_steps
        self.max_tool_response_length = multi_turn.max_tool_response_length
        self.response_length = self.rollout_config.response_length
        self.tool_parser = ToolParser.get_tool_parser(multi_turn.format, self.tokenizer)
        self.tools = {t.name: t for t in (tools.tools if tools is not None else []) if isinstance(t, CudaAgentTool)}

    async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
        extra_info = _plain(kwargs.get("extra_info")) or {}
        create_kwargs = {
            name: (_plain(v) or {}).get("create_kwargs") or {}
            for name, v in (_plain(kwargs.get("tools_kwargs")) or {}).items()
        }
        episode_id = open_episode_for(self.settings)
        try:
            return await self._rollout(episode_id, extra_info, create_kwargs, sampling_params)
        finally:
            await close_episode(episode_id)

    async def _rollout(
        self, episode_id: str, extra_info: dict, create_kwargs: dict, sampling_params: dict
    ) -> AgentLoopOutput:
        ep = episode(episode_id)
        messages = await ep.call("reset", extra_info)
        schemas = await ep.call("tools")
        self._ensure_tools(schemas)
        verl_schemas = [self.tools[s["function"]["name"]].tool_schema for s in schemas]
        ids = await self.ct_build_initial_tokens(messages, tools=schemas)
        mask: list[int] = []
        logprobs: list[float] | None = None
        tool_rewards: list[float] = []
        assistant_turns = tool_turns = 0
        timing = {"generate_sequences": 0.0, "tool_calls": 0.0}
        params = self._with_stop_tokens(sampling_params)
        while True:
            t0 = time.perf_counter()
            out = await self.server_manager.generate(request_id=episode_id, prompt_ids=ids, sampling_params=params)
            timing["generate_sequences"] += time.perf_counter() - t0
            assistant_turns += 1
            if out.log_probs and logprobs is None:
                logprobs = [0.0] * len(mask)  # logprobs from here on; the tokens before carry none
            merged, mask, logprobs = await self.ct_merge_assistant_token(
                ids, out.token_ids, mask, logprobs, assistant_logprobs=out.log_probs or None
            )
            ids = merged.token_ids
            if len(mask) >= self.response_length or assistant_turns >= self.max_turns:
                break
            content, calls = await self.tool_parser.extract_tool_calls(out.token_ids, verl_schemas)
            messages.append(_assistant_message(content, calls))
            if not calls:
                break
            before = list(messages)
            t0 = time.perf_counter()
            done = await self._run_calls(calls, episode_id, create_kwargs, messages, tool_rewards)
            timing["tool_calls"] += time.perf_counter() - t0
            if done:  # finish, or the step limit: the model is not asked again
                break
            merged, new_mask, new_logprobs = await self.ct_merge_context_msg(
                before, messages, ids, mask, logprobs, tools=schemas
            )
            if len(new_mask) >= self.response_length:
                break  # the observations do not fit: the rollout ends before them, as verl's own loop does
            ids, mask, logprobs = merged.token_ids, new_mask, new_logprobs
            tool_turns += 1
        reward = await ep.call("episode_reward")
        split = len(ids) - len(mask)  # the mask covers the response (the builder may trim at a junction)
        cut = self.response_length
        return AgentLoopOutput(
            prompt_ids=ids[:split],
            response_ids=ids[split:][:cut],
            response_mask=mask[:cut],
            response_logprobs=logprobs[:cut] if logprobs is not None else None,
            reward_score=float(reward),
            num_turns=1 + assistant_turns + tool_turns,  # the prompt, each generation, each round of observations
            metrics=AgentLoopMetrics(**timing),
            extra_fields={
                "turn_scores": [],
                "tool_rewards": tool_rewards,
                "cuda_agent": {
                    "episode_reward": reward,
                    "assistant_turns": assistant_turns,
                    "task_hash": extra_info.get("task_hash"),
                },
            },
        )

    async def _run_calls(
        self,
        calls: list[FunctionCall],
        episode_id: str,
        create_kwargs: dict,
        messages: list[dict],
        tool_rewards: list[float],
    ) -> bool:
        """Run a turn's calls in order, appending each observation; True when one ended the episode."""
        for call in calls:
            text, reward, done = await self._call_tool(call, episode_id, create_kwargs)
            if reward is not None:
                tool_rewards.append(reward)
            messages.append(
                {"role": "tool", "content": text, **({"tool_call_id": call.tool_call_id} if call.tool_call_id else {})}
            )
            if done:
                return True
        return False

    async def _call_tool(
        self, call: FunctionCall, episode_id: str, create_kwargs: dict
    ) -> tuple[str, float | None, bool]:
        """Run one call through its tool's verl lifecycle (create, execute, release); a name the
        tools do not know goes to the environment, which answers with the list of tools."""
        arguments = _parsed(call.arguments)
        tool = self.tools.get(call.name)
        if tool is None:
            step = await episode(episode_id).call("step", call.name, arguments)
            return self._bound(step.observation), None, step.done
        instance_id, _ = await tool.create(create_kwargs={**create_kwargs.get(call.name, {}), EPISODE_KEY: episode_id})
        try:
            response, reward, info = await tool.execute(instance_id, arguments)
        finally:
            await tool.release(instance_id)
        return self._bound(response.text or ""), reward, bool(info.get("done"))

    def _bound(self, text: str) -> str:
        limit = self.max_tool_response_length
        return bound(text, limit) if limit and limit > 0 else text

    def _ensure_tools(self, schemas: list[dict]) -> None:
        """verl hands the loop the tools of tool_config_path; any tool of the episode it did not
        hand over is made here from the episode's schema (once per process)."""
        for s in schemas:
            name = s["function"]["name"]
            if name not in self.tools:
                if name not in _registry_tools:
                    _registry_tools[name] = CudaAgentTool({"type": "native"}, verl_tool_schema(s))
                self.tools[name] = _registry_tools[name]

    def _with_stop_tokens(self, sampling_params: dict[str, Any]) -> dict[str, Any]:
        """Stop after a tool call where the parser needs it (models that do not end the turn there)."""
        extra = self.tool_parser.stop_token_ids
        if not extra:
            return sampling_params
        return {
            **sampling_params,
            "stop_token_ids": sorted(set(sampling_params.get("stop_token_ids") or []) | set(extra)),
        }


def _assistant_message(content: str, calls: list[FunctionCall]) -> dict[str, Any]:
    """The turn as a chat message; arguments as an object where they parse (chat templates render them)."""
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if calls:
        message["tool_calls"] = [
            {
                "type": "function",
                "function": {"name": c.name, "arguments": _parsed(c.arguments)},
                **({"id": c.tool_call_id} if c.tool_call_id else {}),
            }
            for c in calls
        ]
    return message


def _parsed(arguments: str) -> Any:
    """JSON arguments as an object; others as written (the environment explains what is wrong with them)."""
    try:
        return json.loads(arguments)
    except (json.JSONDecodeError, TypeError):
        return arguments


def _plain(value: Any) -> Any:
    """A dataset field as plain Python (rows arrive as numpy objects or DictConfig)."""
    if isinstance(value, DictConfig):
        return OmegaConf.to_container(value, resolve=True)
    if hasattr(value, "item") and getattr(value, "shape", None) == ():
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    return value
