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


# the judge (judge.py): loads the built library and replays checked plans on memory the parent
# lends it for each call (handover.py: the block's descriptor goes on a socket of its own, beside
# the request). Outputs stay in the parent's memory and the parent's clock times the call, so what
# the judge answers here is at most an estimate, never evidence.
class LoadLibrary(Request):
    doing: ClassVar[str] = "loading the built library"
    reply: ClassVar[type[Reply]] = Reply
    op: Literal["load_library"] = "load_library"
    build_dir: str


class LayoutSpec(BaseModel):
    """Where each rep's storages lie in a lent block (batch.Layout, as the judge is told it)."""

    model_config = ConfigDict(extra="forbid")

    nbytes: int = Field(ge=1)
    reps: list[list[int]]  # per rep: one offset per storage
    sizes: list[int]  # bytes per storage


class Prepare(Request):
    """Bind a checked plan to a layout; `noop`: the same layout with no launcher called (how the
    parent calibrates its clock before any candidate code is in the judge)."""

    doing: ClassVar[str] = "preparing a checked plan"
    reply: ClassVar[type[Reply]] = Reply
    op: Literal["prepare"] = "prepare"
    plan: dict[str, Any]
    layout: LayoutSpec
    noop: bool = False


class PrepareReference(Request):
    """Bind the task's own forward (eager, or torch.compile in `compile_mode`) to a layout of its
    tensor inputs: a baseline, in a judge that never loads a library."""

    doing: ClassVar[str] = "preparing a baseline"
    reply: ClassVar[type[Reply]] = Reply
    op: Literal["prepare_reference"] = "prepare_reference"
    inputs: list[Any]  # the task's inputs, described (plan.describe)
    layout: LayoutSpec
    compile_mode: str | None = None  # None: eager
    noop: bool = False


class RunResult(Reply):
    kernels: list[str] = Field(default_factory=list)  # GPU kernels the replay launched (first set)
    ms: float | None = None


class Run(Request):
    """One checked call (correctness): rep 0 of the prepared layout, on the block lent with it."""

    doing: ClassVar[str] = "running an input set"
    reply: ClassVar[type[Reply]] = RunResult
    op: Literal["run"] = "run"
    trace: bool = False  # list the kernels launched


def sane_ms(v: Any) -> float | None:
    """A figure a judge reported, where it is one finite non-negative number; else None."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    return float(v) if math.isfinite(v) and v >= 0 else None


class Batched(Reply):
    # the judge's CUDA events around the batch's reps (ms, all reps): an estimate the parent uses
    # only where its own clock agrees; anything but one sane number is no estimate
    event_ms: float | None = None
    phases: dict[str, float] = Field(default_factory=dict)  # where the judge's time went (benchmarks)

    @field_validator("event_ms", mode="before")
    @classmethod
    def _one_number(cls, v: Any) -> float | None:
        return sane_ms(v)


class RunBatch(Request):
    """Every rep of the prepared layout back to back, then synchronize: on a lent block, the
    parent's clock running from lending it to holding copies of the outputs it checks. With `k`
    (a GPU): on the kept block, queued behind a wait until the flag block's `go` word reaches k,
    followed by a write of k to its `done` word, answered once queued, without synchronizing: the
    parent's own events bracket the batch on the GPU's timeline (clocked.py)."""

    doing: ClassVar[str] = "in a timed batch"
    reply: ClassVar[type[Reply]] = Batched
    op: Literal["batch"] = "batch"
    k: int | None = Field(None, ge=1)


class Keep(Request):
    """Map the block lent with this request and keep it for the batches that follow (`flags`: the
    small block whose words order the batches, kept for the judge's life; else the prepared
    layout's data block, which replaces the last one)."""

    doing: ClassVar[str] = "mapping a kept block"
    reply: ClassVar[type[Reply]] = Reply
    op: Literal["keep"] = "keep"
    nbytes: int = Field(ge=1)
    flags: bool = False


class Settle(Request):
    """Wait for the queued batch's work to end and report a fault it raised."""

    doing: ClassVar[str] = "finishing a timed batch"
    reply: ClassVar[type[Reply]] = Batched  # with the judge's events around the queued reps
    op: Literal["settle"] = "settle"


class Exit(Request):
    reply: ClassVar[type[Reply]] = Reply
    op: Literal["exit"] = "exit"


RecorderRequest = Annotated[Union[Load, Record, Exit], Field(discriminator="op")]
JudgeRequest = Annotated[
    Union[LoadLibrary, Prepare, PrepareReference, Run, RunBatch, Keep, Settle, Exit], Field(discriminator="op")
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
