"""`cuda-agent eval` end to end on CPU: table, --json, exit codes, clear errors for bad input."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuda_agent.cli import app

TASK = Path(__file__).parent / "harness" / "cpu_task"
ARGS = ["--device", "cpu", "--no-compile-baseline", "--sets", "2"]


def run(*args):
    return CliRunner().invoke(app, ["eval", *map(str, args)])


def test_json_verdict_and_exit_0_for_a_correct_candidate():
    proc = subprocess.run(
        [sys.executable, "-m", "cuda_agent.cli", "eval", str(TASK / "model.py"), "--candidate",
         str(TASK / "honest"), *ARGS, "--json"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["verdict"]["status"] == "correct" and out["verdict"]["reward"] >= 1
    assert out["task"]["inputs"] == [{"shape": [1 << 15], "dtype": "float32"}] * 2
    assert len(out["task"]["hash"]) == 16


def test_table_and_exit_1_for_a_wrong_candidate():
    r = run(TASK / "model.py", "--candidate", TASK / "wrong", *ARGS)
    assert r.exit_code == 1, r.output
    assert "incorrect" in r.output and "outside tolerance" in r.output


def test_exit_3_for_a_compile_error(tmp_path):
    cand = tmp_path / "c"
    (cand / "kernels").mkdir(parents=True)
    (cand / "model_new.py").write_text((TASK / "honest" / "model_new.py").read_text())
    (cand / "kernels" / "k.cu").write_text("extern \"C\" void scale_add(float* x, cudaStream_t s) { oops; }\n")
    r = run(TASK / "model.py", "--candidate", cand, *ARGS)
    assert r.exit_code == 3 and "compile_error" in r.output


@pytest.mark.parametrize(
    "args, message",
    [
        (["nope.py", "--candidate", "."], "task file not found"),
        ([TASK / "model.py", "--candidate", "/no/such/dir"], "candidate folder not found"),
        ([TASK / "model.py", "--candidate", TASK / "honest", "--tolerance", "loose"], "unknown tolerance preset"),
    ],
)
def test_bad_input_is_one_clear_line_and_exit_2(args, message):
    r = run(*args, "--device", "cpu")
    assert r.exit_code == 2 and message in r.output


def test_without_the_jail_eval_refuses_then_no_sandbox_is_the_recorded_way_out(tmp_path):
    """bubblewrap missing: one line naming what is missing and the flag; with --no-sandbox the same
    evaluation runs and its verdict says it ran unjailed."""
    import os

    env = {**os.environ, "CUDA_AGENT_BWRAP": str(tmp_path / "no-bwrap-here"), "CUDA_AGENT_CACHE": str(tmp_path / "c")}
    base = [sys.executable, "-m", "cuda_agent.cli", "eval", str(TASK / "model.py"), "--candidate", str(TASK / "honest"),
            *ARGS, "--json"]
    refused = subprocess.run(base, capture_output=True, text=True, timeout=300, env=env)
    assert refused.returncode == 5, refused.stderr[-2000:]
    error = json.loads(refused.stdout)["verdict"]["error"]
    assert "bubblewrap" in error and "--no-sandbox" in error and "\n" not in error
    unjailed = subprocess.run(base + ["--no-sandbox"], capture_output=True, text=True, timeout=300, env=env)
    assert unjailed.returncode == 0, unjailed.stderr[-2000:]
    verdict = json.loads(unjailed.stdout)["verdict"]
    assert verdict["status"] == "correct" and "evaluated without the jail (--no-sandbox)" in verdict["notes"]
