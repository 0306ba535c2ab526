"""`cuda-agent train ppo --config FILE`: our small config file -> verl's PPO configuration, checked
against verl's own, written to a folder, and the command that launches it (docs/training.md):
- OUT/verl_ppo.yaml: `defaults: [ppo_trainer, _self_]` (verl's config, through hydra's search path)
  and our values; `python -m verl.trainer.main_ppo --config-path OUT --config-name verl_ppo`
  composes it exactly as verl's own examples compose theirs;
- OUT/tools.yaml: our tools for rollout.multi_turn.tool_config_path (one CudaAgentTool each);
- OUT/agent_loops.yaml: the `cuda_agent` agent loop and its episode settings, for
  rollout.agent.agent_loop_config_path.

The checks: a key verl does not have fails, named, in one line (compose_verl; `+key` adds one on
purpose, as on hydra's command line); verl's own validate_config (check_with_verl); prompt +
response length against the models' maximum positions (check_positions), which verl does not check:
a 131k context on an 8k model would pass silently. verl and hydra are imported inside functions.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuda_agent.tools.base import MAX_OBSERVATION
from cuda_agent.train.episodes import EpisodeSettings
from cuda_agent.train.ppo_config import PPOConfig, PPOConfigError, first_line
from cuda_agent.train.verl_data import AGENT_NAME

CONFIG_NAME = "verl_ppo"


def verl_values(cfg: PPOConfig, out: Path) -> dict[str, Any]:
    """Our settings as verl keys (dotted), the user's overrides last."""
    mt, agent = "actor_rollout_ref.rollout.multi_turn", "actor_rollout_ref.rollout.agent"
    return {
        "algorithm.adv_estimator": "gae",  # PPO with a critic
        "data.train_files": cfg.train_files,
        "data.val_files": cfg.val_files or cfg.train_files,  # verl always builds a validation set
        "data.train_batch_size": cfg.batch_size,
        "data.max_prompt_length": cfg.prompt_length,
        "data.max_response_length": cfg.context_length - cfg.prompt_length,
        "data.return_raw_chat": True,
        "actor_rollout_ref.model.path": cfg.model,
        "actor_rollout_ref.actor.optim.lr": cfg.actor_lr,
        "actor_rollout_ref.actor.clip_ratio_low": cfg.clip_ratio_low,
        "actor_rollout_ref.actor.clip_ratio_high": cfg.clip_ratio_high,
        # a sequence may fill the whole context: micro-batches are made by tokens, not by count
        "actor_rollout_ref.actor.use_dynamic_bsz": True,
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu": cfg.context_length,
        "critic.model.path": cfg.critic_model or cfg.model,
        "critic.optim.lr": cfg.critic_lr,
        "critic.ppo_max_token_len_per_gpu": cfg.context_length,
        "actor_rollout_ref.rollout.name": cfg.rollout,
        "actor_rollout_ref.rollout.n": 1,
        "actor_rollout_ref.rollout.max_model_len": cfg.context_length,
        f"{mt}.enable": True,
        f"{mt}.max_assistant_turns": cfg.max_turns,
        f"{mt}.format": cfg.tool_format,
        f"{mt}.tool_config_path": str(out / "tools.yaml"),
        f"{mt}.max_tool_response_length": MAX_OBSERVATION,  # our tools bound their observations already
        f"{agent}.agent_loop_config_path": str(out / "agent_loops.yaml"),
        f"{agent}.default_agent_loop": AGENT_NAME,
        "trainer.total_training_steps": cfg.steps,
        "trainer.nnodes": cfg.nnodes,
        "trainer.n_gpus_per_node": cfg.gpus_per_node,
        "trainer.project_name": "cuda-agent",
        "trainer.experiment_name": cfg.experiment,
        "trainer.logger": ["console"],
        "trainer.val_before_train": bool(cfg.val_files),
        "trainer.test_freq": 10 if cfg.val_files else -1,
        "trainer.default_local_dir": str(out / "checkpoints"),
        **cfg.overrides,
    }


