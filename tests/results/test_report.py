"""report.md: the run at a glance, from the workspace's history and the trajectory."""

from __future__ import annotations

import re
import sys

import pytest

from cuda_agent.results.final import Attempt, Reverification
from cuda_agent.results.report import write_report
from cuda_agent.run_folder import RunFolder


def rows(text: str) -> dict[int, str]:
    """version number -> its table row."""
    return {int(m.group(1)): m.group(0) for m in re.finditer(r"^\|[^|\n]*\| (\d+) \|.*$", text, re.M)}


def test_report_has_every_version_and_marks_the_best(finalized, session):
    text = finalized.report.read_text()
    ws = session.env.workspace
    table = rows(text)
    assert sorted(table) == [v.version for v in ws.versions()] == [1, 2, 3, 4]
    best = ws.best()
    assert table[best.version].startswith("| **best**") and "re-verified" in table[best.version]
    assert sum("**best**" in r for r in table.values()) == 1
    assert "| incorrect | no |" in table[1] and best.sha[:10] in table[best.version]
    assert f"hash `{ws.record.task.source_hash}`" in text and "class `Model`" in text
    assert "- model: scripted" in text and "- stop reason: finished" in text


def test_report_gives_the_reverification_cost_and_tokens(finalized, session):
    text = finalized.report.read_text()
    best = session.env.workspace.best()
    assert f"version {best.version} (the run's best) passed re-verification: 10/10 input sets correct" in text
    assert "the run used 2" in text and f"drop-in: `{finalized.dropin}`" in text
    assert "tokens: 990 (900 prompt, 90 completion)" in text
    assert "1 turns had no known price" in text and "over 8 priced turns" in text
    assert "wall time:" in text


def test_plot_is_written_when_matplotlib_is_there(finalized):
    pytest.importorskip("matplotlib")
    png = finalized.report.parent / "speedup.png"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "![speedup over versions](speedup.png)" in finalized.report.read_text()


def test_without_matplotlib_the_report_says_so(session, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    path = write_report(RunFolder(tmp_path), session.env.workspace, session.trajectory, None, session.result)
    text = path.read_text()
    assert "no plot: matplotlib is not installed" in text and not (tmp_path / "speedup.png").exists()
    assert "not re-verified" in text and len(rows(text)) == 4


def test_a_failed_reverification_is_said_plainly_in_the_report(session, finalized, tmp_path):
    ws = session.env.workspace
    best, passed = ws.best(), finalized.reverification.verified
    failing = passed.verdict.model_copy(update={"status": "incorrect", "correct": False, "reward": -1})
    other = next(v for v in ws.versions() if v.correct and v.sha != best.sha)
    rv = Reverification(
        n_sets=10,
        run_sets=2,
        best=best,
        task=finalized.reverification.task,
        attempts=[Attempt(best, failing), Attempt(other, passed.verdict)],
    )
    text = write_report(RunFolder(tmp_path), ws, session.trajectory, rv, None).read_text()
    table = rows(text)
    assert "failed re-verification" in table[best.version] and "**best**" in table[best.version]
    assert "re-verified" in table[other.version]
    assert f"version {best.version} (the run's best) FAILED re-verification" in text
    assert "- stop reason: finished" in text  # from the trajectory's closing record when no result is given
