"""The agent's side of the control channel (cuda_agent/control.py), through the loop's three hooks:
`checkpoint` runs before each model query (blocks while paused; raises StopRequested after a stop),
`inbox` hands over injected messages, `approval` waits for a decision on each tool call while
approve mode is on. Waiting polls the commands file, so a client that goes away (detached TUI)
leaves the run paused or waiting until one comes back, never crashed."""

from __future__ import annotations

import os
import time
from pathlib import Path

from cuda_agent.agent.errors import StopRequested
from cuda_agent.agent.loop import Decision
from cuda_agent.agent.protocol import ToolCall
from cuda_agent.control import AgentState, CommandReader, PendingCall, write_state

POLL_S = 0.1


class RemoteControl:
    def __init__(self, run_dir: Path, *, approve_mode: bool = False, poll_s: float = POLL_S):
        self.run_dir, self.poll_s = Path(run_dir), poll_s
        self.reader = CommandReader(self.run_dir)
        self.state = AgentState(pid=os.getpid(), approve_mode=approve_mode)
        self.messages: list[str] = []
        self.decisions: dict[str, Decision] = {}
        write_state(self.run_dir, self.state)

    def checkpoint(self) -> None:
        self._poll()
        while self.state.paused and not self.state.stopping:
            time.sleep(self.poll_s)
            self._poll()
        if self.state.stopping:
            raise StopRequested("stopped")

    def inbox(self) -> list[str]:
        self._poll()
        out, self.messages = self.messages, []
        return out

    def approval(self, call: ToolCall) -> Decision:
        self._poll()
        if not self.state.approve_mode:
            return Decision()
        self.state.pending.append(PendingCall(id=call.id, name=call.name, arguments=call.arguments))
        write_state(self.run_dir, self.state)
        try:
            while call.id not in self.decisions:
                if self.state.stopping:
                    return Decision(approve=False, reason="the run was stopped by a person")
                if not self.state.approve_mode:  # approve mode turned off while this call waited
                    return Decision()
                time.sleep(self.poll_s)
                self._poll()
            return self.decisions.pop(call.id)
        finally:
            self.state.pending = [p for p in self.state.pending if p.id != call.id]
            write_state(self.run_dir, self.state)

    def activity(self, text: str | None) -> None:
        """What takes a while now (cuda_agent/progress.py's on_change), for the app's status line."""
        self.state.activity = text
        write_state(self.run_dir, self.state)

    def close(self, stop_reason: str | None) -> None:
        self.state.running, self.state.paused, self.state.pending = False, False, []
        self.state.stop_reason = stop_reason
        write_state(self.run_dir, self.state)

    def _poll(self) -> None:
        commands = self.reader.new()
        for c in commands:
            if c.op in ("pause", "resume"):
                self.state.paused = c.op == "pause"
            elif c.op == "stop":
                self.state.stopping = True
            elif c.op == "inject" and c.text.strip():
                self.messages.append(c.text)
            elif c.op == "approve_mode":
                self.state.approve_mode = c.on
            elif c.op == "decide" and c.call_id:
                self.decisions[c.call_id] = Decision(
                    approve=c.approve, reason=c.reason, edited_arguments=c.edited_arguments
                )
        if commands:
            write_state(self.run_dir, self.state)
