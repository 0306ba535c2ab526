"""The summary as Markdown and JSON, the speedup distribution as a PNG (matplotlib, the `plot`
extra, imported only here), and two summaries side by side (`cuda-agent compare`)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from cuda_agent import install_hint
from cuda_agent.batch.rows import TaskRow
from cuda_agent.batch.summary import Metrics, Summary

PLOT = "speedups.png"

# (label, how to read it from Metrics)
ROWS = [
    ("tasks finished", lambda m: str(m.tasks)),
    ("correct", lambda m: _pct(m.correctness_rate) + f" ({m.correct})"),
    ("faster than eager", lambda m: _pct(m.faster_than_eager_rate)),
    ("faster than torch.compile", lambda m: _pct(m.faster_than_compile_rate)),
    ("geomean speedup vs eager (failures = 1.0)", lambda m: _x(m.geomean_speedup_eager)),
    ("geomean speedup vs compile (failures = 1.0)", lambda m: _x(m.geomean_speedup_compile)),
    ("geomean vs eager, correct only", lambda m: _x(m.geomean_speedup_eager_correct)),
    ("geomean vs compile, correct only", lambda m: _x(m.geomean_speedup_compile_correct)),
    *[(f"fast_{p} vs eager", lambda m, p=p: _pct(m.fast_p_eager.get(p))) for p in ("1", "1.5", "2")],
    *[(f"fast_{p} vs compile", lambda m, p=p: _pct(m.fast_p_compile.get(p))) for p in ("1", "1.5", "2")],
    ("mean reward", lambda m: "n/a" if m.mean_reward is None else f"{m.mean_reward:.2f}"),
    ("failed runs", lambda m: ", ".join(f"{k} {v}" for k, v in sorted(m.failures.items())) or "none"),
    ("steps / tokens", lambda m: f"{m.steps} / {m.tokens}"),
    ("cost", lambda m: "n/a" if m.cost is None else f"${m.cost:.2f}"),
]


def _pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f}%"


def _x(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.3f}x"


def headline(s: Summary) -> str:
    m = s.overall
    return (
        f"{s.finished}/{s.tasks_selected} tasks finished: correct {_pct(m.correctness_rate)}, faster than compile "
        f"{_pct(m.faster_than_compile_rate)}, geomean vs compile {_x(m.geomean_speedup_compile)} (failures = 1.0)"
    )


def columns(s: Summary) -> list[tuple[str, Metrics]]:
    return [("all", s.overall), *s.levels.items()]


def markdown(s: Summary, plot: str | None) -> str:
    cols = columns(s)
    lines = [
        f"# Batch summary: {s.mode}" + (f", {s.model}" if s.model else ""),
        "",
        f"- tasks: `{s.task_dir}`; {s.finished} of {s.tasks_selected} finished, {s.pending} pending",
        f"- {s.rule}",
        "",
        "| metric | " + " | ".join(name for name, _ in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    lines += [f"| {label} | " + " | ".join(get(m) for _, m in cols) + " |" for label, get in ROWS]
    lines += [
        "",
        f"![speedup distribution]({plot})"
        if plot
        else f"(no speedups.png: install matplotlib, `{install_hint('plot')}`)",
        "",
    ]
    return "\n".join(lines)


def write_summary(out: Path, s: Summary, rows: list[TaskRow]) -> Path:
    plot = plot_speedups(out / PLOT, rows)
    (out / "summary.json").write_text(json.dumps(s.model_dump(mode="json"), indent=1) + "\n")
    path = out / "summary.md"
    path.write_text(markdown(s, plot.name if plot else None))
    return path


def plot_speedups(path: Path, rows: list[TaskRow]) -> Path | None:
    """Histogram of log2 speedups of correct results vs eager and vs compile; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    series = {
        name: [math.log2(s) for r in rows if r.correct and (s := getattr(r, key)) and s > 0]
        for name, key in (("vs eager", "speedup_eager"), ("vs torch.compile", "speedup_compile"))
    }
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, xs in series.items():
        if xs:
            ax.hist(xs, bins=20, alpha=0.6, label=f"{name} ({len(xs)} correct)")
    ax.axvline(0, color="black", linewidth=0.8)
    ax.set(
        xlabel="log2 speedup (0 = as fast as the baseline)",
        ylabel="tasks",
        title=f"Speedup distribution ({sum(not r.correct for r in rows)} tasks without a correct result not shown)",
    )
    if any(series.values()):
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def compare_tables(a: Summary, b: Summary, name_a: str, name_b: str) -> list:
    """Rich Tables, one per column both summaries have (all, then each shared level): metric | A | B."""
    from rich.table import Column, Table

    cols_a, cols_b = dict(columns(a)), dict(columns(b))
    tables = []
    for c in [c for c in cols_a if c in cols_b]:
        t = Table(
            "metric",
            Column("A", justify="right"),
            Column("B", justify="right"),
            title=f"{c}: A = {name_a}, B = {name_b}",
            title_justify="left",
        )
        for label, get in ROWS:
            t.add_row(label, get(cols_a[c]), get(cols_b[c]))
        tables.append(t)
    return tables


def head_to_head(rows_a: dict[str, TaskRow], rows_b: dict[str, TaskRow]) -> dict[str, int]:
    """On the tasks both finished: where only one is correct, and, both correct, whose speedup vs eager is higher."""
    both = [t for t in rows_a if t in rows_b]
    out = {
        "shared": len(both),
        "only_a_correct": 0,
        "only_b_correct": 0,
        "both_correct": 0,
        "a_faster": 0,
        "b_faster": 0,
    }
    for t in both:
        ra, rb = rows_a[t], rows_b[t]
        if ra.correct and rb.correct:
            out["both_correct"] += 1
            # speedups, not times: the two batches may have run on different GPUs
            sa, sb = ra.speedup_eager, rb.speedup_eager
            if sa and sb and sa != sb:
                out["a_faster" if sa > sb else "b_faster"] += 1
        elif ra.correct or rb.correct:
            out["only_a_correct" if ra.correct else "only_b_correct"] += 1
    return out
