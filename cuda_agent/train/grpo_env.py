"""The cuda-agent environment as TRL's GRPO `environment_factory` (TRL 1.16): one object per rollout,
whose public methods are the model's tools. No second tool dispatch: each method is generated from
the schema of one of our tools (the list `Environment.tool_schemas()` gives the agent loop, MCP and
verl) and runs the call through the episode's KernelEnv -> Environment.step -> tools.registry.dispatch,
in the same workspace, jail and judge as the agent.

TRL's contract, as GRPOTrainer uses it:
- the factory is called once to probe the class (its tools: every public function of the class
  except `reset` and `get_reward`, rendered into the prompt from each method's signature and Google
  docstring by transformers' get_json_schema), then once per rollout of a batch; instances are reused.
- `reset(**row)` is called before each rollout with the dataset row's columns; the string it returns
  is appended to the row's last user message. Here: a fresh workspace for the row's task, and the
  task message the agent loop starts from (the row's system message is the agent's).
- the model's tool calls are parsed from its text (the chat template's response schema) and each is
  run as `method(**arguments)`; what it returns is the tool message. A rollout ends when the model
  answers without a tool call (or the completion budget or `max_tool_calling_iterations` ends it).
- `get_reward()` is called once per finished rollout: here the episode's milestone reward as the
  harness's verdict ledger records it (Environment.episode_reward: the best correct version, -1
  when none), never anything the model or its shell wrote.

What a JSON schema says that a signature cannot (a default, a minimum) is written into the argument's
description, so the model still reads it; the dispatch validates the arguments as it does for the agent.
"""

from __future__ import annotations

import inspect
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Literal, Optional

from cuda_agent.task import load_task
from cuda_agent.train.episodes import EpisodeHost, EpisodeSettings

ENDED = "The episode has ended ({why}): tool calls do nothing now. Answer without a tool call to end your turn."
_JSON_TYPES: dict[str, type] = {"string": str, "integer": int, "number": float, "boolean": bool}
_RESERVED = ("reset", "get_reward")  # TRL's own names: never a tool


@dataclass
class EpisodeRecord:
    """One finished rollout, as the harness saw it (the verdict ledger's entries of its workspace)."""

    task: str
    reward: int  # the episode's: the ledger's best correct version, -1 when none
    correct: bool  # a correct version was found (reward >= 1)
    evaluations: int  # verify/benchmark calls that produced a verdict
    tool_calls: int
    versions: list[dict] = field(default_factory=list)  # per ledger entry: version, status, reward, time_ms
    run_dir: str | None = None  # kept only with keep_workspaces
    seconds: float = 0.0  # reset to reward
    tool_seconds: float = 0.0  # of those, inside the tools (builds, evaluations, profiles): not generation

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class EpisodeBook:
    """What the environments of one training run share: their settings, the finished episodes not yet
    logged (the trainer's log drains them once per optimizer step) and who is told what happens."""

    def __init__(
        self, settings: EpisodeSettings, *, on_event: Callable[[str, dict], None] | None = None, progress=None
    ):
        self.settings = settings
        self.on_event = on_event or (lambda kind, info: None)
        self.progress = progress  # a cuda_agent.progress.Progress for the tools' evaluation display, or None
        self.finished: list[EpisodeRecord] = []
        self.environments: list[CudaAgentEnvironment] = []

    def take(self) -> list[EpisodeRecord]:
        done, self.finished = self.finished, []
        return done

    def close(self) -> None:
        for env in self.environments:
            env._close()


class CudaAgentEnvironment:
    """The base of the generated class (environment_class): episode handling; the tools are added there."""

    _tool_names: tuple[str, ...] = ()

    def __init__(self, book: EpisodeBook):
        self._book = book
        self._host = EpisodeHost(book.settings)
        self._task = ""
        self._ended: str | None = None
        self._evaluations = 0
        self._calls = 0
        self._started = 0.0
        self._tool_seconds = 0.0
        book.environments.append(self)

    def reset(self, **row: Any) -> str:
        """A fresh workspace for the row's task; returns the task message (TRL appends it to the row's prompt)."""
        self._close()
        task = load_task(row["task"], expected_hash=row["task_hash"], module_name="cuda_agent_task_grpo")
        first = self._host.start(task)
        system = (row.get("prompt") or [{}])[0]
        if system.get("role") == "system" and system.get("content") != first[0]["content"]:
            raise ValueError(
                "the dataset's system message is not the one the environment starts with: "
                "make the dataset again (train grpo builds it from the task folder)"
            )
        env = self._host.env.env
        names = tuple(s["function"]["name"] for s in env.tool_schemas())
        if names != self._tool_names:
            raise ValueError(f"the episode offers tools {names}, the model was shown {self._tool_names}")
        env.ctx.progress = self._book.progress
        self._task, self._ended, self._evaluations, self._calls = str(row.get("task_id") or task.name), None, 0, 0
        self._tool_seconds = 0.0
        self._started = time.monotonic()
        self._book.on_event("reset", {"task": self._task})
        return first[1]["content"]

    def get_reward(self) -> float:
        """The episode's milestone reward from the verdict ledger (-1 when no correct version)."""
        env = self._host.env.env
        if env is None:
            raise RuntimeError("get_reward before reset: no episode")
        reward = self._host.episode_reward()
        entries = env.workspace.history.entries()
        record = EpisodeRecord(
            task=self._task,
            reward=reward,
            correct=reward >= 1,
            evaluations=self._evaluations,
            tool_calls=self._calls,
            seconds=round(time.monotonic() - self._started, 3),
            tool_seconds=round(self._tool_seconds, 3),
            versions=[
                {
                    "version": e.version,
                    "status": e.status,
                    "reward": e.reward,
                    "correct": e.correct,
                    "time_ms": e.time_ms,
                }
                for e in entries
            ],
            run_dir=str(env.workspace.run_folder.path) if self._book.settings.keep_workspaces else None,
        )
        self._book.finished.append(record)
        self._book.on_event("reward", record.as_dict())
        self._close()  # the evaluator's processes and, unless kept, the run folder go now, not at the next reset
        return float(reward)

    def _call(self, name: str, arguments: dict[str, Any]) -> str:
        if self._host.env.env is None:
            raise RuntimeError(f"{name} called before reset: no episode")
        if self._ended is not None:
            return ENDED.format(why=self._ended)
        self._calls += 1
        self._book.on_event("tool", {"name": name, "task": self._task})
        began = time.monotonic()
        try:
            step = self._host.step(name, arguments)
        finally:
            self._tool_seconds += time.monotonic() - began
        if step.info.get("version_reward") is not None:  # this call evaluated a version: a verdict was recorded
            self._evaluations += 1
            self._book.on_event("evaluation", {"name": name, "reward": step.info["version_reward"]})
        if step.done:
            self._ended = "finish was called" if name == "finish" else f"the step limit ({self._host.env.max_steps})"
        return step.observation

    def _close(self) -> None:
        self._host.close()  # the run folder is deleted unless keep_workspaces


