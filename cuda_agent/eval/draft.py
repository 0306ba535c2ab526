"""The one writer of an evaluation's verdict. The phases (recording, correctness, timing,
baselines) report what they found to a `Draft`; how a verdict may change (a finding is kept once,
a failure sets the status and its reason, the reward follows from the rest) lives here alone, and
`score()` makes the Verdict every later part reads. A phase never holds the Verdict itself.
"""

from __future__ import annotations

from typing import Iterable, Literal

from cuda_agent.eval.reward import milestone_reward, speedup
from cuda_agent.eval.verdict import Finding, SetResult, Status, Timing, Verdict

Baselines = Literal["cached", "fresh", "interleaved"]


class Draft:
    """What one evaluation has found so far. Reading: `ok`, `failing`, `status`, `timing`, `baselines`, `notes`,
    `guards()`. Writing: `fail`, `find`, `note`, `add_set`, `timed`, `baselines_from`
    with `baseline` (one mode at a time), `memory`, `spend`. Then `score()`."""

    def __init__(self, *, findings: Iterable[Finding] = ()):
        self._v = Verdict(status="correct")
        self._spent: dict[str, float] = {}  # seconds of a phase's own parts (timing_phase.measure's)
        self.find(*findings)

    # -- reading ---------------------------------------------------------------------------
    @property
    def status(self) -> Status:
        return self._v.status

    @property
    def ok(self) -> bool:
        """Correct so far and no failing finding: the next phase may run."""
        return self._v.status == "correct" and not self._v.failing_findings

    @property
    def failing(self) -> bool:
        return bool(self._v.failing_findings)

    @property
    def timing(self) -> Timing | None:
        return self._v.timing

    @property
    def baselines(self) -> Baselines | None:
        return self._v.baselines

    @property
    def notes(self) -> list[str]:
        return list(self._v.notes)

    def said(self) -> list[str]:
        """Everything it says so far, for a caller that keeps none of it: the error, the findings, the notes."""
        return ([self._v.error] if self._v.error else []) + [f.message for f in self._v.findings] + self.notes

    def guards(self) -> set[str]:
        return {f.guard for f in self._v.findings}

    # -- writing ---------------------------------------------------------------------------
    def fail(self, status: Status, error: str | None = None) -> None:
        """The evaluation failed (`status`), for `error` if one is given; a later failure's
        reason replaces an earlier one's, as the last thing that went wrong is what stopped it."""
        self._v.status = status
        if error is not None:
            self._v.error = error

    def find(self, *findings: Finding | None) -> None:
        """Each finding once (the same guard and message from every input set is one finding)."""
        for f in findings:
            if f is not None and f not in self._v.findings:
                self._v.findings.append(f)

    def note(self, text: str) -> None:
        if text not in self._v.notes:
            self._v.notes.append(text)

    def add_set(self, result: SetResult) -> None:
        """One input set's comparison; a wrong one makes the candidate incorrect."""
        self._v.sets.append(result)
        if not result.ok and self._v.status == "correct":
            self._v.status = "incorrect"

    def timed(self, timing: Timing | None) -> None:
        self._v.timing = timing

    def baselines_from(self, how: Baselines) -> None:
        """How the baselines given next (`baseline`, one mode at a time) were timed: "cached" (once per
        task, GPU and torch version), "fresh" (now, after the candidate) or "interleaved" (beside it)."""
        self._v.baselines = how

    def baseline_timing(self, mode: str) -> Timing | None:
        return self._v.eager if mode == "eager" else self._v.compiled

    def baseline(self, mode: str, timing: Timing | None) -> None:
        if mode == "eager":
            self._v.eager = timing
        else:
            self._v.compiled = timing

    def judged(self, files: dict[str, str]) -> None:
        """The candidate's files this verdict judges (Verdict.judged_files)."""
        self._v.judged_files = dict(sorted(files.items()))

    def memory(self, who: str, peak_bytes: int) -> None:
        """A process's peak GPU memory (torch's allocator), in GiB on the verdict; 0 is not recorded."""
        if peak_bytes:
            self._v.memory_gib[who] = round(peak_bytes / 2**30, 3)

    def spend(self, part: str, seconds: float) -> None:
        """Add to where a phase's time went (a part of it, summed over its calls): the verdict's
        `seconds` holds it beside the phases'."""
        self._spent[part] = self._spent.get(part, 0.0) + seconds

    # -- the verdict -------------------------------------------------------------------------
    def score(self, seconds: dict[str, float]) -> Verdict:
        """The verdict: a failing finding turns a correct candidate into a guard violation; the
        speedups and the milestone reward follow from the figures; `seconds`, where the time went."""
        v = self._v
        guard_failed = bool(v.failing_findings)
        if v.status == "correct" and guard_failed:
            v.status = "guard_violation"
        v.correct = v.status == "correct"
        t = v.timing.counted_ms if v.timing else None
        te = v.eager.median_ms if v.eager else None
        tc = v.compiled.median_ms if v.compiled else None
        if v.correct and t:
            v.speedup_vs_eager = speedup(te, t) if te else None
            v.speedup_vs_compile = speedup(tc, t) if tc else None
        v.reward = milestone_reward(v.correct, guard_failed, t, te, tc)
        v.seconds = {k: round(x, 4) for k, x in (seconds | self._spent).items()}  # the phases, then the parts
        return v