def compose_verl(values: dict[str, Any]):
    """verl's ppo_trainer (hydra) with our values applied in struct mode; PPOConfigError names a
    key verl does not have."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    with initialize_config_module("verl.trainer.config", version_base=None):
        cfg = compose(config_name="ppo_trainer")
    OmegaConf.set_struct(cfg, True)
    for key, value in values.items():
        name = key.lstrip("+")
        try:
            OmegaConf.update(cfg, name, value, merge=True, force_add=key.startswith("+"))
        except (ConfigKeyError, ConfigAttributeError):
            raise PPOConfigError(
                f"{name}: verl {_verl_version()} has no such setting (see its ppo_trainer config; "
                f"write +{name} to add a key on purpose)"
            ) from None
    return cfg


def check_with_verl(cfg) -> str | None:
    """verl's own validate_config where the model is a folder here; otherwise a note saying it runs at launch."""
    from omegaconf import OmegaConf

    model = Path(str(cfg.actor_rollout_ref.model.path)).expanduser()
    if not (model / "config.json").is_file():
        return f"verl's own checks (batch sizes, the model's config) run at launch: {model} is not a model folder here"
    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import validate_config

    copy = OmegaConf.create(OmegaConf.to_container(cfg))  # validate_config may fill in fields
    try:  # verl prints its verdict: keep stdout for the launch command
        with contextlib.redirect_stdout(sys.stderr):
            validate_config(config=copy, use_reference_policy=need_reference_policy(copy), use_critic=need_critic(copy))
    except Exception as e:  # verl's own message: the innermost (hydra wraps the dataclass's error)
        while e.__cause__ is not None:
            e = e.__cause__
        raise PPOConfigError(f"verl's checks: {first_line(e)}") from None
    return None


POSITION_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "max_seq_len")


def model_positions(config: dict) -> tuple[int, str] | None:
    """The most tokens one sequence may hold by a model's config (config.json as a dict, with verl's
    override_config merged in) and the key that says so; a RoPE scaling factor multiplies it, as vLLM
    derives its max_model_len; None when the config names no limit."""
    for c in (config, config.get("text_config") or {}):
        key = next((k for k in POSITION_KEYS if isinstance(c.get(k), int)), None)
        if key is None:
            continue
        rope = c.get("rope_scaling") or {}
        factor = rope.get("factor") if isinstance(rope, dict) else None
        if (
            isinstance(factor, (int, float))
            and factor > 1
            and rope.get("rope_type", rope.get("type")) not in ("llama3", "longrope", "su", "mrope")
        ):  # these already state their full window
            base = rope.get("original_max_position_embeddings") or c[key]
            return max(c[key], int(base * factor)), f"{key} with rope_scaling factor {factor}"
        return c[key], key
    return None


def model_config_file(model: str) -> Path | None:
    """The model's config.json here: in its folder, or in the Hugging Face cache for a hub id."""
    folder = Path(model).expanduser()
    if (folder / "config.json").is_file():
        return folder / "config.json"
    try:
        from huggingface_hub import try_to_load_from_cache

        found = try_to_load_from_cache(model, "config.json")
    except Exception:  # not a hub id, or no hub client: not checked here
        return None
    return Path(found) if isinstance(found, str) else None


def check_positions(cfg, overrides: dict[str, Any]) -> list[str]:
    """Prompt + response length (and the rollout's max_model_len) against the policy's and the
    critic's maximum positions; PPOConfigError names the setting to change. Notes for a model
    whose config is not here."""
    from omegaconf import OmegaConf

    prompt, response = int(cfg.data.max_prompt_length), int(cfg.data.max_response_length)
    by_override = [
        k for k in ("data.max_prompt_length", "data.max_response_length") if k in overrides or f"+{k}" in overrides
    ]
    change = (
        f"lower the overrides {' and '.join(by_override)}"
        if by_override
        else "set context_length to at most {n} (and prompt_length below it) in the config file"
    )
    notes, seen = [], set()
    for role, model in (("policy", cfg.actor_rollout_ref.model), ("critic", cfg.critic.model)):
        path = str(model.path)
        if path in seen:  # the critic starts from the policy's model
            continue
        seen.add(path)
        file = model_config_file(path)
        if file is None:
            notes.append(f"the {role}'s maximum positions are not checked here: {path} has no config.json here")
            continue
        config = {
            **json.loads(file.read_text(encoding="utf-8")),
            **(OmegaConf.to_container(model.override_config) if model.get("override_config") else {}),
        }
        found = model_positions(config)
        if found is None:
            notes.append(f"the {role}'s config ({file}) names no maximum positions: the length is not checked")
            continue
        n, key = found
        if prompt + response > n:
            raise PPOConfigError(
                f"prompt + response length ({prompt} + {response} = {prompt + response} tokens) "
                f"is more than the {role} model's maximum positions ({n}, {key} in {file}): " + change.format(n=n)
            )
        max_model_len = cfg.actor_rollout_ref.rollout.get("max_model_len")
        if role == "policy" and max_model_len is not None and int(max_model_len) > n:
            raise PPOConfigError(
                f"actor_rollout_ref.rollout.max_model_len ({max_model_len}) is more than the "
                f"policy model's maximum positions ({n}, {key} in {file}): lower that override"
            )
    return notes


