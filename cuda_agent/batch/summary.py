"""The paper's metrics over a batch's rows (CUDA Agent, arXiv 2602.24286; KernelBench's fast_p).

Over every finished task, failures included (crashed, hung, unloadable, no candidate, no correct
version, or a correct result whose speedup is unknown):
- correctness rate: share of tasks with a correct (re-verified) result;
- faster-than-eager / faster-than-compile rate: share of tasks with a correct result whose speedup
  over that baseline is > 1.0 (strictly);
- fast_p: share of tasks with a correct result and speedup > p, for p in 1.0, 1.5, 2.0
  (fast_1.0 is the faster rate);
- geometric-mean speedup over all tasks, FAILURES COUNTED AS 1.0: a task without a correct, timed
  result keeps the original layer, so it contributes speedup 1.0; a correct result slower than the
  baseline contributes its measured speedup (< 1.0). The geomean over correct, timed tasks only is
  reported next to it.
Unfinished tasks (interrupted, not run yet) are counted as pending and left out of every rate.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable

from pydantic import BaseModel

from cuda_agent.batch.rows import FINAL, TaskRow

FAST_P = (1.0, 1.5, 2.0)
FAILED_SPEEDUP = 1.0
RULE = (
    "geomean over all finished tasks: a task without a correct, timed result (incorrect, crashed, hung, "
    "unloadable, no candidate) counts as speedup 1.0; rates and fast_p count such tasks as not faster"
)


class Metrics(BaseModel):
    tasks: int
    correct: int
    correctness_rate: float | None
    faster_than_eager_rate: float | None
    faster_than_compile_rate: float | None
    geomean_speedup_eager: float | None  # failures as 1.0; None when no task has that baseline timed
    geomean_speedup_compile: float | None
    geomean_speedup_eager_correct: float | None  # correct, timed tasks only
    geomean_speedup_compile_correct: float | None
    fast_p_eager: dict[str, float | None]
    fast_p_compile: dict[str, float | None]
    mean_reward: float | None
    failures: dict[str, int]  # outcome -> count, for outcomes other than done
    steps: int
    tokens: int
    cost: float | None  # dollars over priced turns


class Summary(BaseModel):
    run_dir: str
    mode: str  # agent | eval
    model: str | None = None
    task_dir: str
    tasks_selected: int
    finished: int
    pending: int  # interrupted or not run yet
    rule: str = RULE
    overall: Metrics
    levels: dict[str, Metrics] = {}  # per first-level folder (KernelBench's level1, level2, ...)


def metrics(rows: Iterable[TaskRow]) -> Metrics:
    rows = [r for r in rows if r.outcome in FINAL]
    n = len(rows)
    correct = [r for r in rows if r.correct]
    rate = (lambda k: k / n) if n else (lambda k: None)
    failures = dict(Counter(r.outcome for r in rows if r.outcome != "done"))
    eager = [r.speedup_eager for r in correct]
    comp = [r.speedup_compile for r in correct]
    has_compile = any(s is not None for s in comp)
    costs = [r.cost for r in rows if r.cost is not None]
    return Metrics(
        tasks=n,
        correct=len(correct),
        correctness_rate=rate(len(correct)),
        faster_than_eager_rate=rate(_above(eager, 1.0)),
        faster_than_compile_rate=rate(_above(comp, 1.0)) if has_compile else None,
        geomean_speedup_eager=_geomean(eager, n),
        geomean_speedup_compile=_geomean(comp, n) if has_compile else None,
        geomean_speedup_eager_correct=_geomean(eager),
        geomean_speedup_compile_correct=_geomean(comp),
        fast_p_eager={f"{p:g}": rate(_above(eager, p)) for p in FAST_P},
        fast_p_compile={f"{p:g}": rate(_above(comp, p)) if has_compile else None for p in FAST_P},
        mean_reward=sum(r.reward for r in rows) / n if n else None,
        failures=failures,
        steps=sum(r.steps for r in rows),
        tokens=sum(r.tokens for r in rows),
        cost=sum(costs) if costs else None,
    )


def summarize(
    rows: dict[str, TaskRow],
    selected: list[str],
    levels: dict[str, str | None],
    *,
    run_dir: str,
    mode: str,
    model: str | None,
    task_dir: str,
) -> Summary:
    """`selected`: the batch's task ids; `levels`: task id -> level (None at the folder's top)."""
    finished = [rows[t] for t in selected if t in rows and rows[t].outcome in FINAL]
    by_level: dict[str, list[TaskRow]] = {}
    if any(levels.get(t) for t in selected):  # a folder with level subfolders: metrics per level too
        for r in finished:
            by_level.setdefault(levels.get(r.task_id) or "(top)", []).append(r)
    return Summary(
        run_dir=run_dir,
        mode=mode,
        model=model,
        task_dir=task_dir,
        tasks_selected=len(selected),
        finished=len(finished),
        pending=len(selected) - len(finished),
        overall=metrics(finished),
        levels={k: metrics(v) for k, v in sorted(by_level.items())},
    )


def _above(speedups: list[float | None], p: float) -> int:
    return sum(s is not None and s > p for s in speedups)


def _geomean(correct_speedups: list[float | None], n: int | None = None) -> float | None:
    """Over n tasks (default: the timed ones): each correct, timed task's speedup, FAILED_SPEEDUP for the others."""
    timed = [s for s in correct_speedups if s is not None and s > 0]
    n = len(timed) if n is None else n
    return math.exp((sum(map(math.log, timed)) + (n - len(timed)) * math.log(FAILED_SPEEDUP)) / n) if n else None
