"""What the TUI shows of a run folder, read from disk only: the trajectory (read incrementally,
so a live run is followed without re-reading it), the workspace's versions and their files (git),
and the agent's control state. No Textual here, so it is tested and reused on its own."""

from __future__ import annotations

import bisect
import difflib
import time
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.control import AgentState, agent_running, read_state
from cuda_agent.follow import read_new_lines
from cuda_agent.records import (
    Closing,
    Evaluation,
    FormatErrorRecord,
    Header,
    ModelTurn,
    Resume,
    ToolResultRecord,
    Trim,
    UserMessage,
    parse_record,
)
from cuda_agent.run_folder import RunFolder
from cuda_agent.tui.launch_record import Launch, read_launch
from cuda_agent.workspace.trailers import VersionInfo


@dataclass
class CallView:
    id: str
    name: str
    arguments: str
    status: str = "running"  # until its result is recorded
    observation: str = ""
    seconds: float = 0.0
    edited: bool = False
    data: dict = field(default_factory=dict)

    def headline(self) -> str:
        """One line: the tool, its status and the first line of what it said."""
        first = self.observation.strip().splitlines()[0] if self.observation.strip() else ""
        return f"{self.name} [{self.status}] {first}".strip()


@dataclass
class StepView:
    step: int
    text: str = ""  # the model's message
    calls: list[CallView] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)  # injected messages, format errors, trims, resumes


