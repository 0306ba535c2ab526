"""The workspace's history is out of the model's reach, and nothing the model writes as git runs.

Attacks, each as the model's shell could make them in its workspace (the only place it can write):
the workspace's `.git` made a repository of its own with a reflog symlinked to a host file, hooks,
fsmonitor, a pager, filter and diff drivers and an include; or pointed at another run's repository.
After the harness's calls, the canary is unchanged, the other run untouched, no marker written; and
the same holds for the git commands docs/workspace.md suggests, run as a user runs them (a terminal,
so a pager would start). Each plant is first shown to work on a plain git (the test bites)."""

from __future__ import annotations

import os
import pty
import re
import select
import shlex
import subprocess
import time
from pathlib import Path

import pytest

from cuda_agent import jail
from cuda_agent.tools.shell import run_command
from cuda_agent.workspace import Workspace, WorkspaceError
from cuda_agent.workspace.git_dir import git_dir_of
from cuda_agent.workspace.history import History

DOCS = Path(__file__).resolve().parents[2] / "docs" / "workspace.md"
HOOKS = (
    "pre-commit",
    "post-commit",
    "reference-transaction",
    "post-index-change",
    "post-checkout",
    "pre-auto-gc",
    "post-rewrite",
)
needs_jail = pytest.mark.skipif(jail.jail_problem() is not None, reason=str(jail.jail_problem()))


