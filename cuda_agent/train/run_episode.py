"""One run folder read back for export (export.py fills it; verl_data.py writes it as verl's rows):
a module of its own so that the two writers share it without importing each other."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cuda_agent.records import Header

UNKNOWN = "unknown"  # a run recorded before its header said (protocol, prompt version)


@dataclass
class Episode:
    """One run folder, read back."""

    path: Path
    header: Header
    messages: list[dict]  # the whole history as the run ended (trims replayed), marked turns with weight 0
    reward: int
    steps: int
    stop_reason: str | None
    model_turns: int = 0  # model turn records, whoever wrote them
    protocol: str = UNKNOWN  # "native", "text", "mixed" (a resume changed it) or "unknown"
    edited_steps: list[int] = field(default_factory=list)
    scripted_steps: list[int] = field(default_factory=list)
    person_messages: list[int] = field(default_factory=list)
    trimmed_steps: list[int] = field(default_factory=list)
    format_error_steps: list[int] = field(default_factory=list)
    external_steps: list[int] = field(default_factory=list)  # turns an MCP client made: its calls, no text
    external_clients: list[str] = field(default_factory=list)  # their mcp:<client>/<version> names
    records: list[list[dict]] = field(default_factory=list)  # sft/rft records: one per stretch between trims
    disagrees: str | None = None  # how the trajectory contradicts the verdict ledger (or that there is none)

    @property
    def marked(self) -> bool:
        return bool(self.edited_steps or self.scripted_steps or self.person_messages)

    def metadata(self) -> dict[str, Any]:
        t = self.header.task
        return {
            "run": str(self.path),
            "run_id": self.header.run_id,
            "model": self.header.model,
            "task": {"name": t.name, "class_name": t.class_name, "hash": t.hash},
            "reward": self.reward,
            "steps": self.steps,
            "stop_reason": self.stop_reason,
            "protocol": self.protocol,
            "prompt_version": UNKNOWN if self.header.prompt_version is None else self.header.prompt_version,
            "edited_steps": self.edited_steps,
            "scripted_steps": self.scripted_steps,
            "person_message_steps": self.person_messages,
            "trimmed_steps": self.trimmed_steps,
            "format_error_steps": self.format_error_steps,
            "external_steps": self.external_steps,
            "external_clients": self.external_clients,
        }
