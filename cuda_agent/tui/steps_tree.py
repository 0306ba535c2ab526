"""The conversation as a tree of steps: each tool call one line with its status, expandable to
its observation; a person's message, a format error, a trim or a resume a line of its own."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Tree

from cuda_agent.tui.run_view import CallView, StepView

OBSERVATION_LINES = 400  # lines of one observation shown in the tree; the Call tab shows all of it


class StepsTree(Tree):
    """Grows with the run: nodes already shown are relabelled, never rebuilt (a person may have
    folded or selected them). A call's node holds ("call", its id); a step's ("step", number)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.show_root = False
        self._step_nodes: dict[int, object] = {}
        self._call_nodes: dict[str, tuple[object, str]] = {}  # call id -> (node, status shown)
        self._notes_shown: dict[int, int] = {}  # step -> how many of its notes the tree shows

    def update_steps(self, steps: list[StepView]) -> None:
        for s in steps:
            if s.step not in self._step_nodes:
                self._step_nodes[s.step] = self.root.add(_step_label(s), expand=True, data=("step", s.step))
            node = self._step_nodes[s.step]
            node.set_label(_step_label(s))
            # its own line under the step: at the end of the step's label it would be cut off
            for note in s.notes[self._notes_shown.get(s.step, 0) :]:
                node.add_leaf(Text(note[:200], style="italic"))
            self._notes_shown[s.step] = len(s.notes)
            for c in s.calls:
                if c.id not in self._call_nodes:  # a new call shows as running until its result is filled in
                    self._call_nodes[c.id] = (node.add(_call_label(c), data=("call", c.id)), "running")
                child, shown = self._call_nodes[c.id]
                if shown != c.status:
                    child.set_label(_call_label(c))
                    _fill_call(child, c)
                    self._call_nodes[c.id] = (child, c.status)


def _step_label(s: StepView) -> Text:
    first = s.text.strip().splitlines()[0] if s.text.strip() else ""
    return Text(f"{s.step}: {first[:70]}")


def _call_label(c: CallView) -> Text:
    style = {"ok": "green", "error": "red", "rejected": "yellow", "running": "cyan"}.get(c.status, "")
    edited = " (edited by a person)" if c.edited else ""
    return Text(c.headline()[:120] + edited, style=style)


def _fill_call(node, c: CallView) -> None:
    node.remove_children()
    lines = c.observation.splitlines()
    for line in lines[:OBSERVATION_LINES]:
        node.add_leaf(Text(line or " "))
    if len(lines) > OBSERVATION_LINES:
        node.add_leaf(
            Text(f"... {len(lines) - OBSERVATION_LINES} more lines: select the call for all of it", style="dim")
        )
