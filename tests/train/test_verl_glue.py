"""The verl glue (cuda_agent/train/verl_glue.py) driven through verl 0.9.1's own classes on CPU:
our BaseTool subclass through the create/execute/calc_reward/release sequence of a rollout, the
`cuda_agent` agent loop's run() against a scripted LLM server and a real tokenizer, and verl's own
AgentLoopWorker running our loop from the files `train ppo` writes. Rewards come from the
workspace's state and equal what `cuda-agent eval` gives the same candidates."""

import asyncio
import json
from pathlib import Path

import pytest

pytest.importorskip("verl")

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput  # noqa: E402
from verl.tools.schemas import OpenAIFunctionToolSchema  # noqa: E402
from verl.workers.rollout.replica import TokenOutput  # noqa: E402
from verl_fixtures import (
    TASK,
    candidate_files,
    cpu_parquet,
    cpu_row,
    eval_rewards,
    eval_settings,  # noqa: E402,F401
    slow_honest,
    tiny_model,
    tokenizer,
)

from cuda_agent.train import verl_glue  # noqa: E402
from cuda_agent.train.episodes import EpisodeSettings  # noqa: E402
from cuda_agent.train.ppo_config import PPOConfig  # noqa: E402
from cuda_agent.train.verl_config import tool_schema_for_verl, write_run  # noqa: E402


def episode_settings(root: Path, **kw) -> EpisodeSettings:
    return EpisodeSettings.model_validate(
        {
            "runs_dir": str(root / "rl-runs"),
            "pool": "local",
            "max_steps": 40,
            "eval": eval_settings(root / "cache"),
            **kw,
        }
    )


def create_kwargs(row: dict, name: str, episode_id: str) -> dict:
    """What the agent loop hands a tool's create(): the row's own create_kwargs and the episode."""
    return {**row["extra_info"]["tools_kwargs"][name]["create_kwargs"], verl_glue.EPISODE_KEY: episode_id}


async def call(tools: dict, row: dict, episode_id: str, name: str, args: dict):
    """One tool call as a verl rollout makes it: create, execute, release."""
    tool = tools[name]
    instance, _ = await tool.create(create_kwargs=create_kwargs(row, name, episode_id))
    try:
        return await tool.execute(instance, args)
    finally:
        await tool.release(instance)


async def reward_now(tools: dict, row: dict, episode_id: str) -> float:
    instance, _ = await tools["finish"].create(create_kwargs=create_kwargs(row, "finish", episode_id))
    try:
        return await tools["finish"].calc_reward(instance)
    finally:
        await tools["finish"].release(instance)


def put_calls(candidate: Path) -> list[dict]:
    return [
        {"mode": "create", "path": p, "overwrite": True, "file_text": text}
        for p, text in candidate_files(candidate).items()
    ]


