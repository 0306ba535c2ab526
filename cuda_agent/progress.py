"""What a long step is doing and how far along it is, for whoever waits on it: the re-verification
at the end of a run, `cuda-agent baselines`, the first evaluation of a task (it starts the
evaluator and times the baselines: a minute on a CPU).

On a terminal, rich's progress display (a spinner, the step and what it does now, N of M, the time
taken), gone when the job ends. Elsewhere (a log, a pipe, the TUI's agent process) plain lines on
stderr, so that `--json`'s stdout stays one document: one when a step starts, one for each phase
its caller announces, one for each phase of an evaluation still running after LINE_AFTER_S (what
an evaluation does next depends on its verdict, so a phase that ends at once is never said), and
the step's outcome. Nothing at all when quiet. `on_change` hears what goes on now (None once a job
ends): the TUI's agent writes it to its control state, so the app's status line says "re-verifying
..." rather than "finished".
"""

from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.progress import Progress as RichProgress

if TYPE_CHECKING:
    from cuda_agent.eval.evaluator import Evaluator

LINE_AFTER_S = 1.0  # off a terminal, an evaluation's phase gets a line once it has run this long

# Evaluator.evaluate()'s phase timings (verdict.seconds) that end a phase; the other keys
# (judge_start_*, judge_ready_after, the timing phase's timing_*, total) are parts or sums of these
PHASE_KEYS = ("static", "build", "audit", "start_wait", "load", "correctness", "timing", "kill", "baselines")


class Progress:
    """Where long steps are shown: `console` (default: stderr), live when it is a terminal."""

    def __init__(
        self,
        console: Console | None = None,
        *,
        quiet: bool = False,
        on_change: Callable[[str | None], None] | None = None,
    ):
        self.console = console if console is not None else Console(stderr=True)
        self.quiet, self.on_change = quiet, on_change
        self.live = self.console.is_terminal and not quiet

    @contextmanager
    def job(self, what: str, total: int | None = None, *, lines: bool = True) -> Iterator[Job]:
        """One piece of work of `total` steps (None: not counted). `lines=False`: shown live and to
        `on_change` only, never as lines (an evaluation like many others in a log)."""
        job = Job(self, what, total, lines=lines)
        try:
            yield job
        finally:
            job.close()


class Job:
    def __init__(self, progress: Progress, what: str, total: int | None, *, lines: bool):
        self.p, self.total = progress, total
        self.lines = lines and not progress.quiet and not progress.live  # on a terminal the display says it
        self.step_label, self.now, self.done = what, "", 0
        self.step_started = time.monotonic()
        self._pending: threading.Timer | None = None  # a phase's line, said if it is still running then
        self.bar: RichProgress | None = None
        if progress.live:
            counted = [BarColumn(bar_width=20), MofNCompleteColumn()] if total else []
            # a stream is drawn above the display only when it is a terminal too: rich would
            # otherwise send a redirected stdout (the command's results) to the display's console
            self.bar = RichProgress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                *counted,
                TimeElapsedColumn(),
                console=progress.console,
                transient=True,
                redirect_stdout=_tty(sys.stdout),
                redirect_stderr=_tty(sys.stderr),
            )
            self.task = self.bar.add_task(escape(what), total=total)
            self.bar.start()

    def step(self, label: str) -> None:
        """The next step starts: `label` says which; the count ("(2 of 3)") is added here."""
        self.step_label = f"{label} ({self.done + 1} of {self.total})" if self.total else label
        self.step_started = time.monotonic()
        self._set("", self.step_label)

    def phase(self, what: str) -> None:
        """What the current step does now (said at once: its caller knows it runs)."""
        self._set(what, f"{self.step_label}: {what}")

    def advance(self, outcome: str | None = None) -> None:
        """The current step ended; `outcome` (how it went) is printed, on a terminal too."""
        self._cancel()
        self.done += 1
        if self.bar is not None:
            self.bar.advance(self.task)
        if outcome and not self.p.quiet:
            self.p.console.print(outcome, highlight=False, markup=False, soft_wrap=True)

    def seconds(self) -> float:
        """Since the current step started."""
        return time.monotonic() - self.step_started

    @contextmanager
    def watch(self, ev: Evaluator, *, timing: bool = True) -> Iterator[None]:
        """Show the phases of `ev.evaluate()` while it runs (an Evaluator records them in the dict
        its `phases` makes); an evaluator without that hook (a pool's) is shown as one step."""
        if not hasattr(ev, "phases"):
            yield
            return
        ev.phases = lambda: PhaseSeconds(self, ev, timing)
        self.evaluating(upcoming(ev, "", timing, {}))
        try:
            yield
        finally:
            ev.phases = dict
            self._cancel()

    def evaluating(self, what: str) -> None:
        """An evaluation's phase starts: shown now, a line only if it is still running LINE_AFTER_S on."""
        self._set(what, None)
        if self.lines:
            self._pending = threading.Timer(LINE_AFTER_S, self._line, [f"{self.step_label}: {what}"])
            self._pending.daemon = True
            self._pending.start()

    def close(self) -> None:
        self._cancel()
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
        if self.p.on_change is not None:
            self.p.on_change(None)

    def _set(self, now: str, line: str | None) -> None:
        self._cancel()
        self.now = now
        text = f"{self.step_label}: {now}" if now else self.step_label
        if self.bar is not None:
            self.bar.update(self.task, description=escape(text))
        if self.p.on_change is not None:
            self.p.on_change(text)
        if line is not None:
            self._line(line)

    def _cancel(self) -> None:
        if self._pending is not None:
            self._pending.cancel()
            self._pending = None

    def _line(self, text: str) -> None:
        if self.lines:
            self.p.console.print(text, highlight=False, markup=False, soft_wrap=True)


class PhaseSeconds(dict):
    """evaluate()'s phase timings, telling a Job what runs next as each phase ends."""

    def __init__(self, job: Job, ev: Evaluator, timing: bool):
        super().__init__()
        self.job, self.ev, self.timing = job, ev, timing

    def __setitem__(self, key: str, value: float) -> None:
        super().__setitem__(key, value)
        if key in PHASE_KEYS:
            self.job.evaluating(upcoming(self.ev, key, self.timing, self))


def upcoming(ev: Evaluator, ended: str, timing: bool, seen: dict) -> str:
    """What evaluate() does once phase `ended` is over ("": it starts), as far as it can be told then."""
    cfg = ev.cfg
    if ended == "correctness" and timing:
        beside = (
            f", with {baseline_names(cfg)} beside it in {cfg.baseline_rounds} interleaved rounds"
            if cfg.baseline_rounds and cfg.baselines
            else ""
        )
        return "timing it" + beside
    if ended == "kill" and "timing" in seen and not cfg.baseline_rounds and cfg.baselines:
        return f"the {baseline_names(cfg)} baselines: read from the cache, or timed now (once per task)"
    return {
        "": "static guards",
        "static": "building the kernels",
        "build": "auditing the built library",
        "audit": "starting the recorder and the judge",
        "start_wait": "loading the candidate",
        "load": f"checking correctness on {cfg.n_sets} input sets",
    }.get(ended, "finishing")


def baseline_names(cfg) -> str:
    """An EvalConfig's baselines as a person reads them: "eager and torch.compile"."""
    return " and ".join("torch.compile" if m == "compile" else m for m in cfg.baselines)


def _tty(stream) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # replaced by something that is no file, or closed
        return False
