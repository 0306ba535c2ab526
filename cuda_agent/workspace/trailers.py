"""A version's commit message: a subject a person can scan in `git log`, and git trailers with the
metrics, parsed back into VersionInfo. No git calls here, only text."""

from __future__ import annotations

import math
from datetime import datetime, timezone

from ..eval.verdict import Verdict
from ..records import Evaluation, VersionMetrics

NONE = "n/a"  # a metric the verdict does not have (no timing for an incorrect version)
# one `git log` record per commit: fields split by US, records by RS, trailers as git parses them
LOG_FORMAT = "%H%x1f%ct%x1f%s%x1f%(trailers:only,unfold)%x1e"
# trailer -> VersionMetrics field, for the timings and speedups
_TIMES = {
    "Time-Ms": "time_ms",
    "Eager-Ms": "eager_ms",
    "Compile-Ms": "compile_ms",
    "Speedup-Eager": "speedup_eager",
    "Speedup-Compile": "speedup_compile",
}


class VersionInfo(VersionMetrics):
    """One evaluated version: as the harness's ledger records it (History.versions, best), or as a
    commit's trailers say (parse_log: display only, the model can write those)."""

    sha: str
    version: int
    correct: bool
    guards: list[str] = []
    subject: str = ""
    when: datetime
    content: str | None = None  # the ledger's content hash of its files (content.py); None from trailers

    def evaluation(self, step: int) -> Evaluation:
        """The trajectory's record of this version, evaluated at `step`."""
        return Evaluation(
            step=step,
            commit=self.sha,
            version=self.version,
            **self.model_dump(include=set(VersionMetrics.model_fields)),
        )

    def rank(self) -> tuple[int, float]:
        """Larger is better: reward first, then the lower time (a missing time ranks last)."""
        return (self.reward, -(self.time_ms if self.time_ms is not None else math.inf))

    def better_than(self, other: VersionInfo | None) -> bool:
        """A correct version beats none, or one it strictly outranks; ties keep the older best."""
        return self.correct and self.status == "correct" and (other is None or self.rank() > other.rank())


def subject_line(verdict: Verdict, version: int) -> str:
    """e.g. `v3: correct, 1.42x vs compile, reward 3` or `v4: incorrect (2/5 sets)`."""
    head = f"v{version}: {verdict.status}"
    if verdict.status == "correct":
        if verdict.speedup_vs_compile is not None:
            head += f", {verdict.speedup_vs_compile:.2f}x vs compile"
        elif verdict.speedup_vs_eager is not None:
            head += f", {verdict.speedup_vs_eager:.2f}x vs eager"
        return f"{head}, reward {verdict.reward}"
    if verdict.status == "incorrect" and verdict.sets:
        return f"{head} ({sum(s.ok for s in verdict.sets)}/{len(verdict.sets)} sets)"
    guards = failing_guards(verdict)
    return f"{head} ({', '.join(guards)})" if guards else head


def metrics_of(verdict: Verdict) -> VersionMetrics:
    """The one place a verdict becomes the metrics its version's trailers and records carry."""
    median = lambda t: t.median_ms if t else None  # noqa: E731
    return VersionMetrics(
        status=verdict.status,
        reward=verdict.reward,
        time_ms=median(verdict.timing),
        eager_ms=median(verdict.eager),
        compile_ms=median(verdict.compiled),
        speedup_eager=verdict.speedup_vs_eager,
        speedup_compile=verdict.speedup_vs_compile,
    )


def version_message(verdict: Verdict, version: int, note: str = "") -> str:
    """The full commit message: subject, the note as body, then the trailer block (last paragraph)."""
    m = metrics_of(verdict)
    trailers = {
        "Status": m.status,
        "Correct": "yes" if verdict.correct else "no",
        "Reward": str(m.reward),
        **{key: _num(getattr(m, field)) for key, field in _TIMES.items()},
        "Guards": ",".join(failing_guards(verdict)) or "none",
        "Version": str(version),
    }
    # git reads trailers from the last paragraph only, so a note cannot pose as a metric
    parts = [subject_line(verdict, version), note.strip(), "\n".join(f"{k}: {v}" for k, v in trailers.items())]
    return "\n\n".join(p for p in parts if p) + "\n"


def parse_log(text: str) -> list[VersionInfo]:
    """Records written with LOG_FORMAT -> the versions among them (commits without `Version:` are skipped)."""
    out = []
    for record in text.split("\x1e"):
        fields = record.strip("\n").split("\x1f")
        if len(fields) != 4 or "Version" not in (tr := parse_trailers(fields[3])):
            continue
        sha, stamp, subject, _ = fields
        out.append(
            VersionInfo(
                sha=sha,
                version=int(tr["Version"]),
                status=tr.get("Status", "error"),
                reward=int(tr.get("Reward", "-1")),
                correct=tr.get("Correct", "no").lower() in ("yes", "true"),
                **{field: _float(tr.get(key)) for key, field in _TIMES.items()},
                guards=[g for g in tr.get("Guards", "none").split(",") if g and g != "none"],
                subject=subject,
                when=datetime.fromtimestamp(int(stamp), tz=timezone.utc),
            )
        )
    return out


def parse_trailers(block: str) -> dict[str, str]:
    """`Key: value` lines (as `git log --format=%(trailers:only,unfold)` prints them); the last one wins."""
    pairs = (line.partition(":") for line in block.splitlines())
    return {key.strip(): value.strip() for key, sep, value in pairs if sep and key.strip()}


def failing_guards(verdict: Verdict) -> list[str]:
    return list(dict.fromkeys(f.guard for f in verdict.failing_findings))


def _num(x: float | None) -> str:
    return NONE if x is None else f"{x:.6g}"


def _float(s: str | None) -> float | None:
    try:
        return None if s in (None, NONE) else float(s)
    except ValueError:
        return None
