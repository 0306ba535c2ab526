"""The file a user writes for `cuda-agent train ppo` (YAML or TOML): the model, the data, the GPUs,
the rollout engine, the episodes, verl overrides; defaults are the paper's recipe (batch 1024,
150 steps, actor lr 3e-6, critic lr 6e-6, clip ratio 0.2/0.28, 150 turns, 131k context).
verl_config.py turns it into verl's configuration. docs/training.md shows a full file."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from cuda_agent.train.episodes import EpisodeSettings


class PPOConfigError(ValueError):
    """A config that cannot become a verl run; the message is one line saying what to change."""


class PPOConfig(BaseModel):
    """The file a user writes (YAML or TOML). Defaults are the paper's recipe."""

    model_config = ConfigDict(extra="forbid")

    model: str  # the policy: a folder every node can read (or a hub id the nodes can download)
    critic_model: str | None = None  # the critic's starting point; default: the policy's
    train_files: list[str]  # parquet(s) from `cuda-agent export --format verl`
    val_files: list[str] = []
    nnodes: int = Field(1, ge=1)  # trainer nodes (the evaluation pool is apart: episodes.pool)
    gpus_per_node: int = Field(8, ge=1)
    rollout: Literal["vllm", "sglang"] = "vllm"  # the rollout engine on the trainer GPUs
    tool_format: str = "hermes"  # verl's tool-call parser for the model's syntax (hermes: Qwen-style <tool_call>)
    # the paper's recipe
    batch_size: int = Field(1024, ge=1)  # tasks per PPO step
    steps: int = Field(150, ge=1)
    actor_lr: float = 3e-6
    critic_lr: float = 6e-6
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.28
    max_turns: int = Field(150, ge=1)  # model turns per episode
    context_length: int = Field(131072, ge=2)  # prompt + every turn and observation; <= the model's positions
    prompt_length: int = Field(16384, ge=1)  # of it, the first prompt (system message and task, ~3k tokens)
    experiment: str = "cuda-agent-ppo"
    episodes: EpisodeSettings = Field(default_factory=EpisodeSettings)
    overrides: dict[str, Any] = {}  # any verl key, dotted (`+key` adds a key verl lacks), applied last

    @field_validator("train_files", "val_files", mode="before")
    @classmethod
    def _one_or_many(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) else v

    @model_validator(mode="after")
    def _lengths(self) -> PPOConfig:
        if self.prompt_length >= self.context_length:
            raise ValueError(
                f"prompt_length ({self.prompt_length}) must be below context_length ({self.context_length})"
            )
        if not self.train_files:
            raise ValueError("train_files is empty: give the parquet from `cuda-agent export --format verl`")
        return self


def load_config(path: Path) -> PPOConfig:
    """Read and validate our config; relative paths are relative to the file's folder."""
    path = Path(path)
    if not path.is_file():
        raise PPOConfigError(f"config file not found: {path}")
    try:
        if path.suffix == ".toml":
            import tomllib

            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        else:
            import yaml

            raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except Exception as e:  # the parser's own message
        raise PPOConfigError(
            f"{path}: not valid {'TOML' if path.suffix == '.toml' else 'YAML'}: {_parse_error(e)}"
        ) from None
    if not isinstance(raw, dict):
        raise PPOConfigError(f"{path}: expected a mapping of settings (model, train_files, ...)")
    try:
        cfg = PPOConfig.model_validate(raw)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "config"
        if err["type"] == "extra_forbidden":
            known = EpisodeSettings.model_fields if where.startswith("episodes.") else PPOConfig.model_fields
            raise PPOConfigError(
                f"{path}: {where}: not a setting; the settings are: {', '.join(known)} "
                "(verl's own keys go under overrides)"
            ) from None
        raise PPOConfigError(f"{path}: {where}: {err['msg']}") from None
    return _resolve_paths(cfg, path.parent.resolve())


def _resolve_paths(cfg: PPOConfig, base: Path) -> PPOConfig:
    def local(p: str) -> str:
        q = Path(p).expanduser()
        return str(q if q.is_absolute() else (base / q).resolve())

    def maybe_local(p: str) -> str:  # a model may be a hub id: only an existing folder is made absolute
        q = Path(p).expanduser()
        return str((q if q.is_absolute() else base / q).resolve()) if (base / q).exists() or q.is_absolute() else p

    cfg.train_files = [local(p) for p in cfg.train_files]
    cfg.val_files = [local(p) for p in cfg.val_files]
    cfg.model = maybe_local(cfg.model)
    if cfg.critic_model:
        cfg.critic_model = maybe_local(cfg.critic_model)
    cfg.episodes.runs_dir = Path(local(str(cfg.episodes.runs_dir)))
    if cfg.episodes.eval.cache_dir is not None:
        cfg.episodes.eval.cache_dir = Path(local(str(cfg.episodes.eval.cache_dir)))
    return cfg


def _parse_error(e: BaseException) -> str:
    """yaml's problem and line, or tomllib's message, on one line."""
    problem, mark = getattr(e, "problem", None), getattr(e, "problem_mark", None)
    if problem:
        return f"{problem}" + (f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "")
    return first_line(e)


def first_line(e: BaseException) -> str:
    text = str(e).strip() or type(e).__name__
    return text.splitlines()[0]