def user_git(*args: str, cwd: Path) -> tuple[int, str]:
    """git as a person runs it: their environment, on a terminal (so a pager starts), 30 s at most."""
    env = {**os.environ, "PAGER": "cat", "TERM": "dumb"}  # the person's own pager: one that needs no keys
    master, slave = pty.openpty()
    proc = subprocess.Popen(["git", *args], cwd=cwd, env=env, stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    out, deadline = b"", time.monotonic() + 30
    while time.monotonic() < deadline:
        if select.select([master], [], [], 0.2)[0]:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # EIO: the terminal's other end closed
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    if proc.poll() is None:
        proc.kill()
    os.close(master)
    return proc.wait(), out.decode(errors="replace")


def plant(where: Path, marker: Path, canary: Path | None = None) -> Path:
    """A repository of the model's own at `where` (a `.git` folder): every way its config or files run a
    program, each appending to `marker`; its reflog a symlink to `canary`. Returns `where`."""
    subprocess.run(["git", "init", "-q", "--bare", str(where)], check=True, env=_clean_env())
    script = where.parent / f"{where.name}-evil.sh"
    script.write_text(f'#!/bin/sh\necho "$0 $*" >> {marker}\ncat\n')
    script.chmod(0o755)
    (where / "hooks").mkdir(exist_ok=True)
    for name in HOOKS:
        (where / "hooks" / name).write_text(script.read_text())
        (where / "hooks" / name).chmod(0o755)
    extra = where.parent / f"{where.name}-included.gitconfig"
    extra.write_text(f'[core]\n\tpager = {script} included-pager\n[diff "evil"]\n\ttextconv = {script}\n')
    (where / "config").write_text(
        f"[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tlogAllRefUpdates = true\n"
        f"\tfsmonitor = {script}\n\tpager = {script} pager\n\tsshCommand = {script}\n\teditor = {script}\n"
        f'[filter "evil"]\n\tclean = {script}\n\tsmudge = {script}\n\tprocess = {script}\n\trequired = true\n'
        f'[diff "evil"]\n\tcommand = {script}\n[include]\n\tpath = {extra}\n'
        f"[pager]\n\tlog = {script} log-pager\n\tshow = {script} show-pager\n"
    )
    (where / "info").mkdir(exist_ok=True)
    (where / "info" / "attributes").write_text("* filter=evil diff=evil\n")
    if canary is not None:
        (where / "logs").mkdir(exist_ok=True)
        (where / "logs" / "HEAD").symlink_to(canary)
    return where


def _clean_env() -> dict[str, str]:
    return {
        "PATH": os.environ["PATH"],
        "HOME": "/nonexistent",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
    }


def docs_commands(run: Path) -> list[list[str]]:
    """Every git command docs/workspace.md suggests, for the run folder `run` (its argv after `git`)."""
    text = DOCS.read_text()
    found = re.findall(r"^(git [^\n#]+?)\s*(?:#.*)?$", text, flags=re.M)  # the code blocks' lines
    found += re.findall(r"`(git [^`]+)`", text)  # and the ones inline
    commands = [c for c in dict.fromkeys(found) if "runs/<task>-<time>" in c]
    return [shlex.split(c.replace("runs/<task>-<time>", str(run)))[1:] for c in commands]


def harness_calls(ws: Workspace, verdicts) -> None:
    """Everything the harness does with git in a run: commit versions, snapshot, compare, read, restore."""
    (ws.root / "kernels" / "k.cu").write_text("// v1\n")
    v1 = ws.commit_version(verdicts.correct(2, 1.0))
    (ws.root / "kernels" / "k.cu").write_text("// v2\n")
    ws.commit_version(verdicts.correct(3, 0.5))
    ws.same_files(v1.sha)
    (ws.root / "model.py").write_text("# tampered\n")
    ws.restore_protected()
    ws.snapshot("snapshot")
    assert [v.version for v in ws.versions()] == [1, 2] and ws.best().version == 2


@pytest.fixture
def marker(tmp_path) -> Path:
    return tmp_path / "marker"


# -- where the history is -------------------------------------------------------------------------


def test_the_history_is_kept_beside_the_workspace_which_only_points_at_it(ws):
    assert ws.history.git_dir == ws.root.parent / "workspace.git" == git_dir_of(ws.root)
    assert (ws.root / ".git").read_bytes() == b"gitdir: ../workspace.git\n"
    assert not (ws.history.git_dir / "hooks").exists()  # no template: no sample hooks
    rc, out = user_git("log", "--format=%s", cwd=ws.root)  # a person's git in the workspace finds it
    assert rc == 0 and "task: scale_add_small" in out


@needs_jail
def test_the_shell_sees_no_history_and_cannot_write_it(ws, verdicts):
    ws.commit_version(verdicts.correct(2, 1.0))
    before = {p: p.read_bytes() for p in ws.history.git_dir.rglob("*") if p.is_file()}
    rc, out, _ = run_command(
        "git log --oneline; git update-ref refs/heads/best HEAD; mkdir -p ../workspace.git; "
        "echo x >> ../workspace.git/HEAD; echo end",
        ws.root,
        30,
    )
    assert "end" in out and "v1:" not in out and "not a git repository" in out
    rc, out, _ = run_command("ls -A ..", ws.root, 30)
    assert out.split() == ["workspace"]  # the run folder shows nothing but the workspace
    after = {p: p.read_bytes() for p in ws.history.git_dir.rglob("*") if p.is_file()}
    assert after == before


# -- the workspace's .git, rewritten by the model ---------------------------------------------------


@pytest.mark.parametrize("how", ["a folder", "a symlink to a repository", "a pointer to a repository"])
def test_a_reflog_symlinked_to_a_host_file_is_never_written(ws, verdicts, tmp_path, marker, how):
    canary = tmp_path / "canary"
    canary.write_bytes(b"host file\n")
    dotgit = ws.root / ".git"
    dotgit.unlink()
    if how == "a folder":
        plant(dotgit, marker, canary)
    else:
        evil = plant(
            ws.root / "kernels" / "evil.git" if how == "a symlink to a repository" else tmp_path / "evil.git",
            marker,
            canary,
        )
        dotgit.symlink_to(evil) if how == "a symlink to a repository" else dotgit.write_text(f"gitdir: {evil}\n")
    harness_calls(ws, verdicts)
    assert canary.read_bytes() == b"host file\n" and not marker.exists()
    assert (ws.root / ".git").read_bytes() == b"gitdir: ../workspace.git\n"  # the pointer is back
    assert "v2: correct" in ws.history.git("log", "--format=%s", "-1", "best")


@pytest.mark.parametrize("where", [".git", "kernels/.git"])
def test_a_git_folder_nested_thousands_deep_is_removed_too(ws, verdicts, where):
    """shutil.rmtree recurses once a level: a `.git` folder the shell nested 3000 deep raised
    RecursionError out of the commit instead of being replaced or removed."""
    (ws.root / ".git").unlink()
    deep = ws.root / where
    deep.mkdir(exist_ok=True)
    fd = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(3000):  # relative to the last folder: the whole path is past PATH_MAX
            os.mkdir("d", dir_fd=fd)
            fd, last = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd), fd
            os.close(last)
    finally:
        os.close(fd)
    harness_calls(ws, verdicts)
    assert (ws.root / ".git").read_bytes() == b"gitdir: ../workspace.git\n"
    assert not (ws.root / "kernels" / ".git").exists()


