"""The app's modal screens: approve a tool call, type a message for the model, and what closing
the app does to a running agent."""

from __future__ import annotations

import json

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, TextArea

from cuda_agent.control import PendingCall


class ApprovalScreen(ModalScreen[dict | None]):
    """One pending call: approve it, reject it with a reason, or run edited arguments.
    Dismisses with the fields of a `decide` command (None: decide later)."""

    BINDINGS = [Binding("escape", "dismiss", "Decide later (o reopens)")]
    AUTO_FOCUS = "#approve"

    def __init__(self, call: PendingCall):
        super().__init__()
        self.call = call

    def compose(self) -> ComposeResult:
        try:
            pretty = json.dumps(json.loads(self.call.arguments or "{}"), indent=1)
        except json.JSONDecodeError:
            pretty = self.call.arguments
        with Vertical(id="dialog"):
            yield Label(f"The model wants to call [b]{self.call.name}[/b]: approve, reject or edit", id="title")
            yield TextArea(pretty, id="arguments")
            yield Input(placeholder="reason for rejecting (goes to the model)", id="reason")
            with Horizontal(id="buttons"):
                yield Button("Approve", id="approve", variant="success")
                yield Button("Run edited", id="edit", variant="primary")
                yield Button("Reject", id="reject", variant="error")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        decision = {"call_id": self.call.id, "approve": event.button.id != "reject"}
        if event.button.id == "reject":
            decision["reason"] = self.query_one("#reason", Input).value.strip() or "rejected by a person"
        elif event.button.id == "edit":
            decision["edited_arguments"] = self.query_one("#arguments", TextArea).text
            try:
                json.loads(decision["edited_arguments"])
            except json.JSONDecodeError as e:
                self.notify(f"the arguments are not JSON: {e}", severity="error")
                return
        self.dismiss(decision)


class MessageScreen(ModalScreen[str | None]):
    """A message for the model, sent as the next user turn."""

    BINDINGS = [Binding("escape", "dismiss", "Cancel")]
    AUTO_FOCUS = "#message"

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label("Message for the model (its next turn reads it); Enter sends", id="title")
            yield Input(placeholder="e.g. try float4 loads in the inner loop", id="message")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value.strip() or None)


class QuitScreen(ModalScreen[str]):
    """Closing while the agent runs: stop it (resumable), leave it running (detach), or stay."""

    BINDINGS = [Binding("escape", "dismiss('stay')", "Stay")]
    AUTO_FOCUS = "#detach"

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Label(
                "The agent is still running. Stop it (everything is kept; resumable), or leave it "
                "running and attach later with `cuda-agent tui RUN_DIR`?",
                id="title",
            )
            with Horizontal(id="buttons"):
                yield Button("Detach", id="detach", variant="primary")
                yield Button("Stop run", id="stop", variant="error")
                yield Button("Stay", id="stay")

    def on_button_pressed(self, event: Button.Pressed) -> None:
        self.dismiss(event.button.id or "stay")