class RunView:
    def __init__(self, run_dir: Path):
        self.run = RunFolder(run_dir)
        self.run_dir = self.run.path
        self.trajectory = self.run.trajectory
        self.header: Header | None = None
        self.closing: Closing | None = None
        self.steps: list[StepView] = []  # by step number
        self._by_step: dict[int, StepView] = {}
        self.evaluations: list[Evaluation] = []
        self.cost = 0.0
        self.priced = False
        self._offset = 0
        self._calls: dict[str, CallView] = {}
        self._repo = None
        self._versions: list[VersionInfo] = []
        self._versions_key: str | None = None

    def refresh(self) -> bool:
        """Read the records appended since the last call; True when something new came in."""
        lines, self._offset = read_new_lines(self.trajectory, self._offset)
        for line in lines:
            with suppress(ValueError):  # a damaged line: the rest of the run is still worth showing
                self._take(parse_record(line))
        return bool(lines)

    def _take(self, r) -> None:
        if isinstance(r, Header):
            self.header = r
        elif isinstance(r, ModelTurn):
            s = self._step(r.step)
            s.text = r.content or ""
            for c in r.tool_calls:
                view = CallView(id=c.id, name=c.name, arguments=c.arguments, edited=c.original_arguments is not None)
                s.calls.append(view)
                self._calls[c.id] = view
            if r.cost is not None:
                self.cost += r.cost
                self.priced = True
        elif isinstance(r, ToolResultRecord):
            view = self._calls.get(r.call_id)
            if view is None:  # a result whose turn we did not see (a resumed run's answer to a cut-off call)
                view = CallView(id=r.call_id, name=r.name, arguments="")
                self._step(r.step).calls.append(view)
            view.status, view.observation, view.seconds, view.data = r.status, r.observation, r.seconds, r.data
        elif isinstance(r, Evaluation):
            self.evaluations.append(r)
        elif isinstance(r, UserMessage):
            self._step(r.step + 1).notes.append(
                f"message from a person: {r.content}" if r.injected else f"note: {r.content}"
            )
        elif isinstance(r, FormatErrorRecord):
            self._step(r.step).notes.append(f"format error: {r.message}")
        elif isinstance(r, Trim):
            self._step(r.step + 1).notes.append(f"context trimmed: {r.tokens_before} -> {r.tokens_after} tokens")
        elif isinstance(r, Resume):
            self.closing = None
            self._step(r.step + 1).notes.append(f"resumed (previous stop: {r.previous_stop or 'killed'})")
        elif isinstance(r, Closing):
            self.closing = r

    def _step(self, n: int) -> StepView:
        if n not in self._by_step:
            self._by_step[n] = StepView(step=n)
            bisect.insort(self.steps, self._by_step[n], key=lambda v: v.step)  # a note can open the next step early
        return self._by_step[n]

    def _history(self):
        from cuda_agent.workspace.history import History
        from cuda_agent.workspace.paths import WorkspaceError

        if self._repo is None:
            import git

            try:
                self._repo = History.open(self.run.workspace)
            except (WorkspaceError, git.InvalidGitRepositoryError):
                return None
        return self._repo

    def versions(self) -> list[VersionInfo]:
        """The evaluated versions (the run's verdict ledger, never the trailers), re-read only when an
        evaluation came in."""
        key = f"{len(self.evaluations)}:{self.closing is not None}"
        if key != self._versions_key:
            h = self._history()
            try:
                self._versions = h.versions() if h else []
            except Exception:  # a repository mid-commit: keep the last good list
                return self._versions
            self._versions_key = key
        return self._versions

    def best(self) -> VersionInfo | None:
        best = None
        for v in self.versions():
            best = v if v.better_than(best) else best
        return best

    def kernel_files(self, sha: str) -> dict[str, str]:
        """kernels/*.cu(h) and model_new.py at one version."""
        h = self._history()
        if h is None:
            return {}
        from cuda_agent.filenames import shown

        names = h.git("ls-tree", "-r", "-z", "--name-only", sha, "--", "model_new.py", "kernels").split("\0")
        wanted = [
            n for n in names if (n.startswith("kernels/") and n.endswith((".cu", ".cuh", ".h"))) or n == "model_new.py"
        ]
        # a name that is not UTF-8 is read by its real bytes, shown escaped
        return {
            shown(n): h.show(sha, n).decode("utf-8", "replace")
            for n in sorted(wanted, key=lambda n: (n == "model_new.py", n))
        }

    def diff(self, old_sha: str | None, new_sha: str) -> str:
        """A unified diff of kernels/ and model_new.py between two versions (old None: from empty)."""
        old = self.kernel_files(old_sha) if old_sha else {}
        new = self.kernel_files(new_sha)
        out: list[str] = []
        for name in sorted(set(old) | set(new)):
            a, b = old.get(name, ""), new.get(name, "")
            if a != b:
                out += difflib.unified_diff(a.splitlines(), b.splitlines(), f"a/{name}", f"b/{name}", lineterm="")
        return "\n".join(out) or "no change in kernels/ or model_new.py"

    def profile_for(self, version: int) -> str | None:
        """The last profile summary taken before that version's evaluation (what the model saw)."""
        until = {e.version: e.step for e in self.evaluations if e.version is not None}.get(version)
        found = [
            c.observation
            for s in self.steps
            if until is None or s.step <= until
            for c in s.calls
            if c.name == "profile" and c.status == "ok"
        ]
        return found[-1] if found else None

    def control_state(self) -> AgentState | None:
        return read_state(self.run_dir)

    def launch(self) -> Launch | None:
        return read_launch(self.run_dir)

    def live(self, state: AgentState | None = None) -> bool:
        return agent_running(self.run_dir, state)

    def limits(self) -> dict:
        return (self.header.config.get("agent") or {}) if self.header else {}

    def last_step(self) -> int:
        return self.steps[-1].step if self.steps else 0

    def elapsed_s(self) -> float:
        if self.closing is not None:
            return self.closing.wall_s
        return time.time() - self.header.time if self.header else 0.0

    def speedups(self) -> list[tuple[int | None, float]]:
        """(version, speedup vs torch.compile, else vs eager) of each timed correct version, as evaluated."""
        pairs = [
            (e.version, e.speedup_compile if e.speedup_compile is not None else e.speedup_eager)
            for e in self.evaluations
            if e.status == "correct"
        ]
        return [(v, s) for v, s in pairs if s is not None]
