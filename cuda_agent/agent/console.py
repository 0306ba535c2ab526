"""What a person sees of a headless run, and how `--confirm` asks them. `LiveWriter` is a
TrajectoryWriter that also keeps a one-line rich status current (step, last tool, best version,
cost), so the loop needs no display code. `ConsoleApproval` is the approval hook behind
`--confirm`: approve, reject with a reason for the model, or edit the arguments."""

from __future__ import annotations

import json

from rich.console import Console
from rich.live import Live
from rich.markup import escape
from rich.prompt import Prompt
from rich.text import Text

from cuda_agent.agent.loop import Decision
from cuda_agent.agent.protocol import ToolCall
from cuda_agent.records import Evaluation, ModelTurn, ToolResultRecord
from cuda_agent.trajectory import TrajectoryWriter


class LiveWriter(TrajectoryWriter):
    def __init__(self, path, console: Console, model: str):
        super().__init__(path)
        self.console, self.model = console, model
        self.step, self.last, self.cost = 0, "starting", 0.0
        self.best: Evaluation | None = None
        self.live = Live(self._status(), console=console, refresh_per_second=4, transient=True)
        self.live.start()

    def write(self, record) -> None:
        super().write(record)
        if isinstance(record, ModelTurn):
            self.step = record.step
            self.cost += record.cost or 0.0
            self.last = ", ".join(c.name for c in record.tool_calls) or "(no tool call)"
        elif isinstance(record, ToolResultRecord):
            head = record.observation.splitlines()[0] if record.observation else ""
            self.last = f"{record.name}: {head[:80]}"
            self.console.print(Text(f"step {record.step} {record.name} [{record.status}] {head[:100]}"))
        elif isinstance(record, Evaluation) and record.status == "correct":
            key = (record.reward, -(record.time_ms or float("inf")))
            if self.best is None or key > (self.best.reward, -(self.best.time_ms or float("inf"))):
                self.best = record
        self.live.update(self._status())

    def _status(self) -> Text:
        best = "no correct version yet"
        if (b := self.best) is not None:
            best = (
                f"best v{b.version}: reward {b.reward}, {b.time_ms or 0:.4f} ms, "
                f"{b.speedup_compile or 0:.2f}x vs compile, {b.speedup_eager or 0:.2f}x vs eager"
            )
        return Text(f"{self.model} | step {self.step} | {self.last[:60]} | {best} | ${self.cost:.2f}")

    def close(self) -> None:
        self.live.stop()  # a no-op once stopped
        super().close()


class ConsoleApproval:
    def __init__(self, console: Console):
        self.console = console

    def __call__(self, call: ToolCall) -> Decision:
        args = call.arguments if len(call.arguments) < 600 else call.arguments[:600] + " ..."
        self.console.print(f"[bold]{escape(call.name)}[/] {escape(args)}", highlight=False)
        choice = Prompt.ask("approve?", choices=["a", "r", "e"], default="a", console=self.console)
        if choice == "r":
            reason = Prompt.ask("reason for the model", default="rejected by a person", console=self.console)
            return Decision(approve=False, reason=reason)
        if choice == "e":
            while True:
                edited = Prompt.ask("new arguments (JSON)", default=call.arguments, console=self.console)
                try:
                    json.loads(edited)
                    return Decision(approve=True, edited_arguments=edited)
                except ValueError as e:
                    self.console.print(f"[red]not JSON[/]: {escape(str(e))}; try again", highlight=False)
        return Decision(approve=True)
