"""CUDA Agent's milestone reward (arXiv 2602.24286, Eq. 1), the one reward every run uses.

    r = -1  if the candidate is incorrect or a guard fired
         3  if it beats eager AND torch.compile by more than 5%
         2  if it beats eager by more than 5%
         1  otherwise (correct, but not faster)

"Beats by more than 5%" is the paper's b(t, t0) = (t0 - t) / t0 > 0.05, strict.
"""

from __future__ import annotations

MARGIN = 0.05


def _beats(t: float | None, t_base: float | None) -> bool:
    # A missing or non-positive time can't show a speedup, so it never earns the milestone:
    # a correct candidate without timings (or without a baseline) scores 1, not more.
    if t is None or t_base is None or t <= 0 or t_base <= 0:
        return False
    return (t_base - t) / t_base > MARGIN


def milestone_reward(
    correct: bool, guard_failed: bool, t: float | None, t_eager: float | None, t_compile: float | None
) -> int:
    """Times are per-call (any unit, the same for all three)."""
    if not correct or guard_failed:
        return -1
    if _beats(t, t_eager):
        return 3 if _beats(t, t_compile) else 2
    return 1  # as in the paper, beating only torch.compile earns nothing extra


def speedup(t_ref: float | None, t: float | None) -> float | None:
    """t_ref / t (2.0 means twice as fast as the reference); None when either is missing."""
    if t_ref is None or t is None or t <= 0 or t_ref <= 0:
        return None
    return t_ref / t
