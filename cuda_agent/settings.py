"""Every setting of a run, typed, and where each value came from. Five layers, later ones win: the
defaults below < the user's file (~/.config/cuda-agent/config.toml, or under $XDG_CONFIG_HOME) <
the project's file (./cuda-agent.toml) < the environment (CUDA_AGENT_*, nested fields with `__`:
CUDA_AGENT_EVAL__N_SETS=8) < command-line flags. `cuda-agent config show` prints each value's layer;
a run records it in its header. pydantic-settings reads the files and the environment; the merge is
ours so that every leaf keeps its origin.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsConfigDict, TomlConfigSettingsSource

from cuda_agent.agent.limits import AgentConfig
from cuda_agent.agent.model_options import ModelOptions
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.flags import Flag, SectionFlags
from cuda_agent.tools.settings import ToolSettings

PROJECT_FILE = "cuda-agent.toml"


_EVAL_FLAGS = SectionFlags(
    device=Flag(help="cuda:N, or cpu: host-only test kernels, nothing a GPU does."),
    n_sets=Flag(name="--sets", help="Correctness input sets, fresh seeds each run."),
    memory_budget_gib=Flag(
        name="--memory-budget",
        help=(
            "GiB of GPU memory one evaluation may use, all its processes (default: what the GPU has free); a task "
            "that cannot fit is unscorable before any candidate runs."
        ),
    ),
    timeout_s=Flag(name="--timeout", help="Seconds a jailed process may take per request before it is killed."),
    baselines=Flag(name="--no-compile-baseline", sets=("eager",), help="Skip the torch.compile baseline."),
    allow_precision=Flag(sets=True, help="Let fp16/bf16/TF32 in an fp32 task pass with a warning instead of failing."),
    sandbox=Flag(
        name="--no-sandbox",
        sets=False,
        help=(
            "Run candidates and the shell without the jail (when bubblewrap cannot run here); every verdict records it."
        ),
    ),
    arch=Flag(help="nvcc arch, e.g. sm_90a (default: the GPU's, sm_90a without one)."),
    server_idle_s=Flag(
        name="--no-server",
        sets=0,
        help=("Evaluate in this process, not in the warm eval server that later evals of the same task reuse."),
    ),
)


class Settings(BaseModel):
    """One run's settings. Only what a user may set: a run's own facts (its task, its folders) are
    arguments, not settings. A plain model: validating one (a job file, a header) reads nothing else."""

    model_config = ConfigDict(extra="forbid")

    model: Annotated[str | None, Flag(short="-m")] = Field(
        None, description=("litellm model name, e.g. openai/gpt-5, anthropic/claude-sonnet-4-5, hosted_vllm/qwen.")
    )
    api_base: Annotated[str | None, Flag()] = Field(
        None, description=("OpenAI-compatible server URL (vLLM, SGLang, llama.cpp, Ollama).")
    )
    out: Annotated[Path, Flag()] = Field(
        Path("runs"),
        description=(
            "Folder for run folders (a relative one: in the folder the command runs in): outside any git repository, "
            "or in a folder its .gitignore lists (a clone's runs/)."
        ),
    )
    llm: ModelOptions = Field(default_factory=ModelOptions)  # how the model is called: protocol, window, prices
    limits: AgentConfig = Field(default_factory=AgentConfig)
    # made per Settings: EvalConfig's sandbox default reads CUDA_AGENT_NO_SANDBOX when it is made. Its flags
    # are declared here, the fields' own comments in eval/settings.py say more
    eval: Annotated[EvalConfig, _EVAL_FLAGS] = Field(default_factory=EvalConfig)
    tools: ToolSettings = Field(default_factory=ToolSettings)


class _Reader(BaseSettings, Settings):
    """The same fields, for pydantic-settings' file and environment sources to read into dicts."""

    model_config = SettingsConfigDict(env_prefix="CUDA_AGENT_", env_nested_delimiter="__", extra="forbid")


class SettingsError(ValueError):
    """A setting that does not validate, named with the layer it came from."""


class Resolved(BaseModel):
    settings: Settings
    origins: dict[str, str]  # dotted field -> its layer: default, user file, project file, environment or flag

    def rows(self) -> list[tuple[str, Any, str]]:
        """(dotted name, value, origin) for every leaf setting, in the model's order."""
        flat = _flatten(self.settings.model_dump(mode="json"))
        return [(k, v, self.origins.get(k, "default")) for k, v in flat.items()]

    def record(self) -> dict[str, Any]:
        """What a run's header keeps: the values and, for the ones not at their default, where from."""
        return {
            "values": self.settings.model_dump(mode="json"),
            "origins": {k: o for k, o in self.origins.items() if o != "default"},
        }


def user_file() -> Path:
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "cuda-agent" / "config.toml"


def resolve(
    flags: dict[str, Any] | None = None, *, project_dir: Path | None = None, user: Path | None = None
) -> Resolved:
    """The settings from every layer; `flags` is a nested dict of what the command line gave (None
    values count as not given). Raises SettingsError naming the layer of a bad value."""
    project = (project_dir or Path.cwd()) / PROJECT_FILE
    layers = [
        ("user file", _toml(user or user_file())),
        ("project file", _toml(project)),
        ("environment", _environment()),
        ("flag", _drop_none(flags or {})),
    ]
    merged: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for name, data in layers:
        _merge(merged, data, origins, name, "")
    try:
        settings = Settings.model_validate(merged)
    except ValidationError as e:
        err = e.errors()[0]
        where = ".".join(str(p) for p in err["loc"])
        layer = next(
            (o for k, o in origins.items() if where == k or where.startswith(k + ".") or k.startswith(where + ".")),
            "default",
        )
        source = {
            "default": "the defaults",
            "user file": str(user or user_file()),
            "project file": str(project),
            "environment": "CUDA_AGENT_" + where.upper().replace(".", "__"),
            "flag": "the command line",
        }[layer]
        msg = "it is not a setting" if err["type"] == "extra_forbidden" else err["msg"].removeprefix("Value error, ")
        raise SettingsError(
            f"setting {where or '(top level)'} from {source}: {msg}; fix it there "
            "(`cuda-agent config show` lists every setting)"
        ) from None
    return Resolved(settings=settings, origins=origins)


def _toml(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return TomlConfigSettingsSource(_Reader, toml_file=path)()
    except Exception as e:  # tomllib's decode error names line and column
        raise SettingsError(f"{path} is not valid TOML ({e}); fix it or move it away") from None


def _environment() -> dict[str, Any]:
    try:
        return EnvSettingsSource(_Reader)()
    except Exception as e:  # a nested field given as JSON that does not parse
        raise SettingsError(f"a CUDA_AGENT_* environment variable does not parse: {e}") from None


def _drop_none(d: dict[str, Any]) -> dict[str, Any]:
    out = {k: _drop_none(v) if isinstance(v, dict) else v for k, v in d.items()}
    return {k: v for k, v in out.items() if v is not None and v != {}}


def _merge(into: dict, data: dict, origins: dict[str, str], layer: str, prefix: str) -> None:
    for k, v in data.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            if not isinstance(into.get(k), dict):
                into[k] = {}
            _merge(into[k], v, origins, layer, key + ".")
            continue
        into[k] = v
        for old in [o for o in origins if o.startswith(key + ".")]:
            del origins[old]  # a whole table replaced by a value
        origins[key] = layer


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        if isinstance(v, dict) and v:
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
