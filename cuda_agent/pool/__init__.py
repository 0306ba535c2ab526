"""Evaluator pools: where a batch's evaluations run, behind the harness's Evaluator interface
(`evaluate(candidate_dir, timing=...) -> Verdict`, `close()`). `local` keeps evaluators per GPU
on this machine; `raypool` lets a Ray cluster place tasks on its GPUs (`--ray`)."""

from .base import EvaluatorLike, EvaluatorPool, PoolSpec
from .factory import make_pool

__all__ = ["EvaluatorLike", "EvaluatorPool", "PoolSpec", "make_pool"]
