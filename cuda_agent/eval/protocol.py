"""What the parent and a jailed evaluation process say to each other: one typed request per
operation, one typed reply per request (docs/harness.md, "The trust boundary").

Requests go parent -> child as JSON lines and are parsed there by `parse_request`. Replies come
back on the child's reply pipe and are parsed here by `parse_reply` into the request's own reply
type. A reply is a claim of a process that may run the candidate's code (the recorder imports
model_new.py; the judge loads the candidate's library): it is checked like any other input, and
one that does not follow the protocol is the child's failure, never a traceback in the parent.
"""

from __future__ import annotations

import json
import math
from typing import Annotated, Any, ClassVar, Literal, TypeVar, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

MAX_TEXT = 20_000  # an error or traceback a child sends: enough to act on, never a flood in a record


# -- replies (child -> parent): claims, validated here ---------------------------------------
class Reply(BaseModel):
    """Every reply: whether the operation succeeded and, if not, why (the child's words, capped)."""

    model_config = ConfigDict(extra="ignore")  # a child may say more; only what is declared is read

    ok: bool
    error: str | None = None
    traceback: str | None = None
    peak_bytes: int = Field(0, ge=0)  # the child's GPU peak so far (torch's allocator), for memory_gib

    @field_validator("error", "traceback")
    @classmethod
    def _capped(cls, v: str | None) -> str | None:
        return v[:MAX_TEXT] if v else v

    def error_text(self) -> str:
        return f"{self.error or 'unknown error'}\n{self.traceback or ''}".strip()[:4000]


# -- requests (parent -> child) --------------------------------------------------------------
class Request(BaseModel):
    """One operation asked of a jailed child; `doing` says it in words ("while loading ..."; the
    op's name where it says nothing)."""

    model_config = ConfigDict(extra="forbid")
    op: str  # each request's own Literal: what the child dispatches on
    doing: ClassVar[str] = ""
    reply: ClassVar[type[Reply]] = Reply  # what the child answers it with


class Ready(Reply):
    """The first line a child sends once started (torch imported, task built, warm-ups run)."""

    ready: bool = False
    pid: int | None = None
    started: dict[str, float] = Field(default_factory=dict)  # seconds per start-up step
    since_exec: float = 0.0


# the recorder (recorder.py): imports model_new.py, writes down what forward does
class RecordedInit(Reply):
    init_compute: list[str] = Field(default_factory=list)


class Load(Request):
    doing: ClassVar[str] = "loading model_new.py"
    reply: ClassVar[type[Reply]] = RecordedInit
    op: Literal["load"] = "load"
    source: str
    spec: dict[str, Any] = Field(default_factory=dict)  # launchers.json of the build
    init_inputs: list[Any]  # described (plan.describe) init inputs
    init_seed: int = 0
    state: list[str]  # Model's parameter and buffer names


class Recorded(Reply):
    plan: dict[str, Any] | None = None  # checked by the parent (plan.Plan, plan.check_plan) before use
    compute: list[str] = Field(default_factory=list)  # torch ops forward ran that are not allowed
    problems: list[tuple[str, str]] = Field(default_factory=list)  # (guard, message)
    devices: list[str] = Field(default_factory=list)


class Record(Request):
    doing: ClassVar[str] = "recording forward"
    reply: ClassVar[type[Reply]] = Recorded
    op: Literal["record"] = "record"
    inputs: list[Any]  # one input set, described


# the judge (judge.py): loads the built library, replays checked plans, times
class Calibrate(Request):
    doing: ClassVar[str] = "calibrating its timer"
    reply: ClassVar[type[Reply]] = Reply
    op: Literal["calibrate"] = "calibrate"
    config: dict[str, Any]  # timing.TimingConfig
    reps: int = Field(ge=1)


class LoadLibrary(Request):
    doing: ClassVar[str] = "loading the built library"
    reply: ClassVar[type[Reply]] = Reply
    op: Literal["load_library"] = "load_library"
    build_dir: str


