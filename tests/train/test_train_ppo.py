"""`cuda-agent train ppo --config FILE`: our config -> verl's PPO configuration, checked against
verl 0.9.1's own (hydra composition of its ppo_trainer, and its validate_config where the model
is a folder here), with the paper's recipe as defaults; bad inputs are one line and exit 2."""

import subprocess

import pytest
from typer.testing import CliRunner

pytest.importorskip("verl")

from verl_fixtures import cpu_parquet, smollm2_model, tiny_model  # noqa: E402,F401

from cuda_agent.cli import app  # noqa: E402
from cuda_agent.settings import ToolSettings  # noqa: E402
from cuda_agent.tools.registry import default_tools, schemas  # noqa: E402
from cuda_agent.train.verl_config import (
    compose_written,  # noqa: E402
    model_positions,  # noqa: E402
)


def ppo(*args: str):
    return CliRunner().invoke(app, ["train", "ppo", *args])


def one_error_line(r) -> str:
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (r.exit_code, r.stderr)
    return lines[0]


def test_dry_run_writes_verls_config_with_the_papers_recipe_and_prints_the_command(tmp_path, tiny_model, cpu_parquet):
    from verl.tools.tool_registry import initialize_tools_from_config
    from verl.trainer.ppo.utils import need_critic

    config = tmp_path / "ppo.yaml"
    config.write_text(
        f"model: {tiny_model}\ntrain_files: {cpu_parquet}\nepisodes:\n  runs_dir: rl-runs\n"
        "  eval: {device: 'cuda:0', baselines: [eager, compile]}\n"
    )
    r = ppo("--config", str(config), "--dry-run")
    assert r.exit_code == 0, r.output
    out = tmp_path / "ppo-verl"
    (command,) = r.stdout.strip().splitlines()  # stdout holds the command alone
    assert command.endswith(f"-m verl.trainer.main_ppo --config-path {out} --config-name verl_ppo")
    assert "run at launch" not in r.stderr  # the model is a folder here: verl's validate_config ran and passed

    cfg = compose_written(out)  # as main_ppo composes it: verl's ppo_trainer and ours
    actor, rollout = cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.rollout
    assert cfg.data.train_batch_size == 1024 and cfg.trainer.total_training_steps == 150
    assert (actor.optim.lr, cfg.critic.optim.lr) == (3e-6, 6e-6)
    assert (actor.clip_ratio_low, actor.clip_ratio_high) == (0.2, 0.28)
    assert cfg.algorithm.adv_estimator == "gae" and need_critic(cfg) and rollout.n == 1  # PPO with a critic
    assert rollout.multi_turn.enable and rollout.multi_turn.max_assistant_turns == 150
    assert rollout.max_model_len == 131072 == cfg.data.max_prompt_length + cfg.data.max_response_length
    assert rollout.prompt_length + rollout.response_length == 131072  # verl's own interpolation of ours
    assert rollout.name == "vllm" and rollout.agent.default_agent_loop == "cuda_agent"
    assert cfg.actor_rollout_ref.model.path == cfg.critic.model.path == str(tiny_model)
    assert list(cfg.data.train_files) == [str(cpu_parquet)]
    assert cfg.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu is None  # verl's own defaults kept

    tools = initialize_tools_from_config(rollout.multi_turn.tool_config_path)  # verl's loader
    assert [t.name for t in tools] == [s["function"]["name"] for s in schemas(default_tools(ToolSettings()))]
    assert {type(t).__name__ for t in tools} == {"CudaAgentTool"}
    from omegaconf import OmegaConf

    (entry,) = OmegaConf.load(rollout.agent.agent_loop_config_path)
    assert entry._target_ == "cuda_agent.train.verl_glue.CudaAgentLoop"
    assert (
        entry.episodes.runs_dir == str(tmp_path / "rl-runs") and entry.episodes.pool == "ray"
    )  # relative to the config
    assert entry.episodes.eval == {"device": "cuda:0", "baselines": ["eager", "compile"]}


def test_a_key_verl_does_not_have_is_one_line_and_plus_adds_it(tmp_path):
    config = tmp_path / "ppo.toml"
    base = (
        'model = "Qwen/Qwen3-8B"\ntrain_files = "data/train.parquet"\nrollout = "sglang"\n'
        '[overrides]\n"actor_rollout_ref.rollout.tensor_model_parallel_size" = 4\n'
    )
    config.write_text(base + '"trainer.bogus_key" = 1\n')
    line = one_error_line(ppo("--config", str(config), "--dry-run"))
    assert "trainer.bogus_key: verl 0.9.1 has no such setting" in line and "+trainer.bogus_key" in line
    assert not (tmp_path / "ppo-verl").exists()  # nothing written for a config verl would refuse

    config.write_text(base + '"+trainer.bogus_key" = 1\n')
    r = ppo("--config", str(config), "--out", str(tmp_path / "v"), "--dry-run")
    assert r.exit_code == 0, r.output
    assert "run at launch: Qwen/Qwen3-8B is not a model folder here" in r.stderr  # a hub id: checked on the cluster
    assert "the policy's maximum positions are not checked here: Qwen/Qwen3-8B has no config.json here" in r.stderr
    cfg = compose_written(tmp_path / "v")
    assert cfg.trainer.bogus_key == 1 and cfg.actor_rollout_ref.rollout.tensor_model_parallel_size == 4
    assert cfg.actor_rollout_ref.rollout.name == "sglang" and cfg.actor_rollout_ref.model.path == "Qwen/Qwen3-8B"
    assert list(cfg.data.train_files) == [str(tmp_path / "data" / "train.parquet")]


