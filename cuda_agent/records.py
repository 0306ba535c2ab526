"""Trajectory record types (docs/architecture.md): the lines of a run's trajectory.jsonl. A leaf: it
imports nothing of cuda_agent, so the TUI, batch and the exporters read these types without the
agent loop. Writing and reading the file is trajectory.py's.
"""

from __future__ import annotations

import json
import re
import time
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter


class _Record(BaseModel):
    time: float = Field(default_factory=time.time)  # unix seconds when the record was made


class TaskInfo(BaseModel):
    path: str
    class_name: str
    hash: str
    name: str = ""


# The header's model of a run an MCP client drove (`cuda-agent mcp`): mcp:<client>/<version>. Its turns
# are the client's tool calls with no model text: not training data for what a model writes.
EXTERNAL_MODEL_PREFIX = "mcp:"


class Header(_Record):
    type: Literal["header"] = "header"
    run_id: str
    task: TaskInfo
    model: str
    config: dict[str, Any] = {}  # agent limits, eval config, model settings; secrets removed
    versions: dict[str, str] = {}  # cuda-agent, torch, python, nvcc
    messages: list[dict] = []  # the system and task messages the run started from
    tools: list[dict] = []  # the tool schemas the model was offered
    protocol: Literal["native", "text"] | None = None  # how tool calls were exchanged; None: not recorded (older runs)
    prompt_version: int | None = None  # agent.prompts.PROMPT_VERSION of the messages above; None: not recorded


class CallRecord(BaseModel):
    id: str
    name: str
    arguments: str  # raw JSON text, as run (the person's edit when there was one)
    original_arguments: str | None = None  # as the model wrote it, when a person edited it


class ModelTurn(_Record):
    type: Literal["model_turn"] = "model_turn"
    step: int
    content: str
    tool_calls: list[CallRecord] = []
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost: float | None = None  # dollars; None when the price is unknown
    latency_s: float = 0.0
    edited_by_person: bool = False  # a person changed a call's arguments before it ran
    injected: bool = False  # the turn was written by a script or a person, not the model


class ToolResultRecord(_Record):
    type: Literal["tool_result"] = "tool_result"
    step: int
    call_id: str
    name: str
    observation: str  # exactly what the model was shown
    status: str  # ok | error | rejected (by the approval hook) | skipped (a limit: never ran) | interrupted
    seconds: float = 0.0
    data: dict[str, Any] = {}
    format_error: bool = False  # the call itself was malformed (unknown tool, bad arguments)


class FormatErrorRecord(_Record):
    """A turn the loop could not act on (no tool call, unparsable action): the message it sent back."""

    type: Literal["format_error"] = "format_error"
    step: int
    message: str


class VersionMetrics(BaseModel):
    """What an evaluated version scored: the evaluation record and the version's git trailers
    (workspace.trailers.VersionInfo) both carry these, made in one place (trailers.metrics_of)."""

    status: str
    reward: int
    time_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None


class Evaluation(_Record, VersionMetrics):
    type: Literal["evaluation"] = "evaluation"
    step: int
    commit: str | None = None
    version: int | None = None


class UserMessage(_Record):
    type: Literal["user_message"] = "user_message"
    step: int
    content: str
    injected: bool = True  # written by a person during the run; False: a note cuda-agent added (on resume)


class Trim(_Record):
    type: Literal["trim"] = "trim"
    step: int
    removed: list[dict] = []  # which messages were shortened and by how much
    tokens_before: int | None = None
    tokens_after: int | None = None


class Resume(_Record):
    """The run was continued (`--resume`): the records after it come from the resumed process."""

    type: Literal["resume"] = "resume"
    step: int  # the last step taken before the resume; the next turn is step + 1
    model: str = ""
    config: dict[str, Any] = {}  # the limits and model settings the run continues with; secrets removed
    protocol: Literal["native", "text"] | None = None  # the continuing model's, as the header's
    previous_stop: str | None = None  # the last closing's stop reason; None when the run was killed
    interrupted_calls: list[str] = []  # calls of a cut-off turn, answered as not run (see agent/resume.py)
    recovered_versions: list[int] = []  # versions the workspace committed whose evaluation was not recorded


class Closing(_Record):
    type: Literal["closing"] = "closing"
    stop_reason: str
    best_version: int | None = None
    best_commit: str | None = None
    best_reward: int | None = None
    steps: int = 0
    tokens: int = 0
    cost: float | None = None  # sum of the priced turns; None when no turn had a price
    unpriced_turns: int = 0
    wall_s: float = 0.0
    error: str | None = None  # the model error's message, for model_error:<kind>


Record = Annotated[
    Union[Header, ModelTurn, ToolResultRecord, FormatErrorRecord, Evaluation, UserMessage, Trim, Resume, Closing],
    Field(discriminator="type"),
]
_ADAPTER: TypeAdapter = TypeAdapter(Record)


def parse_record(line: str | bytes) -> Record:
    """One trajectory line as its record type (ValueError when it is not one). A line holding a
    lone surrogate's escape (`\\ud800`, which older runs could write) reads with U+FFFD in its place."""
    try:
        return _ADAPTER.validate_json(line)
    except ValueError:
        try:
            obj = json.loads(line)  # Python's parser takes lone surrogate escapes; pydantic's does not
        except ValueError:
            raise ValueError(f"not JSON: {str(line)[:80]!r}") from None
        return _ADAPTER.validate_python(valid_text(obj))


_LONE_SURROGATE = re.compile("[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]")


def _shown(m: re.Match) -> str:
    code = ord(m.group())
    return f"\\x{code - 0xDC00:02x}" if 0xDC80 <= code <= 0xDCFF else "\ufffd"


def map_strings(value: Any, fn) -> Any:
    """`value` (a str, or a JSON-like dict or list) with `fn` applied to every string in it, keys too."""
    if isinstance(value, str):
        return fn(value)
    if isinstance(value, dict):
        return {map_strings(k, fn): map_strings(v, fn) for k, v in value.items()}
    if isinstance(value, list):
        return [map_strings(v, fn) for v in value]
    return value


def valid_text(value: Any) -> Any:
    """`value` (a str, or the strs of a JSON-like dict or list) with every lone surrogate, which UTF-8
    cannot carry (what a JSON `\\ud800` escape decodes to), replaced: by U+FFFD, or, for one that
    stands for a byte that is not UTF-8 (U+DC80..U+DCFF, Python's surrogateescape), by `\\xNN`, the
    form the workspace shows such a file name in; a valid pair is joined."""
    return map_strings(value, _valid_str)


def _valid_str(text: str) -> str:
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return _LONE_SURROGATE.sub(_shown, text).encode("utf-16", "surrogatepass").decode("utf-16")
