"""report.md for one run: task, model, stop reason, every version in a table (the best marked),
the re-verification, cost and tokens, wall time, and speedup.png (speedup over versions). Read
from what the run left behind (the verdict ledger for versions and the best, never the commits'
trailers; the trajectory for the rest), so it can be written again for any run folder; without
matplotlib (the `plot` extra) it says so and is otherwise complete."""

from __future__ import annotations

from pathlib import Path

from cuda_agent import install_hint
from cuda_agent.records import Closing, Evaluation, Header, ModelTurn
from cuda_agent.results.final import Reverification
from cuda_agent.run_folder import RunFolder
from cuda_agent.trajectory import read_trajectory
from cuda_agent.workspace import VersionInfo, Workspace


def write_report(
    run: RunFolder,
    workspace: Workspace,
    trajectory_path: Path | None,
    final: Reverification | None,
    result=None,
    *,
    dropin: Path | None = None,
    dropin_error: str | None = None,
) -> Path:
    """Write the run folder's report.md (and its speedup.png when matplotlib is there) from the trajectory
    at `trajectory_path` (the run's own: `run.trajectory`); `result` is the loop's RunResult, or None to
    take the stop reason and wall time from the trajectory."""
    records = read_trajectory(trajectory_path) if trajectory_path and Path(trajectory_path).is_file() else []
    header = next((r for r in records if isinstance(r, Header)), None)
    closings = [r for r in records if isinstance(r, Closing)]
    steps = {r.commit: r.step for r in records if isinstance(r, Evaluation) and r.commit}
    versions = workspace.versions()
    task = workspace.record.task
    stop = result.stop_reason if result else (closings[-1].stop_reason if closings else "unknown (no closing record)")
    wall = result.wall_s if result else sum(c.wall_s for c in closings)
    lines = [
        f"# cuda-agent run: {task.name}",
        "",
        f"- task: `{task.path}` class `{task.class_name}`, hash `{task.source_hash}`",
        f"- model: {header.model if header else 'unknown (no trajectory header)'}",
        f"- stop reason: {stop}" + (f" ({result.error.splitlines()[0]})" if result and result.error else ""),
        f"- versions evaluated: {len(versions)}; wall time: {wall:.1f} s",
        "",
    ]
    lines += _result(final, dropin, dropin_error)
    lines += _table(versions, workspace.best(), final, steps)
    lines += _cost([r for r in records if isinstance(r, ModelTurn)])
    lines += ["## Speedup over versions", "", _plot(versions, run.plot), ""]
    path = run.report
    path.write_text("\n".join(lines))
    return path


def _result(final: Reverification | None, dropin: Path | None, dropin_error: str | None) -> list[str]:
    out = ["## Result", ""]
    if final is None:
        return out + ["not re-verified: the run ended before its versions were checked again", ""]
    out += [f"- {line}" for line in final.summary()]
    v = final.verdict
    if v is not None:
        worst = max((o.max_abs_err or 0.0 for s in v.sets for o in s.outputs), default=None)
        speed = [
            f"{_x(s)} vs {name}"
            for s, name in ((v.speedup_vs_eager, "eager"), (v.speedup_vs_compile, "torch.compile"))
            if s is not None
        ]
        out.append(
            f"- re-verified: {_ms(v.timing.median_ms if v.timing else None)} per call, "
            f"{', '.join(speed) or 'no baseline timed'}, reward {v.reward}, "
            f"max abs error {'n/a' if worst is None else f'{worst:.3e}'} (vs the float64 reference)"
        )
    if dropin is not None:
        out.append(f"- drop-in: `{dropin}` (`from {dropin.name} import load_layer`; see its README.md)")
    elif dropin_error:
        out.append(f"- no drop-in: {dropin_error}")
    return out + [""]


def _table(
    versions: list[VersionInfo], best: VersionInfo | None, final: Reverification | None, steps: dict[str, int]
) -> list[str]:
    verified = final.verified.version.sha if final and final.verified else None
    failed = {a.version.sha for a in final.attempts if not a.passed} if final else set()
    head = [
        "",
        "version",
        "step",
        "commit",
        "status",
        "correct",
        "time ms",
        "vs eager",
        "vs compile",
        "reward",
        "failing guards",
    ]
    out = ["## Versions", "", "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for v in versions:
        marks = (["**best**"] if best and v.sha == best.sha else []) + (["re-verified"] if v.sha == verified else [])
        marks += ["failed re-verification"] if v.sha in failed else []
        out.append(
            f"| {', '.join(marks)} | {v.version} | {steps.get(v.sha, '')} | `{v.sha[:10]}` | "
            f"{v.status} | {'yes' if v.correct else 'no'} | {_num(v.time_ms)} | {_x(v.speedup_eager)} | "
            f"{_x(v.speedup_compile)} | {v.reward} | {', '.join(v.guards) or '-'} |"
        )
    if not versions:
        out.append("| | - | | | no version was evaluated | | | | | | |")
    return out + [""]


def _cost(turns: list[ModelTurn]) -> list[str]:
    prompt = sum(t.prompt_tokens for t in turns)
    completion = sum(t.completion_tokens for t in turns)
    priced = [t.cost for t in turns if t.cost is not None]
    unpriced = len(turns) - len(priced)
    cost = (
        f"${sum(priced):.4f} over {len(priced)} priced turns"
        if priced
        else ("unpriced (no turn had a known price: --price-in/--price-out give one)")
    )
    out = [
        "## Cost and tokens",
        "",
        f"- model turns: {len(turns)}",
        f"- tokens: {prompt + completion} ({prompt} prompt, {completion} completion)",
        f"- cost: {cost}",
    ]
    if unpriced and priced:
        out.append(f"- {unpriced} turns had no known price: the cost above leaves them out (a lower bound)")
    injected = sum(t.injected for t in turns)
    if injected:
        out.append(f"- {injected} turns were written by a script or a person, not the model")
    return out + [""]


def _plot(versions: list[VersionInfo], path: Path) -> str:
    """speedup.png: each correct version's speedup vs eager and torch.compile, failed ones at 0."""
    path.unlink(missing_ok=True)  # never leave an older run's plot next to this report
    if not versions:
        return "no plot: no version was evaluated"
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
        from matplotlib.ticker import MaxNLocator
    except ImportError:
        return f"no plot: matplotlib is not installed (`{install_hint('plot')}` and write the report again)"
    fig = Figure(figsize=(7, 4), dpi=120)
    FigureCanvasAgg(fig)  # the Agg canvas, without touching pyplot's global backend
    ax = fig.add_subplot()
    for key, label, style in (("speedup_compile", "vs torch.compile", "o-"), ("speedup_eager", "vs eager", "s--")):
        pts = [(v.version, getattr(v, key)) for v in versions if v.correct and getattr(v, key) is not None]
        if pts:
            ax.plot(*zip(*pts), style, label=label)
    bad = [v.version for v in versions if not v.correct]
    if bad:
        ax.plot(bad, [0] * len(bad), "x", color="tab:red", label="incorrect or failed")
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set(xlabel="version", ylabel="speedup (x)", title="speedup of each timed, correct version")
    ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(path)
    return f"![speedup over versions]({path.name})"


def _ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.4f} ms"


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4f}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"