class OutputMeta(BaseModel):
    """What the judge says of one output it wrote: read next to the bytes, checked against the
    checked plan's and the reference's own shape, dtype and strides."""

    model_config = ConfigDict(extra="ignore")

    plain: bool = False
    type: str = "?"
    shape: list[int] | None = None
    stride: list[int] | None = None
    dtype: str | None = None


class RunResult(Reply):
    n_outputs: int | None = None
    outputs: list[OutputMeta] = Field(default_factory=list)
    kernels: list[str] = Field(default_factory=list)  # GPU kernels the replay launched (first set)
    ms: float | None = None
    mutated: list[int] = Field(default_factory=list)  # inputs no longer equal to a fresh draw


class Run(Request):
    doing: ClassVar[str] = "running an input set"
    reply: ClassVar[type[Reply]] = RunResult
    op: Literal["run"] = "run"
    plan: dict[str, Any]
    seed: int
    files: list[str]  # where each output's raw bytes go (the judge's scratch folder)
    trace: bool = False  # list the kernels launched


class TimedSet(BaseModel):
    model_config = ConfigDict(extra="forbid")

    seed: int
    plan: dict[str, Any]


class Prepared(Reply):
    per_call_ms: float | None = None  # the warm-up's estimate: the parent picks the reps from it

    @field_validator("per_call_ms")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        return v if v is None or (math.isfinite(v) and v > 0) else None


class TimePrepare(Request):
    doing: ClassVar[str] = "preparing the timed sets"
    reply: ClassVar[type[Reply]] = Prepared
    op: Literal["time_prepare"] = "time_prepare"
    sets: list[TimedSet]
    config: dict[str, Any]


class Timed(Reply):
    timing: dict[str, Any] | None = None  # verdict.Timing's fields: validated there


class TimeLoop(Request):
    doing: ClassVar[str] = "in the timed loop"
    reply: ClassVar[type[Reply]] = Timed
    op: Literal["time_loop"] = "time_loop"
    reps: int = Field(ge=1)
    nvml_index: int = 0


class Collected(Reply):
    mutated_sets: list[int] = Field(default_factory=list)


class TimeCollect(Request):
    doing: ClassVar[str] = "writing the timed outputs"
    reply: ClassVar[type[Reply]] = Collected
    op: Literal["time_collect"] = "time_collect"
    files: list[list[str]]  # per timing set, one file per output


class TimeReference(Request):
    doing: ClassVar[str] = "timing a baseline"
    reply: ClassVar[type[Reply]] = Timed
    op: Literal["time_reference"] = "time_reference"
    seeds: list[int]
    config: dict[str, Any]
    compile_mode: str | None = None  # None: eager
    nvml_index: int = 0


class Exit(Request):
    reply: ClassVar[type[Reply]] = Reply
    op: Literal["exit"] = "exit"


RecorderRequest = Annotated[Union[Load, Record, Exit], Field(discriminator="op")]
JudgeRequest = Annotated[
    Union[Calibrate, LoadLibrary, Run, TimePrepare, TimeLoop, TimeCollect, TimeReference, Exit],
    Field(discriminator="op"),
]
R = TypeVar("R", bound=Reply)


class ProtocolError(ValueError):
    """A line that does not follow the protocol; the message says what was wrong, in one line."""


def parse_request(line: bytes, kind: Any) -> Request:
    """In the child: one request line as the typed request of `kind` (RecorderRequest, JudgeRequest)."""
    try:
        return TypeAdapter(kind).validate_json(line)
    except ValidationError as e:
        raise ProtocolError(_first_error(e)) from None


def parse_reply(line: bytes, reply: type[R]) -> R:
    """In the parent: one reply line as `reply`; ProtocolError when it is not JSON or not that reply."""
    try:
        data = json.loads(line)
    except ValueError:
        raise ProtocolError("an answer that is not JSON") from None
    if not isinstance(data, dict):
        raise ProtocolError("an answer that is not a JSON object")
    try:
        return reply.model_validate(data)
    except ValidationError as e:
        raise ProtocolError(f"an answer that does not follow the protocol ({_first_error(e)})") from None


def _first_error(e: ValidationError) -> str:
    err = e.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "the message"
    return f"{where}: {err.get('msg', 'invalid')}"[:300]
