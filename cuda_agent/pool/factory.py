"""The pool a PoolSpec names. Apart from base.py, which the pools build on: they import base, and
this imports them (each only when asked for, so `cuda_agent.pool` loads no pool it does not use)."""

from __future__ import annotations

from cuda_agent.pool.base import EvaluatorPool, PoolSpec


def make_pool(spec: PoolSpec) -> EvaluatorPool:
    if spec.kind == "local":
        from cuda_agent.pool.local import LocalPool

        return LocalPool(spec)
    if spec.kind == "ray":
        from cuda_agent.pool.raypool import RayPool

        return RayPool(spec)
    raise ValueError(f"unknown pool kind {spec.kind!r}: use local or ray")
