"""CUDA Agent's milestone reward (paper Eq. 1), hand-computed."""

import pytest

from cuda_agent.eval.reward import milestone_reward, speedup


@pytest.mark.parametrize(
    "correct, guard, t, eager, compile_, expected",
    [
        (False, False, 1.0, 10.0, 10.0, -1),  # wrong output: fast doesn't matter
        (True, True, 1.0, 10.0, 10.0, -1),  # a guard fired
        (True, False, 90.0, 100.0, 100.0, 3),  # 10% faster than both
        (True, False, 90.0, 100.0, 80.0, 2),  # beats eager only
        (True, False, 90.0, 80.0, 100.0, 1),  # beats compile only: no milestone in the paper
        (True, False, 100.0, 100.0, 100.0, 1),  # correct, as fast
        (True, False, 200.0, 100.0, 100.0, 1),  # correct, slower
        (True, False, 95.0, 100.0, 100.0, 1),  # exactly 5% faster: not "more than 5%"
        (True, False, 94.0, 100.0, 100.0, 3),  # 6%
        (True, False, 95.0, 100.0, 94.0, 1),  # 5% vs eager exactly, slower than compile
        (True, False, 94.0, 100.0, 98.0, 2),  # 6% vs eager, 4.08% vs compile
        (True, False, 1.0, 100.0, None, 2),  # no compile baseline: eager milestone still counts
        (True, False, 1.0, None, 100.0, 1),  # no eager baseline: 1 (documented)
        (True, False, None, 100.0, 100.0, 1),  # correct but untimed
        (True, False, 0.0, 100.0, 100.0, 1),  # a zero time is a measurement bug, not a speedup
    ],
)
def test_milestone_reward(correct, guard, t, eager, compile_, expected):
    assert milestone_reward(correct, guard, t, eager, compile_) == expected


def test_boundary_is_strict_on_both_baselines():
    assert milestone_reward(True, False, 95.0, 100.0, 100.0) == 1
    assert milestone_reward(True, False, 94.99, 100.0, 100.0) == 3
    assert milestone_reward(True, False, 94.99, 100.0, 99.98) == 2  # (99.98 - 94.99) / 99.98 = 4.991%


def test_speedup():
    assert speedup(10.0, 4.0) == 2.5
    assert speedup(10.0, 20.0) == 0.5
    assert speedup(None, 1.0) is None and speedup(1.0, None) is None and speedup(1.0, 0.0) is None
