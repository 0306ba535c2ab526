"""The Textual app: one run folder, watched and steered.

Left, the conversation as a tree of steps (each tool call one line with its status, expandable to
the whole observation); right, tabs for the kernel of a version, a diff between two versions, the
versions table, the speedup over versions and the profile of a version; a status line at the
bottom. Everything is read from the run folder every half second (run_view.py), and every
control is a command appended to its control channel (control.py), so the app never blocks on
the agent and can close and come back without the agent noticing.
"""

from __future__ import annotations

import time
from pathlib import Path

from rich.syntax import Syntax
from rich.text import Text
from textual import on
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, ScrollableContainer
from textual.widgets import DataTable, Footer, Header, Sparkline, Static, TabbedContent, TabPane, Tree
from textual.widgets.data_table import RowDoesNotExist

from cuda_agent.control import send
from cuda_agent.tui.run_view import CallView, RunView, StepView
from cuda_agent.tui.screens import ApprovalScreen, MessageScreen, QuitScreen

POLL_S = 0.5
OBSERVATION_LINES = 400  # lines of one observation shown in the tree; the Call tab shows all of it
COLUMNS = ("", "v", "commit", "status", "ms", "vs eager", "vs compile", "reward", "guards")  # narrow: 80 columns


class RunApp(App):
    CSS = """
    #steps { width: 36%; min-width: 28; border-right: solid $primary-darken-2; }
    #status { height: 1; background: $boost; padding: 0 1; }
    ModalScreen { align: center middle; }
    #dialog { width: 90%; max-width: 100; height: auto; max-height: 90%; border: thick $primary;
              background: $surface; padding: 1 2; }
    #dialog TextArea { height: 8; }
    #buttons { height: auto; margin-top: 1; }
    #buttons Button { margin-right: 2; }
    .pane { padding: 0 1; width: auto; }  /* long source lines scroll sideways, not clipped */
    """
    BINDINGS = [
        Binding("p", "pause", "Pause/resume"),
        Binding("a", "approve_mode", "Approve mode"),
        Binding("o", "open_pending", "Decide"),
        Binding("m", "message", "Message"),
        Binding("s", "stop", "Stop"),
        Binding("r", "resume_run", "Resume run"),
        Binding("f", "profile", "Profile"),
        Binding("x", "diff_base", "Diff base"),
        Binding("y", "copy_path", "Copy path"),
        Binding("q", "quit_app", "Quit"),
    ]

    def __init__(self, run_dir: Path, *, agent=None, poll_s: float = POLL_S, gpu: bool = True,
                 resume_args: list[str] | None = None):
        super().__init__()
        self.view = RunView(run_dir)
        self.agent = agent  # the AgentProcess this app started, if any
        self.poll_s, self.gpu = poll_s, gpu
        self.resume_args = resume_args  # extra flags for resuming (model / script), from `cuda-agent tui`
        self.selected: int | None = None  # version shown in the Kernel, Diff and Profile tabs
        self.diff_base: int | None = None
        self._step_nodes: dict[int, object] = {}
        self._call_nodes: dict[str, tuple[object, str]] = {}
        self._notes_shown: dict[int, int] = {}  # step -> how many of its notes the tree shows
        # pending calls with an approval screen open or already decided (the agent's state lists a
        # call until it reads the decision: it must not be asked twice)
        self._asking: set[str] = set()
        self._deferred: set[str] = set()  # pending calls a person chose to decide later (o opens them)
        self._rows, self._best_sha = 0, None
        self._gpu_text, self._gpu_at = "", 0.0

    # -- layout -------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal():
            tree: Tree = Tree("steps", id="steps")
            tree.show_root = False
            yield tree
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

    # -- following the run folder -------------------------------------------------------
    def poll(self) -> None:
        if not self.is_running or not hasattr(self, "w"):
            return  # a last tick while the app shuts down
        v = self.view
        if v.refresh():
            if v.header is not None:
                self.sub_title = f"{v.header.task.name or v.header.task.class_name} | {v.run_dir.name}"
            self._update_steps()
            self._update_versions()
        state = v.control_state()
        if state is not None and state.running:
            for call in state.pending:
                if call.id not in self._asking and call.id not in self._deferred:
                    self._ask(call)
        self.w["status"].update(self.status_line(state))

    def _update_steps(self) -> None:
        tree = self.w["steps"]
        for s in self.view.steps:
            node = self._step_nodes.get(s.step)
            if node is None:
                node = tree.root.add(self._step_label(s), expand=True, data=("step", s.step))
                self._step_nodes[s.step] = node
            else:
                node.set_label(self._step_label(s))
            # a person's message, a format error, a trim or a resume: its own line under the step
            # (at the end of the step's label it would be cut off in the narrow tree)
            for note in s.notes[self._notes_shown.get(s.step, 0):]:
                node.add_leaf(Text(note[:200], style="italic"))
            self._notes_shown[s.step] = len(s.notes)
            for c in s.calls:
                known = self._call_nodes.get(c.id)
                if known is None:
                    child = node.add(self._call_label(c), data=("call", c.id))
                    self._call_nodes[c.id] = (child, c.status)
                    if c.status != "running":
                        self._fill_call(child, c)
                elif known[1] != c.status:
                    child = known[0]
                    child.set_label(self._call_label(c))
                    self._fill_call(child, c)
                    self._call_nodes[c.id] = (child, c.status)

    @staticmethod
    def _step_label(s: StepView) -> Text:
        first = s.text.strip().splitlines()[0] if s.text.strip() else ""
        return Text(f"{s.step}: {first[:70]}")

    @staticmethod
    def _call_label(c: CallView) -> Text:
        style = {"ok": "green", "error": "red", "rejected": "yellow", "running": "cyan"}.get(c.status, "")
        edited = " (edited by a person)" if c.edited else ""
        return Text(c.headline()[:120] + edited, style=style)

    @staticmethod
    def _fill_call(node, c: CallView) -> None:
        node.remove_children()
        lines = c.observation.splitlines()
        for line in lines[:OBSERVATION_LINES]:
            node.add_leaf(Text(line or " "))
        if len(lines) > OBSERVATION_LINES:
            node.add_leaf(Text(f"... {len(lines) - OBSERVATION_LINES} more lines: select the call for all of it",
                               style="dim"))

    def _update_versions(self) -> None:
        versions = self.view.versions()
        table = self.w["table"]
        best = self.view.best()
        best_sha = best.sha if best else None
        if len(versions) != self._rows or best_sha != self._best_sha:
            table.clear()
            for v in versions:
                mark = "*best" if best is not None and v.sha == best.sha else ""
                table.add_row(mark, str(v.version), v.sha[:8], v.status, _ms(v.time_ms), _x(v.speedup_eager),
                              _x(v.speedup_compile), str(v.reward), ", ".join(v.guards) or "-", key=str(v.version))
            self._rows, self._best_sha = len(versions), best_sha
            if self.selected is not None:
                self._cursor_to(self.selected)  # refilling put the cursor on the first row
        if versions and self.selected is None:
            self.show_version((best or versions[-1]).version)
        self.w["spark"].data = [s for _, s in self.view.speedups()]
        self.w["plot-text"].update(self.plot_text())

    # -- what a version shows -----------------------------------------------------------
    def show_version(self, number: int) -> None:
        versions = {v.version: v for v in self.view.versions()}
        if number not in versions:
            return
        self.selected = number
        self._cursor_to(number)
        v = versions[number]
        files = self.view.kernel_files(v.sha)
        parts = []
        for name, text in files.items():
            parts.append(Text(f"── {name} (version {number}, {v.sha[:8]})", style="bold"))
            parts.append(Syntax(text, "cuda" if name.endswith((".cu", ".cuh", ".h")) else "python",
                                line_numbers=True, word_wrap=False, theme=self._syntax_theme()))
        from rich.console import Group

        self.w["kernel-text"].update(Group(*parts) if parts else "no kernel files in this version")
        base = self.diff_base if self.diff_base is not None and self.diff_base != number else number - 1
        old = versions.get(base)
        title = f"diff version {base} -> {number}" if old else f"version {number} (no earlier version)"
        diff = self.view.diff(old.sha if old else None, v.sha)
        self.w["diff-text"].update(Group(Text(title, style="bold"), Syntax(diff, "diff",
                                                                                             theme=self._syntax_theme())))
        profile = self.view.profile_for(number)
        self.w["profile-text"].update(
            Text(profile) if profile else Text(f"no profile was taken up to version {number}", style="dim"))

    def _cursor_to(self, number: int) -> None:
        """Put the table's cursor on that version's row, so the marked row is the one shown."""
        table = self.w["table"]
        try:
            row = table.get_row_index(str(number))
        except RowDoesNotExist:  # the table has not been filled with it yet
            return
        if table.cursor_row != row:
            table.move_cursor(row=row, animate=False)

    def _syntax_theme(self) -> str:
        """Terminal-palette colours that stay readable on the app's dark or light theme."""
        return "ansi_dark" if self.current_theme.dark else "ansi_light"

    def watch_theme(self, theme: str) -> None:
        if self.selected is not None and hasattr(self, "w"):
            self.show_version(self.selected)  # re-highlight the source for the new background

    def plot_text(self) -> Text:
        rows = self.view.speedups()
        if not rows:
            return Text("no timed correct version yet", style="dim")
        top = max(s for _, s in rows)
        against = "torch.compile" if any(e.speedup_compile for e in self.view.evaluations) else "eager"
        out = Text(f"speedup vs {against} (1.00x = level)\n")
        for n, s in rows:
            bar = "█" * max(1, round(20 * s / top))
            out.append(f"v{n:<3} {bar} {s:.2f}x\n", style="green" if s > 1.05 else "yellow")
        return out

    # -- status line --------------------------------------------------------------------
    def status_line(self, state) -> Text:
        """`state`: the agent's control state as this tick read it (None: no agent has run here)."""
        v = self.view
        limits = v.limits()
        model = v.header.model if v.header else "?"
        cost = f"${v.cost:.2f}" if v.priced else "$?"
        if limits.get("max_cost"):
            cost += f"/{limits['max_cost']:.2f}"
        elapsed = time.strftime("%H:%M:%S", time.gmtime(v.elapsed_s()))
        if v.closing is not None and (state is None or not state.running):
            where = f"stopped: {v.closing.stop_reason}"
        elif state is None or not v.live(state):
            where = "not running (r resumes)" if v.header else "starting"
        elif state.pending:
            where = "waiting for approval" + (" (o decides)" if self._deferred else "")
        elif state.stopping:
            where = "stopping"
        elif state.paused:
            where = "paused"
        else:
            where = "running" + (" (approve mode)" if state.approve_mode else "")
        return Text(f"{model} | step {v.last_step()}/{limits.get('max_steps', '?')} | {cost} | {elapsed} | "
                    f"{self.gpu_text()} | {where}")

    def gpu_text(self) -> str:
        if not self.gpu:
            return "GPU: -"
        if time.monotonic() - self._gpu_at > 2.0:
            self._gpu_at = time.monotonic()
            self._gpu_text = _gpu_status()
        return self._gpu_text

    # -- controls -----------------------------------------------------------------------
    def _live(self) -> bool:
        if not self.view.live():
            self.notify("the agent is not running: r resumes the run", severity="warning")
            return False
        return True

    def action_pause(self) -> None:
        if self._live():
            state = self.view.control_state()
            paused = bool(state and state.paused)
            send(self.view.run_dir, "resume" if paused else "pause")
            self.notify("resuming" if paused else "pausing before the next step")

    def action_approve_mode(self) -> None:
        if self._live():
            state = self.view.control_state()
            on = not (state and state.approve_mode)
            send(self.view.run_dir, "approve_mode", on=on)
            self.notify(f"approve mode {'on: each tool call waits for you' if on else 'off'}")

    def action_message(self) -> None:
        if self._live():
            self.push_screen(MessageScreen(), self._send_message)

    def _send_message(self, text: str | None) -> None:
        if text:
            send(self.view.run_dir, "inject", text=text)
            self.notify("sent: the model reads it at its next turn")

    def action_stop(self) -> None:
        if self._live():
            send(self.view.run_dir, "stop")
            self.notify("stopping after the current step; everything is kept (r resumes)")

    def _ask(self, call) -> None:
        self._asking.add(call.id)

        def decided(result: dict | None) -> None:
            if result is None:
                self._asking.discard(call.id)
                self._deferred.add(call.id)
            else:
                send(self.view.run_dir, "decide", **result)

        self.push_screen(ApprovalScreen(call), decided)

    def action_open_pending(self) -> None:
        """Open the approval of calls deferred with Escape."""
        self._deferred.clear()
        state = self.view.control_state()
        if not (state and state.pending):
            self.notify("no tool call is waiting for a decision")

    def action_resume_run(self) -> None:
        if self.view.live():
            self.notify("the run is already going")
            return
        from cuda_agent.tui.launch import start_agent

        args = self.resume_command()
        if args is None:
            self.notify("no model known for this run: start the app with `cuda-agent tui RUN_DIR --model M` "
                        "(or --script FILE)", severity="error")
            return
        try:
            self.agent, _ = start_agent(args, self.view.run_dir / "agent.log")
        except RuntimeError as e:
            self.notify(str(e), severity="error")
            return
        self.notify("resumed")

    def resume_command(self) -> list[str] | None:
        launch = self.view.launch()
        args = ["optimize", "--resume", str(self.view.run_dir)]
        if self.resume_args:
            return args + self.resume_args
        if launch is None or not (launch.model or launch.script):
            return None
        if launch.script:
            args += ["--script", launch.script]
        else:
            args += ["--model", launch.model] + (["--api-base", launch.api_base] if launch.api_base else [])
        return args + launch.options

    def action_profile(self) -> None:
        self.w["tabs"].active = "profile"

    def action_diff_base(self) -> None:
        if self.selected is not None:
            self.diff_base = self.selected
            self.notify(f"diffs now compare against version {self.selected}")

    def action_copy_path(self) -> None:
        path = str(self.view.run_dir / "workspace")
        self.copy_to_clipboard(path)
        self.notify(f"copied {path}")

    def action_quit_app(self) -> None:
        if self.view.live() and (self.agent is None or self.agent.running()):
            self.push_screen(QuitScreen(), self._quit_choice)
        else:
            self.exit()

    def _quit_choice(self, choice: str) -> None:
        if choice == "stop":
            send(self.view.run_dir, "stop")
            self.exit()
        elif choice == "detach":
            self.exit()

    @on(DataTable.RowSelected, "#table")
    @on(DataTable.RowHighlighted, "#table")
    def _row(self, event) -> None:
        if isinstance(event, DataTable.RowHighlighted) and not event.data_table.has_focus:
            return  # the cursor moved because the table was refilled, not by a person
        if event.row_key is not None and event.row_key.value is not None:
            self.show_version(int(event.row_key.value))

    @on(Tree.NodeSelected, "#steps")
    def _node(self, event: Tree.NodeSelected) -> None:
        data = event.node.data
        if not data or data[0] != "call":
            return
        call = next((c for s in self.view.steps for c in s.calls if c.id == data[1]), None)
        if call is not None:
            self.w["call-text"].update(
                Text(f"{call.name} [{call.status}] {call.seconds:.2f} s\narguments: {call.arguments}\n\n{call.observation}"))

    def get_system_commands(self, screen):
        yield from super().get_system_commands(screen)
        for name, help_text, action in (
                ("Pause / resume the agent", "before its next step", self.action_pause),
                ("Approve mode on/off", "each tool call waits for approve, reject or edit", self.action_approve_mode),
                ("Decide the waiting tool call", "reopen an approval put off with Escape", self.action_open_pending),
                ("Message the model", "sent as its next user turn", self.action_message),
                ("Stop the run", "everything is kept; resumable", self.action_stop),
                ("Resume the run", "start the agent again on this run folder", self.action_resume_run),
                ("Profile of the selected version", "the last ncu summary before it", self.action_profile),
                ("Use the selected version as diff base", "diffs compare against it", self.action_diff_base),
                ("Copy the workspace path", "to the clipboard", self.action_copy_path)):
            yield SystemCommand(name, help_text, action)


def _ms(v: float | None) -> str:
    return f"{v:.4f}" if v is not None else "-"


def _x(v: float | None) -> str:
    return f"{v:.2f}x" if v is not None else "-"


def _gpu_status() -> str:
    """GPU 0's name and utilisation through NVML; says so when there is none."""
    try:
        import pynvml

        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        name = pynvml.nvmlDeviceGetName(h)
        name = name.decode() if isinstance(name, bytes) else name
        util = pynvml.nvmlDeviceGetUtilizationRates(h).gpu
        return f"{name.replace('NVIDIA ', '')} {util}%"
    except Exception:
        return "no GPU"