def test_tools_through_a_rollouts_calls_score_like_cuda_agent_eval(tmp_path, cpu_row, eval_rewards):
    async def rollout():
        episode_id = verl_glue.open_episode_for(episode_settings(tmp_path))
        ep = verl_glue.episode(episode_id)
        first = await ep.call("reset", cpu_row["extra_info"])
        assert [m["role"] for m in first] == ["system", "user"] and "class Model" in first[1]["content"]
        schemas = await ep.call("tools")
        tools = {
            s["function"]["name"]: verl_glue.CudaAgentTool(
                {"type": "native"}, OpenAIFunctionToolSchema.model_validate(tool_schema_for_verl(s))
            )
            for s in schemas
        }
        assert {"edit_file", "compile", "verify", "benchmark", "finish"} <= set(tools)
        assert await reward_now(tools, cpu_row, episode_id) == -1.0  # nothing evaluated yet

        for args in put_calls(TASK / "wrong"):
            resp, reward, info = await call(tools, cpu_row, episode_id, "edit_file", args)
            assert info["status"] == "ok" and reward is None and not info["done"], resp.text
        resp, wrong, info = await call(tools, cpu_row, episode_id, "benchmark", {})
        assert (wrong, info["version"]) == (-1.0, 1) and wrong == eval_rewards["wrong"]
        assert await reward_now(tools, cpu_row, episode_id) == -1.0

        for args in put_calls(slow_honest(tmp_path)):
            await call(tools, cpu_row, episode_id, "edit_file", args)
        resp, honest, info = await call(tools, cpu_row, episode_id, "benchmark", {})
        assert (honest, info["version"]) == (1.0, 2) and honest == eval_rewards["slow"], resp.text
        assert await reward_now(tools, cpu_row, episode_id) == 1.0  # the best version, read from the workspace

        resp, _, info = await call(tools, cpu_row, episode_id, "finish", {"summary": "host loop"})
        assert info["done"] and await reward_now(tools, cpu_row, episode_id) == 1.0
        workspace = Path(await ep.call("workspace"))
        assert workspace.is_dir() and len(list((workspace.parent / "workspace.git").iterdir())) > 0

        with pytest.raises(RuntimeError, match="unknown tool instance"):  # a released instance is gone
            await tools["verify"].execute("released-or-never-made", {})
        with pytest.raises(RuntimeError, match="agent_name 'cuda_agent'"):  # verl's stock tool_agent has no episode
            await tools["verify"].create(create_kwargs=cpu_row["extra_info"]["tools_kwargs"]["verify"]["create_kwargs"])
        await verl_glue.close_episode(episode_id)
        assert not workspace.parent.exists() and episode_id not in verl_glue._episodes  # run folder removed

    asyncio.run(rollout())


# -- the agent loop ----------------------------------------------------------------------------


class ScriptedServer:
    """verl's LLM server client interface (generate -> TokenOutput), answering scripted turns."""

    def __init__(self, tokenizer, turns: list[str]):
        self.turns = [tokenizer.encode(t, add_special_tokens=False) for t in turns]
        self.requests: list[tuple[str, list[int]]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        self.requests.append((request_id, list(prompt_ids)))
        ids = self.turns.pop(0)
        return TokenOutput(token_ids=ids, log_probs=[-0.5] * len(ids), stop_reason="completed")


def turn(*calls: tuple[str, dict], text: str = "") -> str:
    """A model turn in the hermes format (Qwen's <tool_call>), ended as SmolLM2 ends a turn."""
    return (
        text
        + "".join(f"<tool_call>\n{json.dumps({'name': n, 'arguments': a})}\n</tool_call>" for n, a in calls)
        + "<|im_end|>"
    )


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory, tiny_model, cpu_parquet):
    """The files `cuda-agent train ppo` writes, for episodes on CPU, and verl's config composed from them."""
    from cuda_agent.train.verl_config import compose_written

    root = tmp_path_factory.mktemp("ppo")
    cfg = PPOConfig(
        model=str(tiny_model),
        train_files=[str(cpu_parquet)],
        nnodes=1,
        gpus_per_node=1,
        batch_size=1,
        context_length=32768,
        prompt_length=12288,
        episodes=episode_settings(root),
    )
    run = write_run(cfg, root / "verl")
    return run, compose_written(run.out)


def make_loop(config, tokenizer, *, tools=True):
    """CudaAgentLoop made as verl's AgentLoopWorker makes an agent loop: the registry entry from the
    agent-loop config file, hydra's instantiate, the tools from the tool config file."""
    import hydra
    from omegaconf import OmegaConf
    from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
    from verl.tools.tool_registry import load_all_tools
    from verl.utils.dataset.rl_dataset import RLHFDataset

    (entry,) = OmegaConf.load(config.actor_rollout_ref.rollout.agent.agent_loop_config_path)
    assert entry.name == "cuda_agent"
    loaded = load_all_tools(config.actor_rollout_ref.rollout.multi_turn.tool_config_path, None) if tools else []
    server = ScriptedServer(tokenizer, [])
    loop = hydra.utils.instantiate(
        config=entry,
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        hf_model_type=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        tools=ToolListWrap(loaded),
    )
    assert isinstance(loop, verl_glue.CudaAgentLoop) and (not tools or set(loop.tools) >= {"verify", "finish"})
    return loop, server


