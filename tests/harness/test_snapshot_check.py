"""The judge's copy of the task is private and checked by hash before anything reads it again: a
byte added to it, a file swapped for a link, planted bytecode or a forged first commit never
reaches the reference."""

from __future__ import annotations

import os
import py_compile
import stat
import subprocess
import zlib
from pathlib import Path

import pytest

from cuda_agent.eval.reference import snapshot_task, verify_snapshot
from cuda_agent.task import TaskError, load_task

TASK = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return x * 2

def get_inputs():
    return [torch.randn(64)]

def get_init_inputs():
    return []
"""
INPUTS = """
import torch

def get_inputs():
    return [torch.randn(64)]

def get_init_inputs():
    return []
"""


@pytest.fixture
def snap(tmp_path):
    p = tmp_path / "task" / "model.py"
    p.parent.mkdir()
    p.write_text(TASK)
    s = snapshot_task(load_task(str(p)))
    yield s
    import shutil

    shutil.rmtree(s.path.parent, ignore_errors=True)


def test_the_snapshot_is_private_and_checks_out(snap, tmp_path):
    folder = snap.path.parent
    assert not folder.is_relative_to(tmp_path)  # a mkdtemp folder, not next to the task
    assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert stat.S_IMODE(os.stat(snap.path).st_mode) == 0o400
    verify_snapshot(snap)
    verify_snapshot(snap)


def test_a_byte_appended_to_model_py_is_caught(snap):
    os.chmod(snap.path, 0o600)
    with open(snap.path, "ab") as f:
        f.write(b" ")
    with pytest.raises(TaskError, match="was changed") as e:
        verify_snapshot(snap)
    assert "\n" not in str(e.value) and snap.source_hash in str(e.value)


def test_a_sleep_added_to_the_reference_is_caught(snap):
    # the review's attack: a slower reference makes every candidate look fast
    src = snap.path.read_text().replace("return x * 2", "import time; time.sleep(0.01); return x * 2")
    snap.path.unlink()
    snap.path.write_text(src)
    with pytest.raises(TaskError, match="was changed"):
        verify_snapshot(snap)


def test_a_tampered_sidecar_is_caught(tmp_path):
    p = tmp_path / "model.py"
    p.write_text(TASK.split("def get_inputs")[0])
    (tmp_path / "model.inputs.py").write_text(INPUTS)
    s = snapshot_task(load_task(str(p)), tmp_path / "snap")
    assert s.inputs_path is not None
    verify_snapshot(s)
    s.inputs_path.unlink()
    s.inputs_path.write_text(INPUTS.replace("64", "65"))
    with pytest.raises(TaskError, match="was changed"):
        verify_snapshot(s)


def test_a_file_swapped_for_a_link_is_caught(snap, tmp_path):
    same = tmp_path / "same.py"
    same.write_bytes(snap.path.read_bytes())  # identical bytes, but a file the model could write
    snap.path.unlink()
    snap.path.symlink_to(same)
    with pytest.raises(TaskError, match="cannot be read"):
        verify_snapshot(snap)


def test_a_deleted_file_is_caught(snap):
    snap.path.unlink()
    with pytest.raises(TaskError, match="cannot be read"):
        verify_snapshot(snap)


def test_a_folder_others_can_write_is_refused(snap):
    os.chmod(snap.path.parent, 0o777)
    with pytest.raises(TaskError, match="private folder"):
        verify_snapshot(snap)


def test_planted_bytecode_is_never_run(snap, tmp_path):
    # a .pyc whose header matches the checked source's size and mtime: Python's own import would run
    # it instead of the source; load_task runs the bytes it hashed
    import importlib.util

    import torch

    fake = tmp_path / "fake.py"
    fake.write_text(snap.path.read_text().replace("x * 2", "x * 3"))  # same size
    st = os.stat(snap.path)
    os.utime(fake, ns=(st.st_atime_ns, st.st_mtime_ns))
    cached = Path(importlib.util.cache_from_source(str(snap.path)))
    py_compile.compile(str(fake), cfile=str(cached))
    spec = importlib.util.spec_from_file_location("planted_demo", snap.path)
    demo = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(demo)
    assert demo.Model()(torch.ones(1)).item() == 3.0  # the attack is real for a plain import
    verify_snapshot(snap)  # the source itself is untouched
    again = load_task(f"{snap.path}::Model", module_name="cuda_agent_task_again", expected_hash=snap.source_hash)
    assert again.model_cls()(torch.ones(1)).item() == 2.0


def test_load_task_refuses_an_unexpected_hash_before_running_it(tmp_path):
    p = tmp_path / "model.py"
    p.write_text(TASK)
    want = load_task(str(p)).source_hash
    marker = tmp_path / "ran"
    p.write_text(f"open({str(marker)!r}, 'w').close()\n" + TASK)
    with pytest.raises(TaskError, match="not the task the harness copied"):
        load_task(str(p), expected_hash=want)
    assert not marker.exists()
    assert load_task(str(p), expected_hash=load_task(str(p)).source_hash).source_hash != want


def test_load_task_checks_the_sidecar_it_uses(tmp_path):
    p = tmp_path / "model.py"
    p.write_text(TASK.split("def get_inputs")[0])
    side = tmp_path / "model.inputs.py"
    side.write_text(INPUTS)
    want = load_task(str(p)).source_hash
    side.write_text(INPUTS.replace("64", "65"))
    with pytest.raises(TaskError, match="not the task the harness copied"):
        load_task(str(p), expected_hash=want)


def test_snapshot_refuses_a_task_changed_since_it_was_loaded_before_running_it(tmp_path):
    p = tmp_path / "model.py"
    p.write_text(TASK)
    task = load_task(str(p))
    marker = tmp_path / "ran"
    p.write_text(f"open({str(marker)!r}, 'w').close()\n" + TASK)
    with pytest.raises(TaskError, match="changed"):
        snapshot_task(task, tmp_path / "snap")
    assert not marker.exists()  # the changed file was never executed


def test_the_environment_checks_the_first_commit_before_running_it(tmp_path):
    from cuda_agent.environment import Environment
    from cuda_agent.eval.settings import EvalConfig

    p = tmp_path / "model.py"
    p.write_text(TASK)
    with Environment.create(
        load_task(str(p)),
        runs_dir=tmp_path / "runs",
        eval_config=EvalConfig(device="cpu", cache_dir=tmp_path / "cache"),
    ) as env:
        assert env.ctx.task_copy.hash == env.workspace.record.task.source_hash
        root = env.workspace.root
        marker = tmp_path / "ran"
        forged = root / "forged.py"
        forged.write_text(f"open({str(marker)!r}, 'w').close()\n" + TASK)

        def git(*a):
            return subprocess.run(
                ["git", *a],
                cwd=root,
                check=True,
                capture_output=True,
                text=True,
            ).stdout.strip()

        first = git("rev-list", "--max-parents=0", "HEAD")
        blob = git("rev-parse", f"{first}:model.py")
        # the loose object rewritten in place: `git show` reads it back without checking its name
        obj = env.workspace.history.git_dir / "objects" / blob[:2] / blob[2:]
        data = forged.read_bytes()
        obj.unlink()
        obj.write_bytes(zlib.compress(b"blob %d\0" % len(data) + data))
        assert git("show", f"{first}:model.py").startswith("open(")
        # the run loaded its task once, before the forgery: what it judges against stays the same
        assert env.reference_task().source_hash == env.workspace.record.task.source_hash
    # a process that opens the workspace again (a resume) reads the forged first commit: refused
    from cuda_agent.workspace import Workspace

    with pytest.raises(TaskError, match="first commit"):
        Environment(Workspace.open(root.parent), EvalConfig(device="cpu", cache_dir=tmp_path / "cache"))
    assert not marker.exists()


def test_evaluate_refuses_when_the_judges_task_copy_changed(tmp_path):
    """A changed task copy (the model could not reach it, but a bug or another process might) ends
    the evaluation with a one-line error instead of judging against it."""
    from cuda_agent.eval.evaluator import Evaluator
    from cuda_agent.eval.settings import EvalConfig
    from cuda_agent.task import load_task

    here = Path(__file__).parent / "cpu_task"
    cfg = EvalConfig(device="cpu", n_sets=1, baselines=[], timeout_s=60, cache_dir=tmp_path / "cache")
    with Evaluator(load_task(str(here / "model.py")), cfg, ahead="none") as ev:
        copy = ev.task.path
        copy.chmod(0o600)
        copy.write_text(copy.read_text() + "\n# changed\n")
        v = ev.evaluate(here / "honest")
    assert v.status == "error" and "changed" in v.error and "\n" not in v.error