@pytest.mark.parametrize("how", ["pointer", "symlink to its repository", "symlink to its workspace's .git"])
def test_a_git_pointed_at_another_run_leaves_that_run_untouched(task, template, tmp_path, verdicts, how):
    other = Workspace.create(task, template=template, path=tmp_path / "other" / "workspace")
    (other.root / "kernels" / "k.cu").write_text("// other\n")
    other.commit_version(verdicts.correct(1, 9.0))
    other.release()
    ws = Workspace.create(task, template=template, path=tmp_path / "this" / "workspace")

    def state(w: Workspace) -> dict:
        files = {p: p.read_bytes() for p in w.history.git_dir.rglob("*") if p.is_file() and p.name != "index"}
        return {**files, "ledger": w.history.ledger.read_bytes()}

    before = state(other)
    dotgit = ws.root / ".git"
    dotgit.unlink()
    {
        "pointer": lambda: dotgit.write_text(f"gitdir: {other.history.git_dir}\n"),
        "symlink to its repository": lambda: dotgit.symlink_to(other.history.git_dir),
        "symlink to its workspace's .git": lambda: dotgit.symlink_to(other.root / ".git"),
    }[how]()
    harness_calls(ws, verdicts)
    assert state(other) == before
    assert ws.best().version == 2 and other.history.best().version == 1
    assert ws.history.git("rev-parse", "best").strip() == ws.best().sha  # `best` moved here, not there
    assert other.history.git("rev-parse", "best").strip() == other.history.best().sha


def test_nothing_planted_runs_in_the_harness_or_in_the_commands_the_docs_suggest(ws, verdicts, tmp_path, marker):
    dotgit = ws.root / ".git"
    dotgit.unlink()
    plant(dotgit, marker)
    plant(ws.root / "kernels" / "sub" / ".git", marker)  # and a repository below the root
    (ws.root / ".gitattributes").write_text("* filter=evil diff=evil\n")
    # the test bites: a person's git in the workspace, as the model left it, runs the plant
    user_git("log", "-p", cwd=ws.root)
    user_git("status", cwd=ws.root)
    assert marker.exists()
    marker.unlink()

    harness_calls(ws, verdicts)
    assert not marker.exists(), marker.read_text()
    dotgit.unlink()
    plant(dotgit, marker)  # planted again after the last commit: the run's end puts the pointer back
    (ws.root / "kernels" / "k.cu").write_text("// changed after the run\n")
    ws.release()
    run = ws.root.parent
    commands = docs_commands(run)
    assert len(commands) >= 3 and any("checkout" in c for c in commands)
    for args in commands:
        rc, out = user_git(*args, cwd=tmp_path)
        assert rc == 0, (args, out)
    for args in (["log", "-p"], ["status"], ["diff", "HEAD~1"], ["show", "best"]):  # plain git, in the workspace
        rc, out = user_git(*args, cwd=ws.root)
        assert rc == 0, (args, out)
    assert not marker.exists(), marker.read_text()
    assert (ws.root / "kernels" / "k.cu").read_text() == "// v2\n"  # the docs' checkout put back best's files


# -- the size and type gate before staging -------------------------------------------------------------


def test_huge_sparse_fifo_and_odd_files_are_skipped_promptly_with_one_line_each(ws, verdicts):
    k = ws.root / "kernels"
    (k / "was.cu").write_text("// committed once\n")
    ws.commit_version(verdicts.correct(1, 2.0))
    (k / "was.cu").unlink()
    os.mkfifo(k / "was.cu")  # a file of the last version, now a FIFO
    with open(k / "huge.cu", "wb") as f:
        f.truncate(40 << 30)  # sparse: 40 GiB that take no disk
    os.mkfifo(k / "fifo.cu")
    os.mkfifo(os.fsencode(k) + b"/bad\xff.cu")
    (k / "dir.cu").mkdir()
    (k / "dir.cu" / "ok.cuh").write_text("// inside a folder named like a source\n")
    os.mkfifo(k / "dir.cu" / "pipe.cuh")
    (k / "k.cu").write_text("// the kernel\n")
    start = time.monotonic()
    v = ws.commit_version(verdicts.correct(2, 1.0))
    assert time.monotonic() - start < 30  # git add never reads the 40 GiB
    names = set(ws.history.git("ls-tree", "-r", "--name-only", v.sha).split("\n"))
    assert {"kernels/k.cu", "kernels/dir.cu/ok.cuh"} <= names
    assert not names & {"kernels/huge.cu", "kernels/fifo.cu", "kernels/was.cu", "kernels/dir.cu/pipe.cuh"}
    findings = ws.staging_findings
    for line in (
        "kernels/huge.cu: 40.0 GiB, over the 64.0 MiB one file may have",
        "kernels/fifo.cu: a FIFO, not a regular file",
        "kernels/was.cu: a FIFO",
        "kernels/dir.cu/pipe.cuh: a FIFO",
        "kernels/bad\\xff.cu: a FIFO",
    ):
        assert any(
            f.startswith(line) and f.endswith("not committed (delete it, or make it a small source file)")
            for f in findings
        ), (line, findings)
    assert all("\n" not in f for f in findings) and len(findings) == 5
    assert ws.versions()[-1].content is not None  # a version still, with a content hash

    ws.release()  # the run can be resumed: its snapshot passes the same gate
    start = time.monotonic()
    again = Workspace.open(ws.root.parent)
    assert time.monotonic() - start < 30 and len(again.staging_findings) == 5
    again.release()


