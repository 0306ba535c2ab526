"""The paper's metrics on hand-made rows whose answers are worked out by hand below."""

import math

import pytest

from cuda_agent.batch.rows import TaskRow
from cuda_agent.batch.summary import metrics, summarize


def row(task_id, outcome="done", correct=False, se=None, sc=None, reward=None, level=None, **kw):
    return TaskRow(
        task_id=task_id,
        task_path=f"/t/{task_id}.py",
        outcome=outcome,
        correct=correct,
        speedup_eager=se,
        speedup_compile=sc,
        level=level,
        reward=reward if reward is not None else (3 if correct else -1),
        **kw,
    )


ROWS = [
    row("a", correct=True, se=2.0, sc=1.5, cost=1.0, steps=10, tokens=100),
    row("b", correct=True, se=0.5, sc=0.25, reward=1, cost=0.5, steps=5, tokens=50),
    row("c", correct=False),  # ran, no correct version
    row("d", outcome="crashed"),
]


def test_rates_geomeans_and_fast_p_count_failures():
    m = metrics(ROWS)
    assert (m.tasks, m.correct, m.correctness_rate) == (4, 2, 0.5)
    # faster = correct and speedup > 1.0: only "a", vs both baselines
    assert m.faster_than_eager_rate == 0.25 and m.faster_than_compile_rate == 0.25
    # all four tasks, c and d as 1.0: (2 * 0.5 * 1 * 1) ** (1/4) = 1; (1.5 * 0.25) ** (1/4)
    assert m.geomean_speedup_eager == pytest.approx(1.0)
    assert m.geomean_speedup_compile == pytest.approx(0.375**0.25)  # 0.7825
    # correct only: sqrt(2 * 0.5) = 1, sqrt(1.5 * 0.25)
    assert m.geomean_speedup_eager_correct == pytest.approx(1.0)
    assert m.geomean_speedup_compile_correct == pytest.approx(math.sqrt(0.375))
    # fast_p: strictly above p, over all four tasks; 2.0 is not above 2.0
    assert m.fast_p_eager == {"1": 0.25, "1.5": 0.25, "2": 0.0}
    assert m.fast_p_compile == {"1": 0.25, "1.5": 0.0, "2": 0.0}
    assert m.mean_reward == pytest.approx((3 + 1 - 1 - 1) / 4)
    assert m.failures == {"crashed": 1} and (m.steps, m.tokens, m.cost) == (15, 150, 1.5)


def test_correct_but_untimed_counts_as_one_and_no_compile_baseline_is_not_applicable():
    m = metrics([row("a", correct=True, se=4.0), row("b", correct=True, se=None), row("c", outcome="hung")])
    assert m.geomean_speedup_eager == pytest.approx(4 ** (1 / 3))  # b and c count as 1.0
    assert m.geomean_speedup_eager_correct == pytest.approx(4.0)
    assert m.faster_than_compile_rate is None and m.geomean_speedup_compile is None
    assert m.fast_p_compile == {"1": None, "1.5": None, "2": None}


def test_interrupted_tasks_are_pending_not_failures_and_levels_are_split():
    rows = {
        r.task_id: r
        for r in [
            row("l1/a", correct=True, se=2.0, level="level1"),
            row("l1/b", outcome="load_error", level="level1"),
            row("l2/c", correct=True, se=3.0, level="level2"),
            row("l2/d", outcome="interrupted", level="level2"),
        ]
    }
    selected = [*rows, "l2/e"]  # e has not run yet
    levels = {t: t.startswith("l1") and "level1" or "level2" for t in selected}
    s = summarize(rows, selected, levels, run_dir="r", mode="agent", model="m", task_dir="t")
    assert (s.tasks_selected, s.finished, s.pending) == (5, 3, 2)
    assert s.overall.tasks == 3 and s.overall.geomean_speedup_eager == pytest.approx(6 ** (1 / 3))
    assert set(s.levels) == {"level1", "level2"}
    assert s.levels["level1"].correctness_rate == 0.5 and s.levels["level1"].failures == {"load_error": 1}
    assert s.levels["level2"].tasks == 1 and s.levels["level2"].geomean_speedup_eager == pytest.approx(3.0)


def test_a_flat_folder_has_no_levels_and_an_empty_batch_has_no_rates():
    s = summarize({}, ["a", "b"], {"a": None, "b": None}, run_dir="r", mode="eval", model=None, task_dir="t")
    assert s.levels == {} and s.pending == 2
    assert s.overall.correctness_rate is None and s.overall.geomean_speedup_eager is None
