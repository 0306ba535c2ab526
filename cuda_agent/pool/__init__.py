"""Evaluator pools: where a batch's evaluations run, behind the harness's Evaluator interface
(`evaluate(candidate_dir, timing=...) -> Verdict`, `close()`). `local` keeps evaluators per GPU
on this machine; a Ray pool (`--ray`, not built yet) slots in as another PoolSpec kind."""

from .base import EvaluatorLike, EvaluatorPool, PoolSpec, make_pool

__all__ = ["EvaluatorLike", "EvaluatorPool", "PoolSpec", "make_pool"]
