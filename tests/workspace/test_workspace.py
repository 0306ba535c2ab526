"""The per-task git workspace on real files in real git repositories (no GPU, no evaluator)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
import subprocess
from pathlib import Path

import git
import pytest

from cuda_agent.eval.verdict import Verdict
from cuda_agent.task import load_task
from cuda_agent.workspace import Workspace, WorkspaceError
from cuda_agent.workspace.workspace import DEFAULT_TEMPLATE, RUNTIME

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "scale_add_small" / "model.py"


def git_out(root: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True).stdout


# -- create / open --------------------------------------------------------------------------------


def test_create_lays_out_the_workspace_and_commits_it(ws, tmp_path):
    assert re.fullmatch(r"scale_add_small-\d{8}-\d{6}", ws.root.parent.name)
    assert ws.root == (tmp_path / "runs" / ws.root.parent.name / "workspace").resolve()
    assert ws.candidate_dir == ws.root and ws.task_path == ws.root / "model.py"
    assert (ws.root / "model.py").read_bytes() == EXAMPLE.read_bytes()
    assert (ws.root / "kernel_runtime.py").read_bytes() == RUNTIME.read_bytes()
    for name in ("model_new.py", "SKILL.md", ".gitignore", "kernels/README.md"):
        assert (ws.root / name).is_file(), name

    record = json.loads((ws.root / ".cuda-agent" / "workspace.json").read_text())
    assert record["task"]["path"] == str(EXAMPLE) and record["task"]["class_name"] == "Model"
    assert record["task"]["source_hash"] == load_task(str(EXAMPLE)).source_hash
    assert set(record["protected"]) == {"model.py", "SKILL.md", "kernel_runtime.py", ".gitignore"}  # no sidecar
    assert record["protected"]["model.py"] == hashlib.sha256(EXAMPLE.read_bytes()).hexdigest()

    assert git_out(ws.root, "log", "--format=%s").splitlines() == ["task: scale_add_small"]
    assert git_out(ws.root, "status", "--porcelain") == ""
    tracked = set(git_out(ws.root, "ls-files").split())
    assert {"model.py", "kernel_runtime.py", "SKILL.md", "model_new.py", ".cuda-agent/workspace.json"} <= tracked
    assert git_out(ws.root, "config", "user.name").strip() == "cuda-agent"


def test_sidecar_and_class_carry_over_so_the_workspace_copy_loads(task, template, tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    (src / "layer.py").write_text(
        "import torch\n\nclass Layer(torch.nn.Module):\n    def forward(self, x):\n        return x + 1\n"
    )
    (src / "layer.inputs.py").write_text(
        "import torch\n\ndef get_inputs():\n    return [torch.ones(4)]\n\ndef get_init_inputs():\n    return []\n"
    )
    ws = Workspace.create(load_task(f"{src / 'layer.py'}::Layer"), template=template, path=tmp_path / "ws")
    assert ws.root == (tmp_path / "ws").resolve()
    assert "model.inputs.py" in ws.record.protected
    again = load_task(ws.task_ref)
    assert again.class_name == "Layer" and again.inputs_path == ws.root / "model.inputs.py"
    assert again.draw_inputs(0, "cpu")[0].tolist() == [1.0] * 4


def test_open_continues_and_commits_stray_work_first(ws, verdicts):
    ws.commit_version(verdicts.correct(3, 0.5))
    (ws.root / "model_new.py").write_text("# edited after the last evaluation\n")
    (ws.root / "kernels" / "k.cu").write_text("// new\n")

    again = Workspace.open(ws.root.parent)  # the run folder works as well as workspace/
    assert again.root == ws.root
    assert git_out(ws.root, "status", "--porcelain") == ""
    assert git_out(ws.root, "log", "-1", "--format=%s").startswith("snapshot:")
    assert git_out(ws.root, "show", "HEAD:model_new.py") == "# edited after the last evaluation\n"
    again.commit_version(verdicts.correct(3, 0.4))
    assert [v.version for v in again.versions()] == [1, 2]
    assert again.best().version == 2
    assert Workspace.open(ws.root).head == again.head  # clean: nothing new committed


def test_open_refuses_folders_that_are_not_workspaces(tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    repo = tmp_path / "repo"
    git.Repo.init(repo)
    for folder in (plain, repo, tmp_path / "missing"):
        with pytest.raises(WorkspaceError, match="not a cuda-agent workspace"):
            Workspace.open(folder)


def test_refuses_a_run_folder_inside_the_users_repo_unless_given_a_path(task, template, tmp_path):
    user = tmp_path / "user"
    git.Repo.init(user)
    with pytest.raises(WorkspaceError, match="--out"):
        Workspace.create(task, template=template, runs_dir=user / "runs" / "deep")
    assert not (user / "runs").exists()
    ws = Workspace.create(task, template=template, path=user / "ws")  # asked for explicitly
    assert ws.versions() == [] and ws.history.git_dir == user / "ws.git" and (user / "ws.git").is_dir()


def test_explicit_path_must_be_new_or_empty(task, template, tmp_path):
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "notes.txt").write_text("mine")
    with pytest.raises(WorkspaceError, match="not empty"):
        Workspace.create(task, template=template, path=taken)
    assert Workspace.create(task, template=template, path=tmp_path / "empty").root.name == "empty"


def test_a_failed_create_leaves_nothing_behind(task, template, tmp_path):
    gone = dataclasses.replace(task, path=tmp_path / "gone.py")
    with pytest.raises(FileNotFoundError):
        Workspace.create(gone, template=template, runs_dir=tmp_path / "runs")
    assert list((tmp_path / "runs").iterdir()) == []
    with pytest.raises(WorkspaceError, match="template not found"):
        Workspace.create(task, template=tmp_path / "nope", runs_dir=tmp_path / "runs")


def test_commits_work_despite_hostile_global_git_config(task, template, tmp_path, monkeypatch, verdicts):
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for hook in ("pre-commit", "commit-msg", "post-commit"):
        (hooks / hook).write_text("#!/bin/sh\nexit 1\n")
        (hooks / hook).chmod(0o755)
    cfg = tmp_path / "gitconfig"
    cfg.write_text(f"[core]\n\thooksPath = {hooks}\n[commit]\n\tgpgsign = true\n")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(cfg))
    ws = Workspace.create(task, template=template, runs_dir=tmp_path / "runs")
    ws.commit_version(verdicts.correct(1, 1.0))
    assert len(ws.versions()) == 1


@pytest.mark.skipif(not DEFAULT_TEMPLATE.is_dir(), reason="cuda_agent/workspace_template/ not written yet")
def test_the_packaged_template_makes_a_workspace(task, tmp_path):
    ws = Workspace.create(task, runs_dir=tmp_path / "runs")
    for name in ("model_new.py", "SKILL.md", ".gitignore", "kernels"):
        assert (ws.root / name).exists(), name
    assert ws.changed_protected() == []


# -- protected files and path safety ----------------------------------------------------------------


def test_protected_tampering_is_detected_committed_and_restored(ws):
    originals = {n: (ws.root / n).read_bytes() for n in ("model.py", "SKILL.md", "kernel_runtime.py")}
    assert ws.changed_protected() == []
    (ws.root / "model.py").write_text("class Model: pass  # made easy\n")
    (ws.root / "SKILL.md").unlink()
    (ws.root / "kernel_runtime.py").unlink()
    (ws.root / "kernel_runtime.py").symlink_to(ws.root / "model_new.py")
    record = ws.root / ".cuda-agent" / "workspace.json"
    record.write_text(record.read_text().replace('"model.py"', '"model_.py"'))

    changed = ws.changed_protected()
    assert sorted(changed) == [".cuda-agent/workspace.json", "SKILL.md", "kernel_runtime.py", "model.py"]
    assert sorted(ws.restore_protected()) == sorted(changed)
    assert ws.changed_protected() == []
    for name, data in originals.items():
        assert (ws.root / name).read_bytes() == data and not (ws.root / name).is_symlink()
    subjects = git_out(ws.root, "log", "--format=%s").splitlines()
    assert subjects[0].startswith("restore protected files:") and subjects[1].startswith("snapshot: before restoring")
    assert "made easy" in git_out(ws.root, "show", "HEAD~1:model.py")  # the tampering stays on record
    assert git_out(ws.root, "status", "--porcelain") == ""
    assert ws.restore_protected() == []


@pytest.fixture
def outside(tmp_path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("not yours")
    return out


@pytest.mark.parametrize(
    "rel, message",
    [
        ("../x.py", "'..'"),
        ("kernels/../../x.py", "'..'"),
        ("/etc/passwd", "absolute path"),
        ("link_out/secret.txt", "symlink"),
        ("kernels/escape", "symlink"),
        (".git/config", ".git"),
        (".git", ".git"),
        ("kernels/.git/HEAD", ".git"),
        ("bad\0name", "NUL"),
    ],
)
def test_paths_that_leave_the_sandbox_are_refused(ws, outside, rel, message):
    (ws.root / "link_out").symlink_to(outside)
    (ws.root / "kernels" / "escape").symlink_to(outside / "secret.txt")
    for for_write in (False, True):
        with pytest.raises(WorkspaceError, match=re.escape(message)) as err:
            ws.resolve(rel, for_write=for_write)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    "rel",
    [
        "model.py",
        "./model.py",
        "kernels/../SKILL.md",
        "kernel_runtime.py",
        "alias.py",
        ".cuda-agent/workspace.json",
        ".",
    ],
)
def test_protected_files_are_readable_but_not_writable(ws, rel):
    (ws.root / "alias.py").symlink_to(ws.root / "model.py")  # a symlink does not make model.py writable
    assert ws.resolve(rel).is_relative_to(ws.root)
    with pytest.raises(WorkspaceError, match="protected|read-only|cannot be written"):
        ws.resolve(rel, for_write=True)


def test_paths_inside_resolve_to_absolute_paths(ws):
    assert ws.resolve("kernels/new.cu", for_write=True) == ws.root / "kernels" / "new.cu"
    assert ws.resolve("kernels/sub/../a.cu", for_write=True) == ws.root / "kernels" / "a.cu"
    assert ws.resolve("") == ws.root and ws.resolve("model_new.py", for_write=True) == ws.root / "model_new.py"


# -- versions, trailers, best -------------------------------------------------------------------------


def test_version_trailers_parse_back(ws, verdicts):
    made = [
        ws.commit_version(verdicts.correct(3, 0.5, eager=1.0, compiled=0.71), note="vectorised loads"),
        ws.commit_version(verdicts.incorrect(2, 5)),
        ws.commit_version(verdicts.guard_violation("aten_in_forward", "output_cache")),
        ws.commit_version(Verdict(status="compile_error", error="k.cu:3: error")),
    ]
    v = ws.versions()
    assert v == made and [x.version for x in v] == [1, 2, 3, 4]
    shas = [x.sha for x in made]
    assert shas[-1] == ws.head
    assert v[0].subject == "v1: correct, 1.42x vs compile, reward 3"
    assert (v[0].status, v[0].correct, v[0].reward, v[0].guards) == ("correct", True, 3, [])
    assert (v[0].time_ms, v[0].eager_ms, v[0].compile_ms) == (0.5, 1.0, 0.71)
    assert v[0].speedup_eager == 2.0 and v[0].speedup_compile == pytest.approx(1.42)
    assert v[1].subject == "v2: incorrect (2/5 sets)" and not v[1].correct and v[1].time_ms is None
    assert v[2].subject == "v3: guard_violation (aten_in_forward, output_cache)"
    assert v[2].guards == ["aten_in_forward", "output_cache"] and v[2].time_ms == 0.1
    assert (v[3].subject, v[3].reward, v[3].speedup_compile) == ("v4: compile_error", -1, None)
    assert "vectorised loads" in git_out(ws.root, "log", "-1", "--format=%b", shas[0])
    by_git = git_out(ws.root, "log", "-1", "--format=%(trailers:key=Speedup-Compile,valueonly)", shas[0])
    assert by_git.strip() == "1.42"  # git itself reads the trailers


def test_a_note_cannot_forge_metrics(ws, verdicts):
    ws.commit_version(verdicts.incorrect(0, 3), note="Reward: 3\nCorrect: yes\n\nVersion: 42\nStatus: correct")
    (v,) = ws.versions()
    assert (v.version, v.reward, v.correct, v.status) == (1, -1, False, "incorrect")
    assert ws.best() is None


def test_every_evaluation_is_a_commit_and_gitignore_is_honoured(ws, verdicts):
    (ws.root / "kernels" / "k.cu").write_text('extern "C" void f() {}\n')
    (ws.root / "build").mkdir()
    (ws.root / "build" / "k.o").write_bytes(b"\0object")
    first = ws.commit_version(verdicts.correct(1, 1.0)).sha
    files = git_out(ws.root, "show", "--name-only", "--format=", first).split()
    assert files == ["kernels/k.cu"]
    second = ws.commit_version(verdicts.correct(1, 1.0)).sha  # nothing changed: still a version
    assert second != first and git_out(ws.root, "rev-parse", f"{second}^").strip() == first
    assert [v.version for v in ws.versions()] == [1, 2]


def test_best_moves_only_for_a_better_correct_version(ws, verdicts):
    def step(verdict):
        sha = ws.commit_version(verdict).sha
        best = ws.best()
        return sha, (best.sha if best else None)

    assert step(verdicts.incorrect(1, 3))[1] is None
    v2, best = step(verdicts.correct(1, 2.0))
    assert best == v2
    assert step(verdicts.correct(1, 3.0))[1] == v2  # slower, same reward
    v4, best = step(verdicts.correct(2, 5.0))
    assert best == v4  # higher reward wins even though slower
    v5, best = step(verdicts.correct(2, 4.0))
    assert best == v5
    assert step(verdicts.guard_violation("aten_in_forward"))[1] == v5
    assert step(Verdict(status="correct", correct=True, reward=2, timing=None))[1] == v5  # no time ranks last
    assert step(verdicts.correct(2, 4.0))[1] == v5  # a tie keeps the older one
    assert git_out(ws.root, "rev-parse", "best").strip() == v5
    assert "best" in [h.name for h in ws.repo.heads] and ws.repo.active_branch.name == "main"
    assert ws.best().version == 5 and ws.best().time_ms == 4.0


def test_git_log_reads_as_the_optimisation_history(ws, verdicts):
    ws.commit_version(verdicts.incorrect(2, 5))
    ws.commit_version(verdicts.correct(3, 0.5))
    log = git_out(ws.root, "log", "--oneline")
    for subject in ("v2: correct, 1.80x vs compile, reward 3", "v1: incorrect (2/5 sets)", "task: scale_add_small"):
        assert subject in log
    assert ws.snapshot("nothing to keep") is None
    assert (ws.root / ".git").read_text() == "gitdir: ../workspace.git\n"  # the history is kept beside it


# -- .gitignore: protected, and no way to keep a version's files out ---------------------------------


def test_a_model_written_gitignore_cannot_keep_kernels_out_of_a_version(ws, verdicts, tmp_path):
    from cuda_agent.results.final import export_version

    (ws.root / ".gitignore").write_text("*\n")  # as the shell would write it
    (ws.root / "kernels" / "k.cu").write_text('extern "C" void f(cudaStream_t s) {}\n')
    (ws.root / "model_new.py").write_text("# ModelNew v1\n")
    v1 = ws.commit_version(verdicts.correct(1, 1.0))
    files = git_out(ws.root, "ls-tree", "-r", "--name-only", v1.sha).split()
    assert "kernels/k.cu" in files and "model_new.py" in files
    exported = export_version(ws, v1.sha, tmp_path / "export")  # what re-verification builds from
    assert (exported / "kernels" / "k.cu").read_text().startswith('extern "C"')
    assert (exported / "model_new.py").read_text() == "# ModelNew v1\n"
    assert ws.changed_protected() == [".gitignore"]  # it is a protected file: a guard violation
    assert ws.restore_protected() == [".gitignore"]
    assert "*" not in (ws.root / ".gitignore").read_text().split()


def test_gitignore_is_read_only_to_the_file_tools(ws):
    from cuda_agent.tools.base import ToolContext
    from cuda_agent.tools.files import DeleteFile, EditFile, RenameFile, ViewFile

    ctx = ToolContext(workspace=ws)
    before = (ws.root / ".gitignore").read_text()
    assert ViewFile().run({"path": ".gitignore"}, ctx).status == "ok"
    for r in (
        EditFile().run({"mode": "create", "path": ".gitignore", "file_text": "*\n", "overwrite": True}, ctx),
        EditFile().run({"mode": "insert", "path": ".gitignore", "insert_line": 0, "new_str": "*"}, ctx),
        DeleteFile().run({"path": ".gitignore"}, ctx),
        RenameFile().run({"path": ".gitignore", "new_path": "old.gitignore"}, ctx),
        RenameFile().run({"path": "model_new.py", "new_path": ".gitignore"}, ctx),
    ):
        assert r.status == "error" and "protected" in r.observation and "\n" not in r.observation, r.observation
    assert (ws.root / ".gitignore").read_text() == before and (ws.root / "model_new.py").exists()
