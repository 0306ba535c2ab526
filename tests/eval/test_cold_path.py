"""A candidate the static guards reject gets its verdict before torch, CUDA or the task start:
`cuda-agent eval` then never imports torch (the cold path of a hack is a second, not a worker's
start-up)."""

import json
import subprocess
import sys
from pathlib import Path

ADV = Path(__file__).parents[1] / "adversarial"


def test_a_statically_rejected_candidate_is_judged_without_importing_torch():
    proc = subprocess.run(
        [
            sys.executable,
            "-X",
            "importtime",
            "-m",
            "cuda_agent.cli",
            "eval",
            str(ADV / "task.py"),
            "--candidate",
            str(ADV / "triton_import"),
            "--device",
            "cpu",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    out = json.loads(proc.stdout)
    assert proc.returncode == 1 and out["verdict"]["status"] == "guard_violation" and out["verdict"]["reward"] == -1
    assert "import_not_allowed" in {f["guard"] for f in out["verdict"]["findings"]}
    assert "before the task was loaded" in out["verdict"]["notes"][0]
    imported = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and "cuda_agent.eval.evaluator" not in imported


def test_a_candidate_the_static_guards_pass_goes_on_to_the_evaluator():
    """torch_in_forward passes the static guards (its torch call is found when forward is recorded)."""
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuda_agent.cli",
            "eval",
            str(ADV / "task.py"),
            "--candidate",
            str(ADV / "torch_in_forward"),
            "--device",
            "cpu",
            "--no-compile-baseline",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    v = json.loads(proc.stdout)["verdict"]
    assert v["status"] == "guard_violation" and "aten_in_forward" in {f["guard"] for f in v["findings"]}
    assert not any("before the task was loaded" in n for n in v["notes"])


def test_kernel_sources_that_are_not_utf8_are_a_finding_not_a_crash(tmp_path):
    """A static guard decoded asm strings strictly: bytes that are not UTF-8 raised out of eval."""
    import shutil

    task = Path(__file__).parents[1] / "harness" / "cpu_task"
    cand = tmp_path / "c"
    shutil.copytree(task / "honest", cand, ignore=shutil.ignore_patterns("__pycache__"))
    cu = cand / "kernels" / "scale_add.cu"
    cu.write_bytes(cu.read_bytes().replace(b"for (int64_t i", b'asm volatile("// \xff\xfe");\n    for (int64_t i'))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "cuda_agent.cli",
            "eval",
            str(task / "model.py"),
            "--candidate",
            str(cand),
            "--device",
            "cpu",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    v = json.loads(proc.stdout)["verdict"]
    assert proc.returncode == 1 and v["status"] == "guard_violation"
    assert any("is not UTF-8 text" in f["message"] and f["where"] == "kernels/scale_add.cu" for f in v["findings"])


def test_a_fault_of_the_harness_is_still_one_json_verdict(monkeypatch):
    from typer.testing import CliRunner

    from cuda_agent.cli import app
    from cuda_agent.eval.evaluator import Evaluator

    def broken(self, candidate_dir, **kw):
        raise KeyError("a bug")

    monkeypatch.setattr(Evaluator, "evaluate", broken)
    task = Path(__file__).parents[1] / "harness" / "cpu_task"
    r = CliRunner().invoke(
        app,
        [
            "eval",
            str(task / "model.py"),
            "--candidate",
            str(task / "honest"),
            "--device",
            "cpu",
            "--no-compile-baseline",
            "--json",
        ],
    )
    out = json.loads(r.stdout)
    assert r.exit_code == 5 and out["verdict"]["status"] == "error"
    assert out["verdict"]["error"].startswith("the harness failed: KeyError: 'a bug' (test_cold_path.py line")