def row_kwargs(row: dict) -> dict:
    """The dataset fields an agent loop's run() gets (RLHFDataset: raw_prompt, extra_info, tools_kwargs, ...)."""
    return {
        "raw_prompt": row["prompt"],
        "extra_info": row["extra_info"],
        "tools_kwargs": row["extra_info"]["tools_kwargs"],
        "index": 0,
        "data_source": row["data_source"],
        "reward_model": row["reward_model"],
    }


def test_agent_loop_run_scores_the_best_version_and_masks_only_model_tokens(verl_run, tokenizer, cpu_row):
    run, config = verl_run
    wrong = candidate_files(TASK / "wrong")
    turns = [
        turn(
            (
                "edit_file",
                {"mode": "create", "path": "model_new.py", "overwrite": True, "file_text": wrong["model_new.py"]},
            ),
            (
                "edit_file",
                {
                    "mode": "create",
                    "path": "kernels/scale_add.cu",
                    "overwrite": True,
                    "file_text": wrong["kernels/scale_add.cu"],
                },
            ),
            text="Write the wrapper and the kernel.",
        ),
        turn(("verify", {})),
        turn(
            ("edit_file", {"mode": "replace", "path": "kernels/scale_add.cu", "old_str": "- y[i]", "new_str": "+ y[i]"})
        ),
        turn(("verify", {})),
        turn(
            ("edit_file", {"mode": "replace", "path": "kernels/scale_add.cu", "old_str": "+ y[i]", "new_str": "- y[i]"})
        ),
        turn(("verify", {})),  # a worse version last: the episode keeps its best
        turn(("finish", {"summary": "a host loop"})),
    ]
    scripted = [tokenizer.encode(t, add_special_tokens=False) for t in turns]

    async def go():
        loop, server = make_loop(config, tokenizer)
        server.turns = [list(t) for t in scripted]
        return await loop.run({"temperature": 1.0}, **row_kwargs(cpu_row)), server

    out, server = asyncio.run(go())
    assert isinstance(out, AgentLoopOutput)
    assert out.reward_score == 1.0  # the best version (v2, correct), from the workspace's history, not the last
    assert out.extra_fields["tool_rewards"] == [-1.0, 1.0, -1.0]  # shaping: each verify's version
    assert out.num_turns == 1 + 7 + 6  # the prompt, seven generations, six rounds of observations
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)

    # the model's tokens, exactly as generated, are the mask-1 tokens, in order; the rest is observations
    model_tokens = [t for t, m in zip(out.response_ids, out.response_mask) if m == 1]
    assert model_tokens == [t for turn in scripted for t in turn]
    assert all((lp == -0.5) == (m == 1) for lp, m in zip(out.response_logprobs, out.response_mask))
    spans = "".join(str(m) for m in out.response_mask)
    assert spans.count("10") == 6 and spans.endswith("1")  # an observation span between turns; the last is the model's
    observations = tokenizer.decode([t for t, m in zip(out.response_ids, out.response_mask) if m == 0])
    assert "model_new.py" in observations and "kernels/scale_add.cu" in observations

    # one sticky request id; each request's prompt is a prefix of the final sequence (what PPO trains on)
    full = list(out.prompt_ids) + list(out.response_ids)
    assert len({rid for rid, _ in server.requests}) == 1 and len(server.requests) == 7
    assert all(full[: len(p)] == p for _, p in server.requests)
    prompt = tokenizer.decode(out.prompt_ids)  # the episode's first observation: system and task messages
    assert prompt.count("<|im_start|>") == 3 and "class Model" in prompt and prompt.endswith("<|im_start|>assistant\n")
    assert not verl_glue._episodes  # the episode was closed


def test_a_rollout_that_never_evaluates_scores_minus_one(verl_run, tokenizer, cpu_row):
    run, config = verl_run

    async def go():
        loop, server = make_loop(config, tokenizer, tools=False)  # tools made from the episode's schemas
        server.turns = [tokenizer.encode("I give up.<|im_end|>", add_special_tokens=False)]
        return await loop.run({"temperature": 1.0}, **row_kwargs(cpu_row))

    out = asyncio.run(go())
    assert out.reward_score == -1.0 and out.num_turns == 2 and set(out.response_mask) == {1}
    assert out.extra_fields["tool_rewards"] == []


