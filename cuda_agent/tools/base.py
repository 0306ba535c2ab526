"""What every tool is: a name, a description, pydantic arguments (their JSON schema is what the
model sees) and `run`, which returns the observation text for the model (credentials redacted
when the context has a redactor) and structured data for the records. Tools never raise for the
model's mistakes: a bad path or a failed build is an observation the model can act on
(`ToolError` is how a tool says so)."""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Iterator, Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.verdict import Verdict
from cuda_agent.tools.settings import ToolSettings
from cuda_agent.workspace.trailers import VersionInfo

if TYPE_CHECKING:
    from cuda_agent.pool.base import EvaluatorLike
    from cuda_agent.progress import Progress
    from cuda_agent.workspace import Workspace

MAX_OBSERVATION = 8000  # characters a single observation may take in the model's context


class ToolError(Exception):
    """A mistake the model can fix (bad path, no match...): its message becomes the observation."""


@contextmanager
def os_errors(doing: str) -> Iterator[None]:
    """An OSError inside becomes the ToolError `cannot <doing>: <why>`."""
    try:
        yield
    except OSError as e:
        raise ToolError(f"cannot {doing}: {e.strerror or e}") from None


class NoArgs(BaseModel):  # a tool that takes no arguments (no docstring: it would enter the schema)
    pass


class StrictArgs(BaseModel):  # arguments where an unknown name is refused, not ignored
    model_config = ConfigDict(extra="forbid")


class ToolResult(BaseModel):
    observation: str  # what the model reads, bounded
    status: Literal["ok", "error"] = "ok"
    data: dict[str, Any] = {}  # structured result for trajectories (paths, counts, profiles)
    seconds: float = 0.0
    # verify and benchmark: the evaluation and the version it was committed as
    verdict: Verdict | None = None
    version: VersionInfo | None = None

    def record_data(self) -> dict[str, Any]:
        """`data` as the trajectory keeps it, the verdict and its commit included."""
        if self.verdict is None:
            return self.data
        committed = {"commit": self.version.sha, "version": self.version.version} if self.version else {}
        return {**self.data, "verdict": self.verdict.model_dump(mode="json"), **committed}


@dataclass(frozen=True)
class TaskCopy:
    """The run's private copy of its task (`path::Class`, outside the workspace) and the hash it
    must have: profile and sanitize run the reference from it, never from the workspace."""

    ref: str
    hash: str


@dataclass
class ToolContext:
    """What a tool acts on. `evaluator` is made on first use by `evaluator_factory` (it starts
    jailed processes, so only tools that need it pay). `eval` gives the build (arch, cache_dir)."""

    workspace: Workspace
    evaluator_factory: Callable[[], EvaluatorLike] | None = None  # an Evaluator, or a pool's
    tools: ToolSettings = field(default_factory=ToolSettings)
    eval: EvalConfig = field(default_factory=EvalConfig)
    task_copy: TaskCopy | None = None
    # credentials out of every observation (cuda_agent.secrets.Redactor), before it is bounded
    redact: Callable[[str], str] | None = None
    # commit sha -> the compile_error verdict it was committed with in this process: verify and
    # benchmark answer the same files from it instead of building and committing them again
    failed_builds: dict[str, Verdict] = field(default_factory=dict)
    progress: Progress | None = None  # shows evaluations while they run (cuda_agent/progress.py); None: nothing
    _evaluator: EvaluatorLike | None = None

    @property
    def evaluator_started(self) -> bool:
        return self._evaluator is not None

    @property
    def evaluator(self) -> EvaluatorLike:
        if self._evaluator is None:
            if self.evaluator_factory is None:
                raise ToolError("no evaluator is configured for this workspace")
            self._evaluator = self.evaluator_factory()
        return self._evaluator

    def close(self) -> None:
        if self._evaluator is not None:
            self._evaluator.close()
            self._evaluator = None


def compact_schema(node: Any, names: bool = False) -> Any:
    """A JSON schema without what costs the model tokens and tells it nothing: pydantic's `title`s
    (the field name again), `additionalProperties: false` (an unknown argument is refused with a
    message anyway) and `anyOf [X, null]` for an optional argument (its default says it may be left
    out). `names`: `node` maps property names to schemas (a property may be called "title")."""
    if isinstance(node, list):
        return [compact_schema(x) for x in node]
    if not isinstance(node, dict):
        return node
    out = {
        k: compact_schema(v, k == "properties")
        for k, v in node.items()
        if names or not ((k == "title" and isinstance(v, str)) or (k == "additionalProperties" and v is False))
    }
    options = out.get("anyOf")
    if not names and isinstance(options, list) and len(options) == 2 and {"type": "null"} in options:
        out.pop("anyOf")
        out = {**next(o for o in options if o != {"type": "null"}), **out}
    return out


class Tool:
    """Subclasses set `name`, `description`, `Args` and implement `execute`."""

    name: ClassVar[str]
    description: ClassVar[str]
    Args: ClassVar[type[BaseModel]]

    def execute(self, args: BaseModel, ctx: ToolContext) -> ToolResult:
        raise NotImplementedError

    @classmethod
    def schema(cls) -> dict:
        """The tool as an OpenAI-style function definition (what litellm passes to any provider)."""
        return {
            "type": "function",
            "function": {
                "name": cls.name,
                "description": cls.description,
                "parameters": compact_schema(cls.Args.model_json_schema()),
            },
        }

    def run(self, raw_args: dict | None, ctx: ToolContext) -> ToolResult:
        """Validate the model's arguments, execute, bound the observation. Never raises for the model's mistakes."""
        t0 = time.perf_counter()
        try:
            result = self.execute(self.Args.model_validate(raw_args or {}), ctx)
        except ValidationError as e:
            problems = "; ".join(f"{'.'.join(map(str, err['loc'])) or 'arguments'}: {err['msg']}" for err in e.errors())
            result = ToolResult(observation=f"{self.name}: bad arguments: {problems}", status="error")
        except ToolError as e:
            result = ToolResult(observation=f"{self.name}: {e}", status="error")
        redact = getattr(ctx, "redact", None)
        if redact is not None:  # whole secrets first: bounding could cut one in half
            result.observation = redact(result.observation)
        result.observation = bound(result.observation)
        result.seconds = time.perf_counter() - t0
        return result


def bound(text: str, limit: int = MAX_OBSERVATION) -> str:
    """Cut the middle of a long text, saying how much was cut (the head and the tail matter most).
    Characters UTF-8 cannot carry (lone surrogates: a file name that is not UTF-8) come out escaped."""
    text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= limit:
        return text
    head, tail = text[: limit * 2 // 3], text[-(limit // 3) + 80 :]
    cut = len(text) - len(head) - len(tail)
    return f"{head}\n[... {cut} characters cut ...]\n{tail}"
