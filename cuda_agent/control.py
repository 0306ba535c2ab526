"""The control channel between a running agent and whoever watches it (the TUI): files in the
run folder's `control/` (run_folder.py names them). `commands.jsonl` is appended by a client, one
Command per line; `state.json` is rewritten whole (write, then rename) by the agent. (`launch.json`,
how the run was started, is the TUI's own: tui/launch_record.py.)

Files rather than a socket: the agent and the app can each exit and come back (detach,
re-attach, resume) with no handshake, nothing blocks either side, and the run folder holds it
all. Low-level like records.py: the TUI imports it without the agent loop.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from cuda_agent.follow import read_new_lines
from cuda_agent.pid_alive import pid_alive
from cuda_agent.run_folder import RunFolder

Op = Literal["pause", "resume", "stop", "inject", "approve_mode", "decide"]


class Command(BaseModel):
    op: Op
    text: str = ""  # inject: the message for the model
    on: bool = True  # approve_mode
    call_id: str = ""  # decide: which pending call
    approve: bool = True  # decide
    reason: str = ""  # decide: why a call was rejected (goes to the model)
    edited_arguments: str | None = None  # decide: JSON to run instead of the model's
    time: float = Field(default_factory=time.time)


class PendingCall(BaseModel):
    id: str
    name: str
    arguments: str  # raw JSON, as the model wrote it


class AgentState(BaseModel):
    pid: int
    running: bool = True  # False once the agent wrote its closing record and stopped
    paused: bool = False
    approve_mode: bool = False
    pending: list[PendingCall] = []  # calls of the current turn waiting for a decision
    stopping: bool = False  # a stop was asked for; the run ends at the next step
    stop_reason: str | None = None
    # what takes a while now (cuda_agent/progress.py's line): an evaluation, or after the loop
    # (running False) the re-verification and report; None when nothing long is going on
    activity: str | None = None
    updated: float = Field(default_factory=time.time)


def send(run_dir: Path, op: Op, **fields: Any) -> Command:
    """Append one command; the agent picks it up within its poll interval."""
    cmd = Command(op=op, **fields)
    run = RunFolder(run_dir)
    run.control.mkdir(parents=True, exist_ok=True)
    with open(run.commands, "a", encoding="utf-8") as f:
        f.write(cmd.model_dump_json() + "\n")
        f.flush()
        os.fsync(f.fileno())
    return cmd


def read_state(run_dir: Path) -> AgentState | None:
    try:
        return AgentState.model_validate_json(RunFolder(run_dir).state.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # absent, or caught between write and rename on odd filesystems
        return None


def write_state(run_dir: Path, state: AgentState) -> None:
    path = RunFolder(run_dir).state
    path.parent.mkdir(parents=True, exist_ok=True)
    state.updated = time.time()
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp")
    tmp.write_text(state.model_dump_json(), encoding="utf-8")
    os.replace(tmp, path)


def agent_running(run_dir: Path, state: AgentState | None = None) -> bool:
    """Whether an agent is attached to this run folder now (its process exists and says it runs);
    `state`: one already read, so a caller that has it does not read the file again."""
    state = state if state is not None else read_state(run_dir)
    return state is not None and state.running and pid_alive(state.pid)  # not alive: killed, resumable


def agent_activity(state: AgentState | None) -> str | None:
    """What the agent's process is busy with now (its state's `activity`), while it is alive."""
    return state.activity if state is not None and state.activity and pid_alive(state.pid) else None


class CommandReader:
    """Reads the commands appended since it was made (a resumed agent ignores older ones)."""

    def __init__(self, run_dir: Path):
        self.path = RunFolder(run_dir).commands
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def new(self) -> list[Command]:
        lines, self.offset = read_new_lines(self.path, self.offset)
        out = []
        for line in lines:
            try:
                out.append(Command.model_validate(json.loads(line)))
            except ValueError:
                continue  # a garbled line from a crashed client is skipped, not fatal
        return out
