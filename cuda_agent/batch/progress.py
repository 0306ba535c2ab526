"""The batch's progress bar: tasks done / total, ETA, running cost, pass and faster-than-compile
rates so far. Off a terminal (logs, tests) it prints a line per task started and per task finished
instead, each with the count done so far; quiet: nothing (each task's own steps are in its log)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from cuda_agent.batch.rows import TaskRow


class BatchProgress:
    def __init__(self, console: Console, total: int, done: list[TaskRow], *, quiet: bool = False):
        self.console, self.total, self.quiet = console, total, quiet
        self.rows = list(done)
        self.running = 0
        self.live = console.is_terminal and not quiet
        # ETA from the whole run, not rich's default 30 s window: a task takes minutes
        self.progress = Progress(
            TextColumn("[bold]batch"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            TextColumn("{task.fields[stats]}"),
            console=console,
            speed_estimate_period=24 * 3600,
            disable=not self.live,
        )
        self.task = self.progress.add_task("batch", total=total, completed=len(done), stats=self._stats())

    def _stats(self) -> str:
        n = len(self.rows)
        cost = sum(r.cost or 0.0 for r in self.rows)
        passed = sum(r.correct for r in self.rows)
        faster = sum(1 for r in self.rows if r.correct and (r.speedup_compile or 0) > 1.0)
        rate = lambda k: f"{100 * k / n:.0f}%" if n else "-"  # noqa: E731
        return f"${cost:.2f}  pass {rate(passed)}  >compile {rate(faster)}  running {self.running}"

    def started(self, task_id: str) -> None:
        self.running += 1
        self.progress.update(self.task, stats=self._stats())
        if not (self.live or self.quiet):  # on a terminal the bar's "running" says it
            self._print(f"{task_id}: started ({self._count()}, {self.running} running)")

    def ended(self, row: TaskRow) -> None:
        self.running = max(0, self.running - 1)
        if row.outcome != "interrupted":
            self.rows.append(row)
            self.progress.advance(self.task)
        self.progress.update(self.task, stats=self._stats())
        speed = (
            f", {row.speedup_compile:.2f}x vs compile"
            if row.speedup_compile
            else (f", {row.speedup_eager:.2f}x vs eager" if row.speedup_eager else "")
        )
        why = f" ({row.error})" if row.error and not row.correct else ""
        line = (
            f"{row.task_id}: {row.outcome}, {row.stop_reason}, "
            f"{'correct' if row.correct else 'no correct result'}{speed}{why} ({self._count()})"
        )
        if not self.quiet:
            self._print(line)

    def _count(self) -> str:
        return f"{len(self.rows)} of {self.total} done"

    def _print(self, line: str) -> None:
        self.progress.console.print(line, highlight=False, markup=False, soft_wrap=True)

    def __enter__(self) -> BatchProgress:
        self.progress.start()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.stop()
