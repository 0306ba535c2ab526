"""Kernel sources -> shared library (nvcc, cached) -> Python callables (runtime.py).

Never imports cuda_agent.eval: the harness consumes kernels, not the other way round.
"""
