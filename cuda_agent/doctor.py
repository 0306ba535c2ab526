"""`cuda-agent doctor`: what this machine has for building, timing and profiling kernels, one
line per check (doctor_checks.py) run on the facts (doctor_facts.py). An exception in a check
becomes that check's failure, so a broken driver or toolkit still gets a full report; torch and
pynvml are imported inside the checks, so importing this (and `cuda-agent --help`) stays fast."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, computed_field

from cuda_agent.doctor_checks import CHECKS, Found
from cuda_agent.doctor_facts import Facts

if TYPE_CHECKING:
    from rich.console import Console


class Check(BaseModel):
    """One line of the report."""

    name: str
    ok: bool
    detail: str  # what was found
    fix: str | None = None  # what to do when not ok
    severity: Literal["required", "optional"] = "required"

    @computed_field  # in the JSON too, so scripts need not re-derive it
    @property
    def status(self) -> Literal["OK", "FAIL", "WARN"]:
        return "OK" if self.ok else "FAIL" if self.severity == "required" else "WARN"


def run_checks(model: str | None = None, api_base: str | None = None) -> list[Check]:
    facts, checks = Facts(model, api_base), []
    for name, severity, fn in CHECKS:
        try:
            found = fn(facts)
        except Exception as e:  # one broken tool must not hide the rest of the report
            found = Found(
                False,
                f"the check raised {type(e).__name__}: {e}",
                "see the detail: a broken install of this tool, or a bug in cuda-agent doctor",
            )
        checks.append(Check(name=name, ok=found.ok, detail=found.detail, fix=found.fix, severity=severity))
    return checks


def exit_code(checks: list[Check]) -> int:
    return 0 if all(c.ok for c in checks if c.severity == "required") else 1


def summary(checks: list[Check]) -> str:
    failed = [c.name for c in checks if c.status == "FAIL"]
    warned = sum(c.status == "WARN" for c in checks)
    tail = f" ({warned} warning{'s' * (warned != 1)})" if warned else ""
    if failed:
        return f"Not ready: {len(failed)} required check(s) failed: {', '.join(failed)}{tail}."
    return f"Ready: every required check passed{tail}."


def render(checks: list[Check], console: Console) -> None:
    from rich.table import Table
    from rich.text import Text

    style = {"OK": "green", "FAIL": "bold red", "WARN": "yellow"}
    table = Table(title="cuda-agent doctor", show_lines=True)
    for col in ("check", "status", "found", "what to do"):
        table.add_column(col, overflow="fold")
    for c in checks:  # Text(), not markup: details hold paths and messages with brackets
        table.add_row(c.name, Text(c.status, style=style[c.status]), Text(c.detail), Text(c.fix or ""))
    console.print(table)
    console.print(Text(summary(checks), style="bold red" if exit_code(checks) else "bold green"))
