"""A verdict as a person reads it: one rich table plus findings, errors and notes."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from cuda_agent.eval.verdict import Timing, Verdict

# `cuda-agent eval` exit codes (documented in README.md and --help)
EXIT_CODES = {
    "correct": 0,
    "incorrect": 1,
    "guard_violation": 1,
    "compile_error": 3,
    "runtime_error": 4,
    "timeout": 4,
    "unscorable": 5,
    "error": 5,
}


def _ms(t: Timing | None) -> str:
    if t is None:
        return "-"
    return f"{t.median_ms:.4f} ms [{t.p20_ms:.4f}-{t.p80_ms:.4f}] n={t.reps}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def render_verdict(v: Verdict, console: Console, title: str = "") -> None:
    table = Table(title=title or None, show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    status_style = "green" if v.correct else "red"
    table.add_row("status", f"[{status_style}]{v.status}[/]")
    table.add_row("reward", str(v.reward))
    passed = sum(s.ok for s in v.sets)
    table.add_row("input sets", f"{passed}/{len(v.sets)} correct")
    worst = max((o.max_abs_err or 0.0 for s in v.sets for o in s.outputs), default=None)
    worst_rel = max((o.norm_rel_err or 0.0 for s in v.sets for o in s.outputs), default=None)
    if worst is not None:
        table.add_row("max abs err", f"{worst:.3e} (normwise rel {worst_rel:.2e}, vs float64 reference)")
    table.add_row("candidate", _ms(v.timing))
    table.add_row("eager", _ms(v.eager))
    table.add_row("torch.compile", _ms(v.compiled))
    table.add_row("speedup vs eager", _x(v.speedup_vs_eager))
    table.add_row("speedup vs compile", _x(v.speedup_vs_compile))
    if v.timing and v.timing.clocks:
        c = v.timing.clocks
        table.add_row("clocks", f"SM {c.get('sm_mhz', 0):.0f} MHz, mem {c.get('mem_mhz', 0):.0f} MHz, "
                                f"{c.get('temp_c', 0):.0f} C ({v.timing.device})")
    if v.seconds:
        table.add_row("seconds", ", ".join(f"{k} {s:.2f}" for k, s in v.seconds.items()))
    console.print(table)
    for f in v.findings:
        colour = {"fail": "red", "warn": "yellow"}.get(f.severity, "dim")
        where = f" ({f.where})" if f.where else ""
        console.print(f"[{colour}]{f.severity} {f.guard}[/]{where}: {f.message}", highlight=False)
    for s in v.sets:
        for o in s.outputs:
            if not o.ok:
                console.print(f"[red]set seed={s.seed} output {o.index}[/]: {o.reason}", highlight=False)
    if v.error:
        console.print(f"[red]error[/]: {v.error}", highlight=False)
    for n in v.notes:
        console.print(f"[dim]note: {n}[/]", highlight=False)