@pytest.mark.parametrize(
    "text, says",
    [
        (None, "config file not found"),
        ("model: [\n", "not valid YAML: expected the node content"),
        ("model: m\ntrain_files: x.parquet\nbatchsize: 8\n", "batchsize: not a setting; the settings are: model,"),
        ("model: m\ntrain_files: x.parquet\nrollout: tgi\n", "rollout: Input should be 'vllm' or 'sglang'"),
        (
            "model: m\ntrain_files: x.parquet\nprompt_length: 200000\n",
            "prompt_length (200000) must be below context_length",
        ),
        ("model: m\ntrain_files: x.parquet\nepisodes: {eval: {devise: cpu}}\n", "unknown eval setting(s) devise"),
        ("- model\n", "expected a mapping of settings"),
    ],
)
def test_bad_inputs_are_one_line_and_exit_2(tmp_path, text, says):
    config = tmp_path / "ppo.yaml"
    if text is not None:
        config.write_text(text)
    assert says in one_error_line(ppo("--config", str(config), "--dry-run"))


def test_verls_own_checks_run_where_the_model_is_here_and_fail_in_one_line(tmp_path, tiny_model):
    config = tmp_path / "ppo.yaml"
    config.write_text(
        f"model: {tiny_model}\ntrain_files: t.parquet\noverrides:\n"
        "  actor_rollout_ref.actor.use_dynamic_bsz: false\n"
        "  actor_rollout_ref.actor.ppo_micro_batch_size: 2\n"
        "  actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu: 2\n"
    )
    line = one_error_line(ppo("--config", str(config), "--dry-run"))
    assert line.startswith("error: verl's checks: [actor] You have set both 'actor.ppo_micro_batch_size' AND")


def test_without_dry_run_the_printed_command_runs_and_its_exit_code_is_ours(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(subprocess, "call", lambda cmd: ran.append(cmd) or 7)  # not verl itself: it needs GPUs
    config = tmp_path / "ppo.yaml"
    config.write_text("model: Qwen/Qwen3-8B\ntrain_files: t.parquet\n")
    r = ppo("--config", str(config))
    assert r.exit_code == 7 and len(ran) == 1
    assert r.stdout.strip().splitlines()[-1] == " ".join(ran[0])


def test_the_length_is_checked_against_the_models_maximum_positions(tmp_path, smollm2_model):
    """SmolLM2-135M has 8,192 positions: the default 131,072 context does not fit, and says what to change."""
    import json

    assert json.loads((smollm2_model / "config.json").read_text())["max_position_embeddings"] == 8192
    config = tmp_path / "ppo.yaml"
    config.write_text(f"model: {smollm2_model}\ntrain_files: t.parquet\n")
    line = one_error_line(ppo("--config", str(config), "--dry-run"))
    assert (
        "(16384 + 114688 = 131072 tokens) is more than the policy model's maximum positions (8192, "
        "max_position_embeddings in"
        in line
        and line.endswith("set context_length to at most 8192 (and prompt_length below it) in the config file")
    )
    assert not (tmp_path / "ppo-verl").exists()
    config.write_text(f"model: {smollm2_model}\ntrain_files: t.parquet\ncontext_length: 8192\nprompt_length: 4096\n")
    r = ppo("--config", str(config), "--dry-run")
    assert r.exit_code == 0, r.output
    # an override of verl's own lengths is named as the thing to change; a rope override widens the window
    config.write_text(
        f"model: {smollm2_model}\ntrain_files: t.parquet\ncontext_length: 8192\nprompt_length: 4096\n"
        "overrides:\n  data.max_response_length: 8192\n"
    )
    assert one_error_line(ppo("--config", str(config), "--dry-run")).endswith(
        "lower the overrides data.max_response_length"
    )
    config.write_text(
        f"model: {smollm2_model}\ntrain_files: t.parquet\noverrides:\n"
        "  +actor_rollout_ref.model.override_config.max_position_embeddings: 131072\n"
    )
    r = ppo("--config", str(config), "--dry-run")
    assert r.exit_code == 0, r.output


@pytest.mark.parametrize(
    "config, positions",
    [
        ({"max_position_embeddings": 8192}, (8192, "max_position_embeddings")),
        ({"n_positions": 1024}, (1024, "n_positions")),
        ({"text_config": {"max_position_embeddings": 4096}}, (4096, "max_position_embeddings")),
        (
            {
                "max_position_embeddings": 32768,
                "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768},
            },
            (131072, "max_position_embeddings with rope_scaling factor 4.0"),
        ),
        (
            {"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}},
            (131072, "max_position_embeddings"),
        ),
        ({"vocab_size": 10}, None),
    ],
)
def test_model_positions_from_a_config(config, positions):
    assert model_positions(config) == positions
