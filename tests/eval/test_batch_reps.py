"""How the warm-up picks R, the calls per batch (eval/timing.py `next_reps`): the nearest whole ratio
by default, or a power of two that evaluations whose warm-up batches differ by noise agree on; and
larger while a batch's work is not clear of the calibrated overhead's error (`resolving_reps`)."""

from __future__ import annotations

import pytest

from cuda_agent.eval.clocked import RESOLVE, Overhead
from cuda_agent.eval.timing import TimingConfig, next_reps, resolving_reps

NEAREST = TimingConfig()
POW2 = TimingConfig(reps_rounding="pow2")


def test_nearest_multiplies_r_by_the_nearest_whole_ratio():
    assert next_reps(1, 0.05, NEAREST, 10_000) == 100
    assert next_reps(1, 0.057, NEAREST, 10_000) == 88
    assert next_reps(100, 5.4, NEAREST, 10_000) == 100  # long enough: R stays
    assert next_reps(100, 7.6, NEAREST, 10_000) == 100  # too long: never fewer than R


@pytest.mark.parametrize("wall_ms", [0.0455, 0.05, 0.057, 0.066])
def test_pow2_gives_one_r_for_warmup_batches_that_differ_by_noise(wall_ms):
    """The one-call batches that gave R 88, 99 and 110 on an H200 give 64 each."""
    assert next_reps(1, wall_ms, POW2, 10_000) == 64
    assert next_reps(64, wall_ms * 64, POW2, 10_000) == 64  # and R stays: no second step to 128


def test_pow2_stays_under_the_caps_and_at_least_one():
    assert next_reps(1, 0.001, POW2, 3000) == 2048  # memory's cap, not a power of two
    assert next_reps(1, 0.001, TimingConfig(reps_rounding="pow2", max_batch_reps=100), 10_000) == 64
    assert next_reps(1, 50.0, POW2, 10_000) == 1  # one call already lasts longer than a batch should
    assert next_reps(8, 0.0, POW2, 10_000) == 4096  # a wall of zero: the caps


def test_a_misspelt_rounding_is_an_error():
    with pytest.raises(ValueError, match="reps_rounding"):
        TimingConfig(reps_rounding="pow3")


def test_r_doubles_while_a_batchs_work_is_under_the_floor_and_stops_at_the_cap():
    """clocked.RESOLVE: a batch must hold enough work beyond the calibrated overhead to tell it apart."""
    assert resolving_reps(4, 1e-4 * 4, 18.0, 4096) == 8  # the figure at its floor of 1e-4 ms: grow
    assert resolving_reps(4, 17.9, 18.0, 4096) == 8
    assert resolving_reps(4, 18.0, 18.0, 4096) == 4  # enough: R stays
    assert resolving_reps(4, 0.0, 18.0, 6) == 6 and resolving_reps(6, 0.0, 18.0, 6) == 6  # the cap


def test_the_floor_is_resolve_times_the_overhead():
    assert Overhead(fixed=1.5, spread=0.5).floor_ms() == pytest.approx(RESOLVE * 1.5)
