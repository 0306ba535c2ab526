"""A candidate's files are read by the harness itself, unjailed: the static guards, the source it
hands the recorder, nvcc's working folder. Through a symlink (the shell tool can make one) those
reads reached any file of the user's: a key file's first word came back in a NameError the model
read. Attacked here: model_new.py, a source in kernels/ and kernels/ itself as symlinks."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.jail import jail_problem
from cuda_agent.kernels.build import build_kernels
from cuda_agent.task import load_task

TASK = Path(__file__).parents[1] / "harness" / "cpu_task"
TOKEN = "ghp_cudaAgentTestToken42"  # a key that is one word, as many are
pytestmark = pytest.mark.skipif(jail_problem() is not None, reason=str(jail_problem()))


@pytest.fixture
def evaluate(tmp_path):
    cfg = EvalConfig(device="cpu", n_sets=1, baselines=[], timeout_s=60, cache_dir=tmp_path / "cache")
    with Evaluator(load_task(str(TASK / "model.py")), cfg, ahead="none") as ev:
        yield ev.evaluate


def candidate(tmp_path: Path, name: str) -> Path:
    cand = tmp_path / name
    shutil.copytree(TASK / "honest", cand, ignore=shutil.ignore_patterns("__pycache__"))
    return cand


def test_model_new_as_a_symlink_is_refused_unread(evaluate, tmp_path):
    secret = tmp_path / "token.txt"
    secret.write_text(TOKEN + "\n")
    plain = candidate(tmp_path, "plain")  # the control: what model_new.py holds reaches the model
    shutil.copy(secret, plain / "model_new.py")
    assert TOKEN in (evaluate(plain).error or "")
    linked = candidate(tmp_path, "linked")
    (linked / "model_new.py").unlink()
    (linked / "model_new.py").symlink_to(secret)
    v = evaluate(linked)
    assert v.status == "guard_violation" and TOKEN not in v.model_dump_json()
    assert [f.where for f in v.failing_findings] == ["model_new.py"]


def test_a_source_or_kernels_itself_as_a_symlink_is_not_built(evaluate, tmp_path):
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "x.cu").write_text(f"// {TOKEN}\n")
    one = candidate(tmp_path, "one")
    (one / "kernels" / "x.cu").symlink_to(outside / "x.cu")
    folder = candidate(tmp_path, "folder")
    shutil.rmtree(folder / "kernels")
    shutil.copytree(TASK / "honest" / "kernels", outside / "kernels")
    (folder / "kernels").symlink_to(outside / "kernels")
    for cand, name in ((one, "kernels/x.cu"), (folder, "kernels")):
        v = evaluate(cand)
        assert v.status == "guard_violation" and name in {f.where for f in v.failing_findings}
        assert "build" not in v.seconds or v.seconds["build"] == 0  # nothing was compiled
        built = build_kernels(cand / "kernels", tmp_path / "cache" / "build")  # the compile tool's path
        assert not built.ok and f"{name} is a symlink" in built.errors


def test_a_symlink_whose_name_needs_escaping_is_not_read_either(tmp_path):
    """The guards skip what they report as a link by the path itself, not by its shown (escaped)
    name: a tab in the link's name made the two differ, and the source behind it was read."""
    from cuda_agent.eval.guards.static import check_candidate_static

    outside = tmp_path / "elsewhere.bin"
    outside.write_bytes(b"\xff\xfe not text: reading it says so")
    cand = candidate(tmp_path, "odd")
    (cand / "kernels" / "a\tb.cu").symlink_to(outside)
    findings = check_candidate_static(cand, task_fp32=True)
    assert [f.where for f in findings if "symlink" in f.message] == ["kernels/a\\tb.cu"]
    assert not [f for f in findings if "UTF-8" in f.message], [f.message for f in findings]