def test_verls_agent_loop_worker_runs_our_loop_from_the_written_files(verl_run, tokenizer, cpu_parquet):
    """verl's own AgentLoopWorker: our agent loop and tools from the files `train ppo` wrote, a batch
    from verl's RLHFDataset over the exported parquet; the episode's reward lands in rm_scores on
    the last response token, as PPO reads it."""
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.protocol import DataProto
    from verl.utils.dataset.rl_dataset import RLHFDataset, collate_fn

    run, config = verl_run
    honest = candidate_files(TASK / "honest")
    turns = [
        turn(
            *[
                ("edit_file", {"mode": "create", "path": p, "overwrite": True, "file_text": t})
                for p, t in honest.items()
            ]
        ),
        turn(("verify", {})),
        turn(("finish", {"summary": "host loop"})),
    ]

    async def go():
        server = ScriptedServer(tokenizer, turns)
        worker = AgentLoopWorker(config, llm_client=server)
        data = RLHFDataset(data_files=config.data.train_files, tokenizer=worker.tokenizer, config=config.data)
        assert data[0]["agent_name"] == "cuda_agent"
        return await worker.generate_sequences(DataProto.from_single_dict(collate_fn([data[0]])))

    out = asyncio.run(go())
    scores, mask = out.batch["rm_scores"][0], out.batch["response_mask"][0]
    last = int(out.batch["attention_mask"][0, out.batch["prompts"].shape[1] :].sum()) - 1
    assert scores[last] == 1.0 and scores.sum() == 1.0  # the best version's reward, on the last token
    assert mask.sum() == sum(len(tokenizer.encode(t, add_special_tokens=False)) for t in turns)
    assert out.non_tensor_batch["__num_turns__"][0] == 1 + 3 + 2
    assert list(out.non_tensor_batch["tool_rewards"][0]) == [1.0]


def test_episodes_on_a_ray_pool(tmp_path, cpu_row, monkeypatch):
    """pool: ray — the episode's KernelEnv is a Ray actor (here on a private local Ray instance, CPU
    evaluations); the tools reach it through the same create/execute/release calls."""
    ray = pytest.importorskip("ray")
    from cuda_agent.pool.ray_cluster import LOCAL_RAY_ENV  # its raylet's metrics exporter can segfault at start

    for key, value in LOCAL_RAY_ENV.items():
        monkeypatch.setenv(key, value)
    ray.init(
        address="local", num_cpus=2, include_dashboard=False, log_to_driver=False
    )  # never a cluster already running
    try:

        async def go():
            episode_id = verl_glue.open_episode_for(episode_settings(tmp_path, pool="ray"))
            ep = verl_glue.episode(episode_id)
            await ep.call("reset", cpu_row["extra_info"])
            tools = {
                s["function"]["name"]: verl_glue.CudaAgentTool({"type": "native"}, verl_glue.verl_tool_schema(s))
                for s in await ep.call("tools")
            }
            for args in put_calls(TASK / "honest"):
                await call(tools, cpu_row, episode_id, "edit_file", args)
            resp, reward, info = await call(tools, cpu_row, episode_id, "verify", {})
            workspace = Path(await ep.call("workspace"))
            assert (reward, info["version"], await reward_now(tools, cpu_row, episode_id)) == (1.0, 1, 1.0), resp.text
            assert workspace.is_dir()  # on the actor's node: here the same machine
            actor = ep.actor
            await verl_glue.close_episode(episode_id)
            return workspace, actor

        workspace, actor = asyncio.run(go())
        assert not workspace.parent.exists()
        with pytest.raises(ray.exceptions.RayActorError):  # killed: its GPU share is back in the pool
            ray.get(actor.episode_reward.remote(), timeout=30)
    finally:
        ray.shutdown()
