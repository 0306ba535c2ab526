"""The run folder's layout: the one place that says what a run keeps where. Every other module asks a
RunFolder for a path (tests/test_run_folder_layout.py fails on a layout name spelled anywhere else).

    <run>/                        runs/<task>-<YYYYmmdd-HHMMSS> (optimize), a batch's tasks/<id>
      workspace/                  the model's folder (workspace/workspace.py)
      workspace.git/              its history, kept beside it, out of the model's reach (workspace/git_dir.py)
      trajectory.jsonl            every record of the run, as it happened (trajectory.py, records.py)
      ledger.jsonl                the harness's verdict ledger (workspace/ledger.py)
      outcome.json                the last process's RunOutcome (run.py)
      report.md  speedup.png      the report and its plot (results/report.py)
      dropin/                     the verified kernels as a layer a user imports (results/dropin.py)
      error.log                   the traceback of a run that crashed (cli_runs.py)
      agent.log                   the output of the app's agent process (tui/)
      control/                    the control channel (control.py): commands.jsonl, state.json, launch.json
      verdict.json                an eval-only batch task's verdict (batch/child.py)

Only paths here, nothing read or written: who reads a file decides how (a file the model or a
candidate could have written is read through untrusted_files.py). The jail of the shell, profile
and sanitize shows the whole run folder empty (tools/shell.py, profiling/runner.py): the workspace
is the only part of it the model reaches. A leaf: it imports nothing of the project.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

_GIT = ".git"  # the workspace's repository: <the workspace folder's name>.git, beside it
WORKSPACE = "workspace"
TRAJECTORY = "trajectory.jsonl"
LEDGER = "ledger.jsonl"
OUTCOME = "outcome.json"
REPORT = "report.md"
PLOT = "speedup.png"
DROPIN = "dropin"
ERROR_LOG = "error.log"
AGENT_LOG = "agent.log"
CONTROL = "control"
COMMANDS = "commands.jsonl"
STATE = "state.json"
LAUNCH = "launch.json"
VERDICT = "verdict.json"


@dataclass(frozen=True)
class RunFolder:
    """One run folder. `workspace_name` is the workspace folder's name: `workspace` in every run folder
    the commands make; a workspace made at another path (Workspace.create's `path`) has the folder
    around it as its run folder (`around`)."""

    path: Path
    workspace_name: str = WORKSPACE

    def __post_init__(self) -> None:
        object.__setattr__(self, "path", Path(self.path))

    @classmethod
    def around(cls, workspace: Path) -> RunFolder:
        """The run folder that holds the workspace at `workspace`."""
        workspace = Path(workspace)
        return cls(workspace.parent, workspace.name)

    @classmethod
    def all_under(cls, folder: Path) -> list[RunFolder]:
        """Every run folder (one holding a trajectory) at any depth below `folder`."""
        return [cls(t.parent) for t in Path(folder).rglob(TRAJECTORY)]

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def workspace(self) -> Path:
        return self.path / self.workspace_name

    @property
    def history(self) -> Path:
        """The workspace's git repository, beside it (workspace/git_dir.py)."""
        return self.path / f"{self.workspace_name}{_GIT}"

    @property
    def trajectory(self) -> Path:
        return self.path / TRAJECTORY

    @property
    def ledger(self) -> Path:
        return self.path / LEDGER

    @property
    def outcome(self) -> Path:
        return self.path / OUTCOME

    @property
    def report(self) -> Path:
        return self.path / REPORT

    @property
    def plot(self) -> Path:
        return self.path / PLOT

    @property
    def dropin(self) -> Path:
        return self.path / DROPIN

    @property
    def error_log(self) -> Path:
        return self.path / ERROR_LOG

    @property
    def agent_log(self) -> Path:
        return self.path / AGENT_LOG

    @property
    def control(self) -> Path:
        return self.path / CONTROL

    @property
    def commands(self) -> Path:
        """Appended by a client (the app), one command a line."""
        return self.control / COMMANDS

    @property
    def state(self) -> Path:
        """Rewritten whole by the agent."""
        return self.control / STATE

    @property
    def launch(self) -> Path:
        """How the run was started, to resume it the same way."""
        return self.control / LAUNCH

    @property
    def verdict(self) -> Path:
        return self.path / VERDICT
