"""History's git commands stay in the workspace's own repository."""

import shutil

import git
import pytest

from cuda_agent.workspace.history import History, init_repo


def test_a_workspace_that_lost_its_git_folder_never_commits_to_an_enclosing_repository(tmp_path):
    outer = init_repo(tmp_path)  # e.g. the project a workspace was wrongly put in
    (tmp_path / "a.txt").write_text("outer\n")
    History(outer).commit("outer 1")
    ws = tmp_path / "ws"
    ws.mkdir()
    history = History(init_repo(ws))
    (ws / "k.cu").write_text("// v1\n")
    history.commit("v1")
    shutil.rmtree(ws / ".git")
    (ws / "k.cu").write_text("// v2\n")
    with pytest.raises(git.GitCommandError):
        history.commit("v2")
    assert [c.message.strip() for c in outer.iter_commits()] == ["outer 1"]
