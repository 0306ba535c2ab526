"""Guards against reward hacking. The static ones live here; the dynamic ones (ATen ops in
forward, input mutation, side streams at run time...) run in the recorder and the judge.
docs/guards.md lists every guard id, what it catches and the test that shows it."""

from cuda_agent.eval.guards.static import check_candidate_static
from cuda_agent.eval.guards.static_py_rules import DEFAULT_ALLOWED_IMPORTS

__all__ = ["DEFAULT_ALLOWED_IMPORTS", "check_candidate_static"]
