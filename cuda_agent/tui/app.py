"""The Textual app: one run folder, watched and steered. Left, the steps (steps_tree.py); right,
tabs for a version's kernel, a diff, the versions, the speedups and a profile (version_views.py);
the status line below (status.py). It reads the run folder every half second (run_view.py) and
steers by appending commands to its control channel (steering.py), so it never blocks on the
agent and can close and come back without the agent noticing."""

from __future__ import annotations

from pathlib import Path

from rich.text import Text
from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, ScrollableContainer
from textual.widgets import DataTable, Footer, Header, Sparkline, Static, TabbedContent, TabPane, Tree
from textual.widgets.data_table import RowDoesNotExist

from cuda_agent.tui.run_view import RunView
from cuda_agent.tui.status import GpuStatus, status_line
from cuda_agent.tui.steering import Steering
from cuda_agent.tui.steps_tree import StepsTree
from cuda_agent.tui.version_views import COLUMNS, diff_view, kernel_view, plot_text, version_row

POLL_S = 0.5
# key, action, footer label, and the command palette's entry for it (ctrl+p)
COMMANDS = [
    ("p", "pause", "Pause/resume", "Pause / resume the agent", "before its next step"),
    ("a", "approve_mode", "Approve mode", "Approve mode on/off", "each tool call waits for approve, reject or edit"),
    ("o", "open_pending", "Decide", "Decide the waiting tool call", "reopen an approval put off with Escape"),
    ("m", "message", "Message", "Message the model", "sent as its next user turn"),
    ("s", "stop", "Stop", "Stop the run", "everything is kept; resumable"),
    ("r", "resume_run", "Resume run", "Resume the run", "start the agent again on this run folder"),
    ("f", "profile", "Profile", "Profile of the selected version", "the last ncu summary before it"),
    ("x", "diff_base", "Diff base", "Use the selected version as diff base", "diffs compare against it"),
    ("y", "copy_path", "Copy path", "Copy the workspace path", "to the clipboard"),
]


