"""The model an MCP client plays: the agent loop asks it for the next action and gets the client's
next tools/call. So a call from Claude Code, Codex or any client runs through the same loop as a
model's in `optimize`: the registry (one-line errors for bad arguments), the judge and jail, the
limits and the trajectory. No part of the MCP SDK is needed here (server.py speaks the protocol).

Two threads meet here. The loop's thread calls `query`: it hands the results of the previous call
(the tool results the trajectory writer saw since then) to the request waiting for them, then
blocks until the client's next call. The server's thread calls `submit` for each tools/call and
waits on the Future it gets; `close` answers the last call once the run is finalized, and
`disconnect` ends a loop waiting for a call that will never come.
"""

from __future__ import annotations

import queue
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuda_agent.agent.errors import LimitsExceeded, RunEnded
from cuda_agent.agent.protocol import ModelResponse, ToolCall
from cuda_agent.records import FormatErrorRecord, ToolResultRecord
from cuda_agent.trajectory import TrajectoryWriter

DISCONNECTED = "client_disconnected"  # the closing record's stop reason when the client went away


@dataclass
class Answer:
    """What one tools/call gets back: the call's results as the loop recorded them (normally one),
    and, when the run ended with it, how it ended (`ending`: lines; `summary`: RunOutcome.summary())."""

    results: list[ToolResultRecord | FormatErrorRecord] = field(default_factory=list)
    ending: list[str] = field(default_factory=list)
    summary: dict | None = None
    failed: bool = False  # the run could not start or broke: an error for the client

    @property
    def is_error(self) -> bool:
        return self.failed or any(getattr(r, "status", "error") == "error" for r in self.results)

    def texts(self) -> list[str]:
        return [r.observation if isinstance(r, ToolResultRecord) else r.message for r in self.results] + (
            ["\n".join(self.ending)] if self.ending else []
        )


class ClientBridge:
    """The Model protocol (agent/interfaces.py) with an MCP client behind it. `name` is
    `mcp:<client>/<version>` from the handshake (set before the loop starts, so the header records
    it); no window (never trimmed: the client keeps its own context), so no tokenizer and no reply
    limit; no price (the client's tokens are not ours to count); no key, no settings of ours."""

    native_tools = True
    max_tokens: int | None = None
    window_source = "unknown"

    def __init__(self, name: str = "mcp:unknown"):
        self.name = name
        self.deadline: float | None = None  # set by the loop from --max-wall: no wait for a call past it
        self._calls: queue.Queue[tuple[ToolCall, Future] | None] = queue.Queue()
        self._current: Future | None = None  # the client's call the loop is running
        self._seen: list[ToolResultRecord | FormatErrorRecord] = []
        self._lock = threading.Lock()
        self._ended: Answer | None = None  # after close: what every later call is told

    # the server's side
    def submit(self, call: ToolCall) -> Future:
        """A client's call for the loop; the Future's result is its Answer."""
        future: Future = Future()
        with self._lock:
            if self._ended is not None:
                future.set_result(self._refused("the run has ended; no more calls run."))
            else:
                self._calls.put((call, future))
        return future

    def disconnect(self) -> None:
        """The client went away: a loop waiting for its next call stops (stop reason client_disconnected)."""
        self._calls.put(None)

    def close(self, ending: list[str], summary: dict | None = None, failed: bool = False) -> None:
        """The run is over and finalized: answer the call it ended on, and every one still queued."""
        with self._lock:
            self._ended = Answer(ending=ending, summary=summary, failed=failed)
            last, self._current = self._current, None
            if last is not None and not last.done():
                last.set_result(Answer(results=self._take(), ending=ending, summary=summary, failed=failed))
            while True:  # get_nowait, not empty(): a loop thread still reading cannot make this raise
                try:
                    item = self._calls.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[1].set_result(self._refused("the run ended before this call ran."))

    # the loop's side
    def observe(self, record) -> None:
        """Every record the trajectory writer writes; the tool results are what the client gets back."""
        if isinstance(record, (ToolResultRecord, FormatErrorRecord)):
            with self._lock:
                self._seen.append(record)

    def query(self, messages: list[dict], tools: list[dict]) -> ModelResponse:
        with self._lock:
            last, self._current = self._current, None
            if last is not None:
                last.set_result(Answer(results=self._take()))
        started = time.monotonic()
        try:
            item = self._calls.get(timeout=None if self.deadline is None else max(0.0, self.deadline - started))
        except queue.Empty:
            raise LimitsExceeded("max_wall_time") from None
        if item is None:
            raise RunEnded(DISCONNECTED)  # the stop reason says it all: not an error of the run
        call, future = item
        with self._lock:
            self._current = future
            self._seen.clear()
        return ModelResponse(tool_calls=[call], model=self.name, latency_s=time.monotonic() - started)

    def context_window(self) -> int | None:
        return None

    def count_tokens(self, messages: list[dict]) -> int | None:
        return None

    def resolved(self) -> dict[str, Any]:
        return {}

    def client_config(self) -> dict[str, Any]:
        return {}

    def secret_values(self) -> list[tuple[str, str]]:
        return []

    def check_key(self) -> None:
        pass  # the client holds its own keys

    def _refused(self, why: str) -> Answer:
        """The answer to a call that will not run: why, and how the run ended."""
        ended = self._ended or Answer()
        return Answer(ending=[" ".join([why, *ended.ending[:1]])], summary=ended.summary, failed=True)

    def _take(self) -> list:
        seen, self._seen = self._seen, []
        return seen


class BridgeWriter(TrajectoryWriter):
    """The run's trajectory writer, also showing each record to the bridge (after it is on disk)."""

    def __init__(self, path: Path, bridge: ClientBridge):
        super().__init__(path)
        self.bridge = bridge

    def write(self, record) -> None:
        super().write(record)
        self.bridge.observe(record)
