"""Trajectory records (DESIGN decision 7): one JSONL per run, append-only, each record flushed and
fsynced as it happens, so a crash loses at most the line being written. The TUI, batch and the
exporters read these types without importing the agent loop.

Secrets never reach the file (cuda_agent/secrets.py): config values under credential-named keys
are dropped with any credential-shaped value, and every string of every record is redacted by
value (the environment's credential variables, the configured model keys the loop registers
with `add_secrets`, also URL-encoded or JSON-escaped) and by shape (provider tokens, URL
passwords...).
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal, Union

from pydantic import BaseModel, Field, TypeAdapter

from cuda_agent.secrets import REDACTED, Redactor, scrub_config

__all__ = ["REDACTED", "Redactor", "scrub_config"]  # re-exported: redaction lives in cuda_agent/secrets.py


class _Record(BaseModel):
    time: float = Field(default_factory=time.time)  # unix seconds when the record was made


class TaskInfo(BaseModel):
    path: str
    class_name: str
    hash: str
    name: str = ""


class Header(_Record):
    type: Literal["header"] = "header"
    run_id: str
    task: TaskInfo
    model: str
    config: dict[str, Any] = {}  # agent limits, eval config, model settings; secrets removed
    versions: dict[str, str] = {}  # cuda-agent, torch, python, nvcc
    messages: list[dict] = []  # the system and task messages the run started from
    tools: list[dict] = []  # the tool schemas the model was offered


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
    status: str  # ok | error | rejected (by the approval hook)
    seconds: float = 0.0
    data: dict[str, Any] = {}
    format_error: bool = False  # the call itself was malformed (unknown tool, bad arguments)


class FormatErrorRecord(_Record):
    """A turn the loop could not act on (no tool call, unparsable action): the message it sent back."""

    type: Literal["format_error"] = "format_error"
    step: int
    message: str


class Evaluation(_Record):
    type: Literal["evaluation"] = "evaluation"
    step: int
    commit: str | None = None
    version: int | None = None
    status: str
    reward: int
    time_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    speedup_eager: float | None = None
    speedup_compile: float | None = None


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


Record = Annotated[Union[Header, ModelTurn, ToolResultRecord, FormatErrorRecord, Evaluation, UserMessage,
                         Trim, Resume, Closing], Field(discriminator="type")]
_ADAPTER: TypeAdapter = TypeAdapter(Record)


def parse_record(line: str | bytes) -> Record:
    """One trajectory line as its record type (ValueError when it is not one)."""
    return _ADAPTER.validate_json(line)


def evaluation_from(step: int, data: dict) -> Evaluation | None:
    """The evaluation record a tool result's data implies (verify and benchmark carry a verdict)."""
    v = data.get("verdict")
    if not v:
        return None
    timing = lambda key: (v.get(key) or {}).get("median_ms")  # noqa: E731
    return Evaluation(step=step, commit=data.get("commit"), version=data.get("version"), status=v["status"],
                      reward=v["reward"], time_ms=timing("timing"), eager_ms=timing("eager"),
                      compile_ms=timing("compiled"), speedup_eager=v.get("speedup_vs_eager"),
                      speedup_compile=v.get("speedup_vs_compile"))


def make_header(run_id: str, task: TaskInfo, model: str, config: dict, messages: list[dict],
                tools: list[dict]) -> Header:
    return Header(run_id=run_id, task=task, model=model, config=scrub_config(config),
                  versions=software_versions(), messages=messages, tools=tools)


def software_versions() -> dict[str, str]:
    """What produced the run; nvcc only when it answers (its version is cached per process)."""
    from cuda_agent import __version__

    out = {"cuda-agent": __version__, "python": platform.python_version()}
    try:
        out["torch"] = metadata.version("torch")
    except metadata.PackageNotFoundError:
        pass
    try:
        from cuda_agent.kernels.toolkit import find_nvcc, nvcc_version

        found = re.search(r"release ([\d.]+)", nvcc_version(find_nvcc()))
        if found:
            out["nvcc"] = found.group(1)
    except Exception:  # no toolkit here: the header says nothing rather than failing the run
        pass
    return out


class TrajectoryWriter:
    """Appends records, each redacted (secrets.Redactor: the environment's credentials as of now,
    `secrets`, and whatever `add_secrets` registers later) and flushed to disk."""

    def __init__(self, path: Path | str, secrets: tuple = ()):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _drop_torn_tail(self.path)  # a resumed run must not glue its first record onto a torn line
        self._file = open(self.path, "a", encoding="utf-8")
        self._scrub = Redactor(extra=secrets)

    def add_secrets(self, *values) -> None:
        """More values never to write: plain strings or (name, value) pairs (the model's key)."""
        self._scrub.add(*values)

    def write(self, record: _Record) -> None:
        obj = self._scrub(record.model_dump(mode="json"))
        line = json.dumps(obj, ensure_ascii=False)
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (a file name that is not UTF-8): written escaped
            line = json.dumps(_encodable(obj), ensure_ascii=False)
        self._file.write(line + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _encodable(obj: Any) -> Any:
    """Every string with the characters UTF-8 cannot carry as backslash escapes (text, not JSON escapes,
    so the file reads back as plain UTF-8)."""
    if isinstance(obj, str):
        return obj.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(obj, dict):
        return {_encodable(k): _encodable(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_encodable(v) for v in obj]
    return obj


def read_new_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """The complete lines appended to `path` after byte `offset`, and the offset after them. A line
    still being written (no newline yet) is left for the next call. Followers of append-only files
    (the app on a trajectory, the agent on its control commands) read with this."""
    if not path.exists():
        return [], offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    lines = [x for x in data[:end].decode("utf-8", "replace").splitlines() if x.strip()]
    return lines, offset + end


def read_trajectory(path: Path | str) -> list[Record]:
    """Every record of a trajectory. A torn last line (a crash mid-write) is skipped; a bad line
    anywhere else is corruption and raises ValueError naming the line."""
    lines = Path(path).read_text(encoding="utf-8").split("\n")
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(_ADAPTER.validate_json(line))
        except ValueError as e:
            if i == len(lines) - 1:  # no newline after it: the write never finished
                break
            raise ValueError(f"{path}:{i + 1}: not a trajectory record: {e}") from e
    return records


def _drop_torn_tail(path: Path) -> None:
    if not path.is_file() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    tail = data[data.rfind(b"\n") + 1:]
    try:
        _ADAPTER.validate_json(tail)  # whole but for its newline: keep it
        with open(path, "ab") as f:
            f.write(b"\n")
    except ValueError:
        with open(path, "r+b") as f:
            f.truncate(len(data) - len(tail))