def test_the_total_cap_and_many_findings_are_bounded(ws, verdicts, monkeypatch):
    from cuda_agent.workspace import staging

    (ws.root / "notes").mkdir()
    for i in range(15):
        (ws.root / "notes" / f"n{i:02}.txt").write_bytes(b"x" * 1000)
    (ws.root / "kernels" / "big.cu").write_bytes(b"// k\n" * 2000)  # the version's files count before notes/
    base = sum(p.stat().st_size for p in ws.root.rglob("*") if p.is_file() and not p.name.startswith("n"))
    monkeypatch.setattr(staging, "MAX_TOTAL_BYTES", base + 4_500)  # room for four of the notes
    v = ws.commit_version(verdicts.correct(2, 1.0))
    names = ws.history.git("ls-tree", "-r", "--name-only", v.sha).split("\n")
    assert {"kernels/big.cu", "model.py", "kernel_runtime.py", "SKILL.md"} <= set(names)
    assert [n for n in names if n.startswith("notes/")] == [f"notes/n0{i}.txt" for i in range(4)]
    findings = ws.staging_findings
    assert len(findings) == staging.SHOWN + 1 and findings[-1] == "... and 1 more files not committed"
    assert findings[0].startswith("notes/n04.txt: the workspace's files pass ")


def test_verify_tells_the_model_what_was_left_out(ws, verdicts):
    from cuda_agent.tools.base import ToolContext
    from cuda_agent.tools.harness_tools import Verify

    class Evaluator:
        def evaluate(self, root, timing):
            return verdicts.correct(2, 1.0)

        def close(self):
            pass

    os.mkfifo(ws.root / "kernels" / "fifo.cu")
    (ws.root / ".git").unlink()
    plant(ws.root / ".git", ws.root.parent / "marker")
    result = Verify().run({}, ToolContext(workspace=ws, evaluator_factory=Evaluator))
    assert "kernels/fifo.cu: a FIFO, not a regular file: not committed" in result.observation
    assert ".git was a folder: replaced by the harness's pointer" in result.observation
    assert not (ws.root.parent / "marker").exists()


# -- runs made before the history moved out; the command that shows a history --------------------------


def test_a_run_whose_history_is_inside_its_workspace_is_read_but_not_continued(ws, verdicts):
    ws.commit_version(verdicts.correct(2, 1.0))
    ws.release()
    (ws.root / ".git").unlink()
    ws.history.git_dir.rename(ws.root / ".git")  # the layout of an older release
    with pytest.raises(WorkspaceError, match="cannot be continued; start a new run"):
        Workspace.open(ws.root.parent)
    assert History.open(ws.root).best().version == 1
    with pytest.raises(WorkspaceError, match="has no cuda-agent history"):
        History.open(ws.root.parent / "elsewhere")


def test_cuda_agent_log_shows_the_history_and_runs_nothing_planted(ws, verdicts, marker):
    from typer.testing import CliRunner

    from cuda_agent.cli import app

    (ws.root / "kernels" / "k.cu").write_text("// v1\n")
    ws.commit_version(verdicts.incorrect(1, 3))
    (ws.root / "kernels" / "k.cu").write_text("// v2\n")
    ws.commit_version(verdicts.correct(3, 0.5))
    ws.release()
    (ws.root / ".git").unlink()
    plant(ws.root / ".git", marker)
    r = CliRunner().invoke(app, ["log", str(ws.root.parent)])
    assert r.exit_code == 0, r.output
    assert "v1  " in r.output and "v2  " in r.output and "best: v2" in r.output
    assert "v2: correct, 1.80x vs compile, reward 3" in r.output and "task: scale_add_small" in r.output
    assert not marker.exists()
    r = CliRunner().invoke(app, ["log", str(ws.root.parent / "nothing")])
    assert r.exit_code == 2 and "no cuda-agent history" in r.output
