"""Workspace fixtures: a real example task, a minimal template, fake verdicts, and a git that
ignores the machine's own configuration (so the tests show commits work without a global identity)."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.eval.verdict import Finding, SetResult, Timing, Verdict
from cuda_agent.task import load_task
from cuda_agent.workspace import Workspace

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scale_add_small" / "model.py"


@pytest.fixture(autouse=True)
def _no_user_git_config(tmp_path_factory, monkeypatch):
    empty = tmp_path_factory.getbasetemp() / "empty-gitconfig"
    empty.touch()
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(empty))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL", "GIT_DIR"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture(scope="session")
def task():
    return load_task(str(EXAMPLE))


@pytest.fixture
def template(tmp_path) -> Path:
    """What workspace_template/ holds, kept minimal so these tests do not depend on its wording."""
    tpl = tmp_path / "template"
    (tpl / "kernels").mkdir(parents=True)
    (tpl / "kernels" / "README.md").write_text('kernels and their extern "C" launchers go here\n')
    (tpl / "model_new.py").write_text("import kernel_runtime\n\n# write ModelNew here\n")
    (tpl / "SKILL.md").write_text("# Skill\nWrite kernels in kernels/, call them from model_new.py.\n")
    (tpl / ".gitignore").write_text("build/\n__pycache__/\n*.o\n")
    return tpl


@pytest.fixture
def ws(task, template, tmp_path) -> Workspace:
    return Workspace.create(task, template=template, runs_dir=tmp_path / "runs")


class Verdicts:
    """Fake verdicts of each kind, as the harness would return them."""

    @staticmethod
    def timing(ms: float) -> Timing:
        stats = dict(median_ms=ms, mean_ms=ms, min_ms=ms, max_ms=ms, p20_ms=ms, p80_ms=ms)
        return Timing(**stats, reps=20, warmup=3, input_sets=3)

    @classmethod
    def correct(cls, reward: int, ms: float, eager: float = 1.0, compiled: float = 0.9) -> Verdict:
        return Verdict(
            status="correct",
            correct=True,
            reward=reward,
            timing=cls.timing(ms),
            eager=cls.timing(eager),
            compiled=cls.timing(compiled),
            speedup_vs_eager=eager / ms,
            speedup_vs_compile=compiled / ms,
        )

    @staticmethod
    def incorrect(passed: int, total: int) -> Verdict:
        sets = [SetResult(seed=i, ok=i < passed) for i in range(total)]
        return Verdict(status="incorrect", reward=-1, sets=sets)

    @classmethod
    def guard_violation(cls, *guards: str) -> Verdict:
        findings = [Finding(guard=g, message=f"{g} fired") for g in guards]
        findings.append(Finding(guard="note_only", message="a warning", severity="warn"))
        return Verdict(status="guard_violation", reward=-1, findings=findings, timing=cls.timing(0.1))


@pytest.fixture
def verdicts() -> type[Verdicts]:
    return Verdicts
