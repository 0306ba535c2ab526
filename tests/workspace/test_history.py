"""History's git commands stay in the workspace's own repository."""

import os
import shutil
import subprocess
from pathlib import Path

import git
import pytest

from cuda_agent.workspace.history import History, git_env, init_repo


def test_a_workspace_that_lost_its_history_never_commits_to_an_enclosing_repository(tmp_path):
    outer = git.Repo.init(tmp_path)  # e.g. the project a workspace was wrongly put in
    (tmp_path / "a.txt").write_text("outer\n")
    outer.index.add(["a.txt"])
    outer.index.commit("outer 1")
    ws = tmp_path / "ws"
    ws.mkdir()
    history = History(init_repo(ws))
    (ws / "k.cu").write_text("// v1\n")
    history.commit("v1")
    shutil.rmtree(history.git_dir)
    (ws / "k.cu").write_text("// v2\n")
    with pytest.raises(git.GitCommandError):
        history.commit("v2")
    assert [c.message.strip() for c in outer.iter_commits()] == ["outer 1"]


# -- git runs as the harness's tool, never the workspace's -------------------------------------------

HOOKS = (
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "reference-transaction",
    "post-index-change",
    "post-checkout",
    "pre-auto-gc",
)


def hostile(ws: Path, git_dir: Path, marker: Path) -> None:
    """What a model with a shell could do to a repository it reached (a run of an older release kept it in the
    workspace): hooks, fsmonitor and filter drivers that write a marker (with the API key, were it in their
    environment). Planted in the harness's own repository here: its calls must not run them even then."""
    hooks = git_dir / "hooks"
    hooks.mkdir(exist_ok=True)
    script = f'#!/bin/sh\necho "$0 key=$OPENAI_API_KEY" >> {marker}\ncat\n'
    for name in (*HOOKS, "fsmonitor", "filter"):
        (hooks / name).write_text(script)
        (hooks / name).chmod(0o755)
    extra = ws.parent / "included.gitconfig"  # reached through include.path: drivers defined there count too
    extra.write_text(f'[filter "other.one"]\n\tclean = {hooks / "filter"}\n\tprocess = {hooks / "filter"}\n')
    with open(git_dir / "config", "a") as f:
        f.write(
            f"[core]\n\thooksPath = {hooks}\n\tfsmonitor = {hooks / 'fsmonitor'}\n"
            f'[filter "evil"]\n\tclean = {hooks / "filter"}\n\tsmudge = {hooks / "filter"}\n\trequired = true\n'
            f"[include]\n\tpath = {extra}\n"
        )
    (ws / ".gitattributes").write_text("* filter=evil\n*.cu filter=other.one\n")


def test_hostile_hooks_fsmonitor_and_filters_never_run_on_harness_commits(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key-0123456789")
    ws, marker = tmp_path / "ws", tmp_path / "marker"
    ws.mkdir()
    history = History(init_repo(ws))
    (ws / "model_new.py").write_text("# v0\n")
    history.commit("v0")
    hostile(ws, history.git_dir, marker)
    (ws / "kernels").mkdir()
    (ws / "kernels" / "k.cu").write_text("// v1\n")
    (ws / "model_new.py").write_text("# v1\n")
    first = history.commit("v1")
    assert history.snapshot("nothing new") is None
    (ws / "kernels" / "k.cu").unlink()
    history.checkout_files(first, ["kernels/k.cu"])  # a checkout would run post-checkout and smudge
    history.repo.git.update_ref("refs/heads/probe", first)  # GitPython's own calls are covered too
    assert history.best() is None and history.root_commit() and history.show(first, "kernels/k.cu") == b"// v1\n"
    assert not marker.exists(), marker.read_text()
    names = history.git("ls-tree", "-r", "--name-only", first).split()
    assert {"kernels/k.cu", "model_new.py"} <= set(names)

    # the same repository does run them for a plain git with the process environment: the test bites
    env = {**os.environ, "GIT_DIR": str(history.git_dir), "GIT_WORK_TREE": str(ws)}
    (ws / "model_new.py").write_text("# v2\n")
    subprocess.run(["git", "commit", "-qam", "plain"], cwd=ws, env=env, capture_output=True)
    assert "sk-test-not-a-real-key" in marker.read_text()


def test_git_gets_a_minimal_environment(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key-0123456789")
    monkeypatch.setenv("GIT_SSH_COMMAND", "touch /tmp/pwned")
    monkeypatch.setenv("GIT_EXTERNAL_DIFF", "touch /tmp/pwned")
    env = git_env()
    assert "OPENAI_API_KEY" not in env and "GIT_SSH_COMMAND" not in env and "GIT_EXTERNAL_DIFF" not in env
    config = {env[f"GIT_CONFIG_KEY_{i}"]: env[f"GIT_CONFIG_VALUE_{i}"] for i in range(int(env["GIT_CONFIG_COUNT"]))}
    assert config["core.hooksPath"] == os.devnull and config["core.fsmonitor"] == "false"
    assert env["GIT_CONFIG_NOSYSTEM"] == "1" and env["GIT_CONFIG_GLOBAL"] == os.devnull


def test_a_gitignore_of_everything_cannot_keep_a_version_out(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    history = History(init_repo(ws))
    (ws / "model_new.py").write_text("# v0\n")
    history.commit("v0")
    (ws / ".gitignore").write_text("*\n")  # as the shell would write it
    (ws / "kernels" / "sub").mkdir(parents=True)
    (ws / "kernels" / ".gitignore").write_text("*\n")
    (ws / "kernels" / "k.cu").write_text("// kernel\n")
    (ws / "kernels" / "sub" / "k.cuh").write_text("// header\n")
    (ws / "kernels" / "k.o").write_bytes(b"\0object")  # build outputs still stay out
    (ws / "kernels" / "build").mkdir()
    (ws / "kernels" / "build" / "lib.so").write_bytes(b"\0lib")
    (ws / "model_new.py").write_text("# v1\n")
    sha = history.commit("v1")
    names = set(history.git("ls-tree", "-r", "--name-only", sha).split())
    assert {"model_new.py", "kernels/k.cu", "kernels/sub/k.cuh", "kernels/.gitignore"} <= names
    assert not names & {"kernels/k.o", "kernels/build/lib.so"}
    assert history.show(sha, "model_new.py") == b"# v1\n"
    (ws / "kernels" / "k.cu").unlink()  # a deletion is a change too
    sha2 = history.commit("v2")
    assert "kernels/k.cu" not in history.git("ls-tree", "-r", "--name-only", sha2).split()
