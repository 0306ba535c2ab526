"""A verdict as a person reads it: one rich table plus findings, errors and notes."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from cuda_agent.eval.baselines import TIMED_NOTE, timed_now
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


# after the baselines' line in what the model reads: where those figures come from
BASELINE_SOURCE = {
    "cached": (
        " (cached: timed once for this task and GPU and reused by every benchmark until the final "
        "re-verification, which times them again beside your kernel)"
    ),
    "fresh": " (timed again after your kernel, not cached)",
    "interleaved": " (timed again beside your kernel, in interleaved rounds)",
}


def _ms(t: Timing | None, counted: bool = False) -> str:
    """A figure as shown; `counted`: the candidate's, whose speed-up counts median + the overhead's possible
    error (a baseline's counts its median: the error buys the candidate speed, never the baseline)."""
    if t is None:
        return "-"
    text = f"{t.median_ms:.4f} ms [{t.p20_ms:.4f}-{t.p80_ms:.4f}] n={t.reps}"
    if counted and t.resolution_ms > 0.005 * t.median_ms:  # where the overhead's possible error shows in the speed-up
        text += f", counted as {t.counted_ms:.4f} ms (the harness's overhead could read {t.resolution_ms:.4f} high)"
    return text


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
    table.add_row("candidate", _ms(v.timing, counted=True))
    table.add_row("eager", _ms(v.eager))
    table.add_row("torch.compile", _ms(v.compiled))
    if v.baselines:
        table.add_row(
            "baselines",
            "timed now, cached for the next evaluations (once per task, GPU and torch version)"
            if v.baselines == "cached" and timed_now(v.notes)
            else {
                "cached": "cached (timed once per task, GPU and torch version)",
                "fresh": "timed again after the candidate",
                "interleaved": "timed again beside the candidate, interleaved rounds",
            }[v.baselines],
        )
    table.add_row("speedup vs eager", _x(v.speedup_vs_eager))
    table.add_row("speedup vs compile", _x(v.speedup_vs_compile))
    if v.timing and v.timing.clocks:
        c = v.timing.clocks
        table.add_row(
            "clocks",
            f"SM {c.get('sm_mhz', 0):.0f} MHz, mem {c.get('mem_mhz', 0):.0f} MHz, "
            f"{c.get('temp_c', 0):.0f} C ({v.timing.device})",
        )
    if v.memory_gib:
        table.add_row("GPU memory peak", ", ".join(f"{k} {g:.2f} GiB" for k, g in v.memory_gib.items()))
    if v.seconds:
        table.add_row("seconds", ", ".join(f"{k} {s:.2f}" for k, s in v.seconds.items()))
    console.print(table)
    for f in v.findings:
        colour = {"fail": "red", "warn": "yellow"}.get(f.severity, "dim")
        where = f" ({f.where})" if f.where else ""
        console.print(f"[{colour}]{f.severity} {f.guard}[/]{escape(where)}: {escape(f.message)}", highlight=False)
    for s in v.sets:
        for o in s.outputs:
            if not o.ok:
                console.print(f"[red]set seed={s.seed} output {o.index}[/]: {escape(o.reason or '')}", highlight=False)
    if v.error:
        console.print(f"[red]error[/]: {escape(v.error)}", highlight=False)
    for n in v.notes:
        if n != TIMED_NOTE:  # the baselines' row says it
            console.print(f"[dim]note: {escape(n)}[/]", highlight=False)


def verdict_text(v: Verdict) -> str:
    """The verdict as plain text for a model: status first, then what failed and what to do."""
    lines = [f"status: {v.status} (reward {v.reward})"]
    if v.sets:
        lines.append(f"input sets: {sum(s.ok for s in v.sets)}/{len(v.sets)} correct")
        errs = [o for s in v.sets for o in s.outputs if o.norm_rel_err is not None]
        if errs:
            worst = max(errs, key=lambda o: o.norm_rel_err or 0.0)
            lines.append(
                f"worst error vs float64 truth: max abs {worst.max_abs_err:.3e}, normwise rel "
                f"{worst.norm_rel_err:.2e} (fp32 reference's own: {worst.ref_norm_rel_err or 0:.2e})"
            )
    for s in v.sets:
        if s.error:
            lines.append(f"set seed={s.seed}: {s.error.splitlines()[0]}")
        for o in s.outputs:
            if not o.ok:
                lines.append(f"set seed={s.seed} output {o.index}: {o.reason}")
    if v.timing:
        lines.append(f"time: {_ms(v.timing, counted=True)}")
    if v.eager or v.compiled:
        lines.append(f"eager: {_ms(v.eager)}; torch.compile: {_ms(v.compiled)}" + BASELINE_SOURCE.get(v.baselines, ""))
    if v.speedup_vs_eager is not None or v.speedup_vs_compile is not None:
        lines.append(f"speedup: {_x(v.speedup_vs_eager)} vs eager, {_x(v.speedup_vs_compile)} vs torch.compile")
    for f in v.findings:
        where = f" ({f.where})" if f.where else ""
        lines.append(f"{f.severity} {f.guard}{where}: {f.message}")
    if v.error:
        lines.append(f"error:\n{v.error}")
    lines += [f"note: {n}" for n in v.notes]
    return "\n".join(lines)
