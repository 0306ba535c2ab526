"""Static guards for model_new.py.

Python's own `ast` rather than tree-sitter-python: it is the grammar the interpreter runs,
so what it parses is exactly what executes (tree-sitter accepts code CPython rejects
and recovers from errors with guesses). Names are resolved through the file's imports
and simple aliases, so `import torch.cuda as tc; tc.synchronize = f` is seen as a write
to torch.cuda. Comments never reach the tree; docstrings are skipped.

Two passes: static_py_names.py learns what the file's names mean, static_py_checker.py walks it
again applying static_py_rules.py (the tables and messages).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable

from cuda_agent.eval.guards.static_py_checker import Checker
from cuda_agent.eval.guards.static_py_rules import DEFAULT_ALLOWED_IMPORTS
from cuda_agent.eval.verdict import Finding


def check_model_new(
    source: str,
    *,
    filename: str = "model_new.py",
    task_fp32: bool,
    allow_precision: bool = False,
    allowed_imports: Iterable[str] = DEFAULT_ALLOWED_IMPORTS,
) -> list[Finding]:
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as e:
        # It can't run either; the recorder's import reports the error itself.
        return [
            Finding(
                guard="static_parse",
                severity="info",
                where=f"{filename}:{e.lineno or 0}",
                message=f"{filename} does not parse ({e.msg}); static guards skipped",
            )
        ]
    for node in ast.walk(tree):
        for child in ast.iter_child_nodes(node):
            child._parent = node  # type: ignore[attr-defined]
    checker = Checker(filename, task_fp32, allow_precision, allowed_imports)
    checker.prepare(tree)
    checker.visit(tree)
    return dedupe(checker.findings)


def dedupe(findings: list[Finding], key=lambda f: (f.guard, f.where)) -> list[Finding]:
    """One finding per key, by default per guard and line: nested names (torch._C._x) would repeat it."""
    seen: set = set()
    return [f for f in findings if key(f) not in seen and not seen.add(key(f))]