@dataclass
class PPORun:
    out: Path
    files: list[Path]
    command: list[str]
    notes: list[str] = field(default_factory=list)

    def command_line(self) -> str:
        return shlex.join(self.command)


def write_run(cfg: PPOConfig, out: Path) -> PPORun:
    """Check our values against verl's config, write the three files, check the written config
    composes, and return the launch command."""
    out = Path(out).resolve()
    values = verl_values(cfg, out)
    composed = compose_verl(values)
    notes = check_positions(composed, cfg.overrides)
    note = check_with_verl(composed)
    out.mkdir(parents=True, exist_ok=True)
    tools, loops, main = out / "tools.yaml", out / "agent_loops.yaml", out / f"{CONFIG_NAME}.yaml"
    tools.write_text(_yaml({"tools": tool_entries(cfg.episodes)}))
    settings = cfg.episodes.model_dump(mode="json")
    settings["eval"] = cfg.episodes.eval.model_dump(mode="json", exclude_unset=True)  # what the user set
    loops.write_text(
        _yaml([{"name": AGENT_NAME, "_target_": "cuda_agent.train.verl_glue.CudaAgentLoop", "episodes": settings}])
    )
    header = (
        f"# written by `cuda-agent train ppo` (verl {_verl_version()}); launch with:\n"
        f"#   python -m verl.trainer.main_ppo --config-path {out} --config-name {CONFIG_NAME}\n"
    )
    body = {
        "hydra": {"searchpath": ["pkg://verl.trainer.config"]},
        "defaults": ["ppo_trainer", "_self_"],
        **nested(values),
    }
    main.write_text(header + _yaml(body))
    compose_written(out)
    command = [sys.executable, "-m", "verl.trainer.main_ppo", "--config-path", str(out), "--config-name", CONFIG_NAME]
    return PPORun(out=out, files=[main, tools, loops], command=command, notes=([note] if note else []) + notes)


def compose_written(out: Path):
    """The written verl_ppo.yaml composed as main_ppo will compose it."""
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(out).resolve()), version_base=None):
        return compose(config_name=CONFIG_NAME)


def tool_entries(episodes: EpisodeSettings) -> list[dict]:
    """verl's tool config: each tool of an episode as a CudaAgentTool with its schema in verl's form."""
    from cuda_agent.settings import ToolSettings
    from cuda_agent.tools.registry import default_tools, schemas

    return [
        {
            "class_name": "cuda_agent.train.verl_glue.CudaAgentTool",
            "config": {"type": "native"},
            "tool_schema": tool_schema_for_verl(s),
        }
        for s in schemas(default_tools(ToolSettings(allow_shell=episodes.allow_shell)))
    ]


def tool_schema_for_verl(schema: dict) -> dict:
    """Our tool schema (pydantic's JSON schema) in the narrower form verl's OpenAIFunctionToolSchema
    takes: an optional argument (`anyOf: [{type: X}, {type: null}]`) becomes `type: [X, "null"]`;
    titles, defaults and bounds are left out there. The model still sees our full schemas: the
    agent loop renders the episode's own."""
    fn = schema["function"]
    params = fn.get("parameters", {})
    props = {}
    for name, p in params.get("properties", {}).items():
        types = p.get("type") or [a["type"] for a in p.get("anyOf", []) if a.get("type")] or "string"
        props[name] = {"type": types, **{k: p[k] for k in ("description", "enum") if k in p}}
    return {
        "type": "function",
        "function": {
            "name": fn["name"],
            "description": fn.get("description", ""),
            "parameters": {"type": "object", "properties": props, "required": params.get("required", [])},
        },
    }


def nested(values: dict[str, Any]) -> dict[str, Any]:
    """Dotted keys -> nested mappings (a leading + dropped: the written file adds keys as it merges)."""
    root: dict[str, Any] = {}
    for key, value in values.items():
        *parents, leaf = key.lstrip("+").split(".")
        node = root
        for p in parents:
            node = node.setdefault(p, {})
        if isinstance(value, dict) and isinstance(node.get(leaf), dict):
            node[leaf] = {**node[leaf], **value}
        else:
            node[leaf] = value
    return root


def _yaml(data: Any) -> str:
    """YAML as a person would write it: no anchors for values that happen to be one object."""
    import yaml

    class Plain(yaml.SafeDumper):
        def ignore_aliases(self, data):
            return True

    return yaml.dump(data, Dumper=Plain, sort_keys=False)


def _verl_version() -> str:
    from importlib.metadata import version

    return version("verl")