def environment_class(schemas: list[dict]) -> type[CudaAgentEnvironment]:
    """A subclass of CudaAgentEnvironment with one method per tool schema (OpenAI function form)."""
    methods: dict[str, Any] = {}
    for schema in schemas:
        fn = schema["function"]
        name = fn["name"]
        if name in _RESERVED or name.startswith("_") or hasattr(CudaAgentEnvironment, name):
            raise ValueError(f"tool {name!r} clashes with the environment's own methods")
        methods[name] = _tool_method(name, fn.get("description") or name, fn.get("parameters") or {})
    methods["_tool_names"] = tuple(methods)
    return type("CudaAgentToolsEnvironment", (CudaAgentEnvironment,), methods)


def _tool_method(name: str, description: str, parameters: dict) -> Callable:
    props: dict[str, dict] = parameters.get("properties") or {}
    required = set(parameters.get("required") or [])
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    lines = []
    for arg, prop in props.items():
        kind = _JSON_TYPES.get(prop.get("type", "string"))
        if kind is None:
            raise ValueError(
                f"tool {name}: argument {arg} has JSON type {prop.get('type')!r}, which a signature here cannot say"
            )
        hint: Any = Literal[tuple(prop["enum"])] if prop.get("enum") else kind
        if arg not in required and prop.get("default", "") is None:
            hint = Optional[hint]
        annotations[arg] = hint
        default = inspect.Parameter.empty if arg in required else prop.get("default")
        params.append(inspect.Parameter(arg, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
        lines.append(f"    {arg}: {_describe(arg, prop)}")

    def tool(self: CudaAgentEnvironment, **arguments: Any) -> str:
        return self._call(name, arguments)

    tool.__name__ = tool.__qualname__ = name
    tool.__doc__ = description + ("\n\nArgs:\n" + "\n".join(lines) if lines else "")
    tool.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    tool.__annotations__ = annotations
    return tool


def _describe(arg: str, prop: dict) -> str:
    """The argument's description on one line (the docstring parser reads one), with what else the schema says."""
    said = prop.get("description") or (f"one of {', '.join(map(str, prop['enum']))}" if prop.get("enum") else arg)
    text = " ".join(str(said).split())
    notes = []
    default = prop.get("default")
    if default is not None and default != "":
        notes.append(f"default {str(default).lower() if isinstance(default, bool) else default}")
    if "minimum" in prop:
        notes.append(f"at least {prop['minimum']}")
    if "maximum" in prop:
        notes.append(f"at most {prop['maximum']}")
    if "minLength" in prop:
        notes.append("not empty" if prop["minLength"] == 1 else f"at least {prop['minLength']} characters")
    return text + (f" ({', '.join(notes)})" if notes else "")


def environment_factory(book: EpisodeBook, schemas: list[dict]) -> Callable[[], CudaAgentEnvironment]:
    """What GRPOTrainer's `environment_factory` takes: a callable making one environment per rollout."""
    cls = environment_class(schemas)
    return lambda: cls(book)


def check_schemas_survive(schemas: list[dict]) -> list[str]:
    """Where the schema TRL renders from a generated method (transformers' get_json_schema) differs from
    ours in what a call needs: the arguments, which are required, their types and choices. [] when none."""
    from transformers.utils import get_json_schema

    cls = environment_class(schemas)
    problems = []
    for schema in schemas:
        ours = schema["function"]
        got = get_json_schema(getattr(cls, ours["name"]))["function"]
        mine, theirs = ours.get("parameters") or {}, got["parameters"]
        if set(mine.get("properties") or {}) != set(theirs.get("properties") or {}):
            problems.append(f"{ours['name']}: arguments {sorted(theirs.get('properties') or {})}")
        if set(mine.get("required") or []) != set(theirs.get("required") or []):
            problems.append(f"{ours['name']}: required {sorted(theirs.get('required') or [])}")
        for arg, prop in (mine.get("properties") or {}).items():
            other = (theirs.get("properties") or {}).get(arg, {})
            if prop.get("type") not in (other.get("type"), None) or prop.get("enum") != other.get("enum"):
                problems.append(f"{ours['name']}.{arg}: {other}")
    return problems


def tool_schemas(settings: EpisodeSettings) -> list[dict]:
    """The schemas every episode offers (the same call Environment.tool_schemas makes)."""
    from cuda_agent.tools.registry import default_tools, schemas
    from cuda_agent.tools.settings import ToolSettings

    return schemas(default_tools(ToolSettings(allow_shell=settings.allow_shell)))
