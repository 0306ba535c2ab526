"""The verdict ledger (`<run>/ledger.jsonl`, beside the workspace) is out of reach of everything the
model drives: the shell and the profilers' jail (nothing of the run folder but the workspace, even
where a read-only path the jail binds for the interpreter holds the run folder, as a clone's
`runs/` under a legacy editable install on sys.path does) and the file tools (confined to the
workspace, symlinks included)."""

from __future__ import annotations

import pytest

from cuda_agent import jail
from cuda_agent.eval.verdict import Verdict
from cuda_agent.profiling.runner import run_wrapped
from cuda_agent.run_folder import LEDGER
from cuda_agent.tools.base import ToolContext
from cuda_agent.tools.files import ListFiles, ViewFile
from cuda_agent.tools.shell import run_command
from cuda_agent.workspace import Workspace, WorkspaceError
from cuda_agent.workspace.ledger import read_entries

EXAMPLE = "examples/scale_add_small/model.py"
needs_jail = pytest.mark.skipif(jail.jail_problem() is not None, reason=str(jail.jail_problem()))


@pytest.fixture
def ws(tmp_path):
    from pathlib import Path

    from cuda_agent.task import load_task

    task = load_task(str(Path(__file__).resolve().parents[2] / EXAMPLE))
    w = Workspace.create(task, runs_dir=tmp_path / "runs")
    w.commit_version(Verdict(status="correct", correct=True, reward=3))
    yield w
    w.release()


@pytest.fixture(params=["apart", "under an interpreter path"])
def exposure(request, ws, monkeypatch):
    """The run folder as the jail finds it: apart from every bound path, or inside a read-only one."""
    if request.param != "apart":
        above = ws.root.parent.parent  # runs/: as a clone's runs/ on sys.path would be
        paths = jail._interpreter_paths()
        monkeypatch.setattr(jail, "_interpreter_paths", lambda: [*paths, above])
    return request.param


def before(ws) -> bytes:
    return (ws.root.parent / LEDGER).read_bytes()


@needs_jail
def test_the_shell_cannot_read_or_write_the_ledger(ws, exposure):
    ledger = before(ws)
    rc, out, _ = run_command(
        "cat ../ledger.jsonl ../trajectory.jsonl; echo forged >> ../ledger.jsonl; "
        "ln -sf ../ledger.jsonl mine; cat mine; echo end",
        ws.root,
        30,
    )
    assert "end" in out and '"content"' not in out
    rc, out, _ = run_command("ls -A ..", ws.root, 30)
    assert out.split() == ["workspace"]  # nothing of the run folder but the workspace
    assert before(ws) == ledger and len(read_entries(ws.root.parent / LEDGER)) == 1
    # and the workspace stays writable
    rc, out, _ = run_command("echo ok > kernels/x.cu && cat kernels/x.cu", ws.root, 30)
    assert rc == 0 and "ok" in out


@needs_jail
def test_profile_and_sanitize_runs_cannot_reach_the_ledger(ws, exposure):
    ledger = before(ws)
    out = run_wrapped(
        ["bash", "-c", "cat ../ledger.jsonl; echo x >> ../ledger.jsonl; echo end"], cwd=ws.root, timeout=30
    )
    assert "end" in out.stdout and '"content"' not in out.text
    assert before(ws) == ledger


def test_the_file_tools_cannot_reach_the_ledger(ws):
    ctx = ToolContext(ws)
    (ws.root / "kernels" / "l.jsonl").symlink_to(ws.root.parent / LEDGER)
    for rel in ("../ledger.jsonl", str(ws.root.parent / LEDGER), "kernels/l.jsonl"):
        with pytest.raises(WorkspaceError):
            ws.resolve(rel)
        result = ViewFile().run({"path": rel}, ctx)
        assert result.status == "error" and '"content"' not in result.observation
    assert '"content"' not in ListFiles().run({}, ctx).observation  # a link is shown, never followed
