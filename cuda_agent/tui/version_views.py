"""What the right-hand tabs show of the run's versions, as Rich renderables: a version's row in
the Versions table, its kernel files, a diff, the speedup plot."""

from __future__ import annotations

from rich.console import Group
from rich.syntax import Syntax
from rich.text import Text

from cuda_agent.tui.run_view import RunView

COLUMNS = ("", "v", "commit", "status", "ms", "vs eager", "vs compile", "reward", "guards")  # narrow: 80 columns


def version_row(v, best_sha: str | None) -> tuple[str, ...]:
    """`v`, one of RunView.versions(), as the COLUMNS of its table row."""
    mark = "*best" if v.sha == best_sha else ""
    return (
        mark,
        str(v.version),
        v.sha[:8],
        v.status,
        _shown(v.time_ms, "{:.4f}"),
        _shown(v.speedup_eager, "{:.2f}x"),
        _shown(v.speedup_compile, "{:.2f}x"),
        str(v.reward),
        ", ".join(v.guards) or "-",
    )


def kernel_view(files: dict[str, str], number: int, sha: str, theme: str):
    parts = []
    for name, text in files.items():
        parts.append(Text(f"── {name} (version {number}, {sha[:8]})", style="bold"))
        parts.append(
            Syntax(
                text,
                "cuda" if name.endswith((".cu", ".cuh", ".h")) else "python",
                line_numbers=True,
                word_wrap=False,
                theme=theme,
            )
        )
    return Group(*parts) if parts else "no kernel files in this version"


def diff_view(title: str, diff: str, theme: str) -> Group:
    return Group(Text(title, style="bold"), Syntax(diff, "diff", theme=theme))


def plot_text(view: RunView) -> Text:
    rows = view.speedups()
    if not rows:
        return Text("no timed correct version yet", style="dim")
    top = max(s for _, s in rows)
    against = "torch.compile" if any(e.speedup_compile for e in view.evaluations) else "eager"
    out = Text(f"speedup vs {against} (1.00x = level)\n")
    for n, s in rows:
        bar = "█" * max(1, round(20 * s / top))
        out.append(f"v{n:<3} {bar} {s:.2f}x\n", style="green" if s > 1.05 else "yellow")
    return out


def _shown(v: float | None, fmt: str) -> str:
    return fmt.format(v) if v is not None else "-"