class RunApp(Steering, App):
    CSS_PATH = "app.tcss"
    BINDINGS = [Binding(key, action, label) for key, action, label, *_ in COMMANDS] + [Binding("q", "quit_app", "Quit")]

    def __init__(
        self, run_dir: Path, *, agent=None, poll_s: float = POLL_S, gpu: bool = True, resume_with: tuple | None = None
    ):
        super().__init__()
        self.view = RunView(run_dir)
        self.agent = agent  # the AgentProcess this app started, if any
        self.poll_s = poll_s
        self.gpu = GpuStatus(gpu)
        # (Settings, script or None) for resuming, from `cuda-agent tui --model/--script`
        self.resume_with = resume_with
        self.selected: int | None = None  # version shown in the Kernel, Diff and Profile tabs
        self.diff_base: int | None = None
        # pending calls with an approval screen open or already decided (the agent's state lists a
        # call until it reads the decision: it must not be asked twice)
        self._asking: set[str] = set()
        self._deferred: set[str] = set()  # pending calls a person chose to decide later (o opens them)
        self._rows, self._best_sha = 0, None

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal():
            yield StepsTree("steps", id="steps")
            with TabbedContent(id="tabs", initial="versions"):
                with TabPane("Versions", id="versions"):
                    yield DataTable(id="table", cursor_type="row", zebra_stripes=True)
                with TabPane("Kernel", id="kernel"):
                    yield ScrollableContainer(Static("no version yet", id="kernel-text", classes="pane"))
                with TabPane("Diff", id="diff"):
                    yield ScrollableContainer(Static("select a version", id="diff-text", classes="pane"))
                with TabPane("Plot", id="plot"):
                    yield Sparkline([], id="spark")
                    yield ScrollableContainer(Static("no timed version yet", id="plot-text", classes="pane"))
                with TabPane("Profile", id="profile"):
                    yield ScrollableContainer(Static("no profile yet", id="profile-text", classes="pane"))
                with TabPane("Call", id="call"):
                    yield ScrollableContainer(Static("select a tool call on the left", id="call-text", classes="pane"))
        yield Static("", id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.title = "cuda-agent"
        # the main screen's widgets, kept: while a dialog is open, queries would search the dialog
        self.w = {w.id: w for w in self.screen.query("#steps, #table, #tabs, #spark, #status, .pane")}
        self.w["table"].add_columns(*COLUMNS)
        self.poll()
        self.set_interval(self.poll_s, self.poll)

    def poll(self) -> None:
        if not self.is_running or not hasattr(self, "w"):
            return  # a last tick while the app shuts down
        v = self.view
        if v.refresh():
            if v.header is not None:
                self.sub_title = f"{v.header.task.name or v.header.task.class_name} | {v.run_dir.name}"
            self.w["steps"].update_steps(v.steps)
            self._update_versions()
        state = v.control_state()
        if state is not None and state.running:
            for call in state.pending:
                if call.id not in self._asking and call.id not in self._deferred:
                    self._ask(call)
        self.w["status"].update(status_line(v, state, self.gpu.text(), bool(self._deferred)))

    def _update_versions(self) -> None:
        versions, best = self.view.versions(), self.view.best()
        best_sha = best.sha if best else None
        if len(versions) != self._rows or best_sha != self._best_sha:
            self.w["table"].clear()
            for v in versions:
                self.w["table"].add_row(*version_row(v, best_sha), key=str(v.version))
            self._rows, self._best_sha = len(versions), best_sha
            if self.selected is not None:
                self._cursor_to(self.selected)  # refilling put the cursor on the first row
        if versions and self.selected is None:
            self.show_version((best or versions[-1]).version)
        self.w["spark"].data = [s for _, s in self.view.speedups()]
        self.w["plot-text"].update(plot_text(self.view))

    def show_version(self, number: int) -> None:
        versions = {v.version: v for v in self.view.versions()}
        if number not in versions:
            return
        self.selected = number
        self._cursor_to(number)
        v = versions[number]
        theme = "ansi_dark" if self.current_theme.dark else "ansi_light"  # readable on the app's dark or light theme
        self.w["kernel-text"].update(kernel_view(self.view.kernel_files(v.sha), number, v.sha, theme))
        base = self.diff_base if self.diff_base is not None and self.diff_base != number else number - 1
        old = versions.get(base)
        title = f"diff version {base} -> {number}" if old else f"version {number} (no earlier version)"
        self.w["diff-text"].update(diff_view(title, self.view.diff(old.sha if old else None, v.sha), theme))
        profile = self.view.profile_for(number)
        self.w["profile-text"].update(
            Text(profile) if profile else Text(f"no profile was taken up to version {number}", style="dim")
        )

    def _cursor_to(self, number: int) -> None:
        """Put the table's cursor on that version's row, so the marked row is the one shown."""
        table = self.w["table"]
        try:
            row = table.get_row_index(str(number))
        except RowDoesNotExist:  # the table has not been filled with it yet
            return
        if table.cursor_row != row:
            table.move_cursor(row=row, animate=False)

    def watch_theme(self, theme: str) -> None:
        if self.selected is not None and hasattr(self, "w"):
            self.show_version(self.selected)  # re-highlight the source for the new background

    def action_profile(self) -> None:
        self.w["tabs"].active = "profile"

    def action_diff_base(self) -> None:
        if self.selected is not None:
            self.diff_base = self.selected
            self.notify(f"diffs now compare against version {self.selected}")

    def action_copy_path(self) -> None:
        path = str(self.view.run.workspace)
        self.copy_to_clipboard(path)
        self.notify(f"copied {path}")

    @on(DataTable.RowSelected, "#table")
    @on(DataTable.RowHighlighted, "#table")
    def _row(self, event) -> None:
        if isinstance(event, DataTable.RowHighlighted) and not event.data_table.has_focus:
            return  # the cursor moved because the table was refilled, not by a person
        if event.row_key is not None and event.row_key.value is not None:
            self.show_version(int(event.row_key.value))

    @on(Tree.NodeSelected, "#steps")
    def _node(self, event: Tree.NodeSelected) -> None:
        call = next((c for s in self.view.steps for c in s.calls if event.node.data == ("call", c.id)), None)
        if call is not None:
            self.w["call-text"].update(
                Text(
                    f"{call.name} [{call.status}] {call.seconds:.2f} s\narguments: {call.arguments}\n\n"
                    f"{call.observation}"
                )
            )

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        for _, action, _, name, help_text in COMMANDS:
            yield SystemCommand(name, help_text, getattr(self, f"action_{action}"))
