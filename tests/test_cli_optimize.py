"""`cuda-agent optimize` end to end on CPU with a scripted model: run folder, trajectory, exit code."""

import json
from pathlib import Path

from typer.testing import CliRunner

from cuda_agent.cli import app
from cuda_agent.trajectory import read_trajectory

TASK = Path(__file__).parent / "harness" / "cpu_task"


def call(name, **args):
    return {"content": f"calling {name}", "tool_calls": [{"name": name, "arguments": args}]}


def test_scripted_run_writes_workspace_and_trajectory(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                call(
                    "edit_file",
                    mode="create",
                    path="kernels/scale_add.cu",
                    file_text=(TASK / "honest" / "kernels" / "scale_add.cu").read_text(),
                ),
                call(
                    "edit_file",
                    mode="create",
                    path="model_new.py",
                    overwrite=True,
                    file_text=(TASK / "honest" / "model_new.py").read_text(),
                ),
                call("benchmark"),
                call("finish", summary="host loop, fused"),
            ]
        )
    )
    out = tmp_path / "runs"
    r = CliRunner().invoke(
        app,
        [
            "optimize",
            str(TASK / "model.py"),
            "--script",
            str(script),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--no-compile-baseline",
            "--json",
        ],
    )
    assert r.exit_code == 1, r.output  # correct; "faster than torch.compile" is out of reach without it
    summary = json.loads(r.stdout[r.stdout.index("{") :])
    assert summary["stop_reason"] == "finished" and summary["best"]["correct"]
    run_dir = Path(summary["run_dir"])
    records = read_trajectory(run_dir / "trajectory.jsonl")
    kinds = [rec.type for rec in records]
    assert kinds[0] == "header" and kinds[-1] == "closing" and "evaluation" in kinds
    assert (run_dir / "workspace" / "kernels" / "scale_add.cu").is_file()
    # the result is re-verified, reported and packaged
    assert summary["verified_reward"] >= 1 and Path(summary["report"]).is_file()
    assert (Path(summary["dropin"]) / "layer.py").is_file()


def test_model_or_script_is_required(tmp_path):
    r = CliRunner().invoke(app, ["optimize", str(TASK / "model.py"), "--out", str(tmp_path)])
    assert r.exit_code == 2 and "--model" in r.output


def test_a_missing_key_is_bad_usage_before_any_run_folder(tmp_path, monkeypatch):
    """Not a failed run (exit 4) in a new folder: one line naming the variable, exit 2, nothing made
    (more cases in tests/test_cli_usage.py)."""
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    r = CliRunner().invoke(
        app,
        [
            "optimize",
            str(TASK / "model.py"),
            "--model",
            "anthropic/claude-sonnet-4-5",
            "--out",
            str(tmp_path / "runs"),
            "--device",
            "cpu",
            "--no-compile-baseline",
        ],
    )
    assert r.exit_code == 2, r.output
    assert "ANTHROPIC_API_KEY" in r.stderr and "re-verifying" not in r.output and not (tmp_path / "runs").exists()


def test_confirm_asks_before_each_call_and_a_rejection_reaches_the_model(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([call("list_files"), call("finish", summary="done")]))
    out = tmp_path / "runs"
    # reject list_files with a reason, approve finish
    r = CliRunner().invoke(
        app,
        [
            "optimize",
            str(TASK / "model.py"),
            "--script",
            str(script),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--no-compile-baseline",
            "--confirm",
        ],
        input="r\nnot now\na\n",
    )
    assert "approve?" in r.output and r.exit_code == 3, r.output  # no correct version was written
    run_dir = next(out.iterdir())
    results = [rec for rec in read_trajectory(run_dir / "trajectory.jsonl") if rec.type == "tool_result"]
    assert results[0].status == "rejected" and "not now" in results[0].observation


def test_live_writer_tracks_the_best_version(tmp_path):
    import io

    from rich.console import Console

    from cuda_agent.agent.console import LiveWriter
    from cuda_agent.records import Evaluation, ModelTurn

    console = Console(file=io.StringIO(), force_terminal=True, width=200)
    w = LiveWriter(tmp_path / "t.jsonl", console, "scripted")
    w.write(ModelTurn(step=1, content="", cost=0.25))
    w.write(Evaluation(step=1, version=1, status="correct", reward=2, time_ms=2.0, speedup_compile=0.9))
    w.write(Evaluation(step=2, version=2, status="correct", reward=3, time_ms=1.0, speedup_compile=1.8))
    w.write(Evaluation(step=3, version=3, status="incorrect", reward=-1))
    assert w.best.version == 2 and "1.80x vs compile" in w._status().plain and "$0.25" in w._status().plain
    w.close()
    assert len(read_trajectory(tmp_path / "t.jsonl")) == 4


def _no_gpu_env(**more):
    """This machine as one without a GPU (a GPU machine hides its GPUs), no device set anywhere."""
    import os

    env = {k: v for k, v in os.environ.items() if k != "CUDA_AGENT_EVAL__DEVICE"}
    return {**env, "CUDA_VISIBLE_DEVICES": "", **more}


def test_without_a_gpu_optimize_and_batch_stop_at_once_with_one_line(tmp_path):
    """No silent CPU run: exit code 2, one line on stderr (what is missing, doctor, --device cpu),
    nothing written; --help states the real default."""
    import subprocess
    import sys

    script = tmp_path / "script.json"
    script.write_text(json.dumps([call("finish", summary="x")]))
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "t.py").write_text((TASK / "model.py").read_text())
    commands = [
        ["optimize", str(TASK / "model.py"), "--script", str(script), "--out", str(tmp_path / "runs")],
        ["batch", str(tasks), "--script", str(script), "--out", str(tmp_path / "batch")],
        ["batch", str(tasks), "--eval-only", "--candidates", str(tmp_path), "--out", str(tmp_path / "batch")],
    ]
    for args in commands:
        proc = subprocess.run(
            [sys.executable, "-m", "cuda_agent.cli", *args],
            capture_output=True,
            text=True,
            timeout=300,
            env=_no_gpu_env(),
            cwd=tmp_path,
        )
        assert proc.returncode == 2 and proc.stdout == "", (args, proc.stderr[-2000:])
        assert proc.stderr.count("\n") == 1 and "no CUDA GPU is visible to torch" in proc.stderr, proc.stderr
        assert "cuda-agent doctor" in proc.stderr and "--device cpu" in proc.stderr
    assert not (tmp_path / "runs").exists() and not (tmp_path / "batch").exists()
    shown = " ".join(CliRunner().invoke(app, ["optimize", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "default cuda:0" in shown and "cpu without a GPU" not in shown


def _git(cwd, *args):
    import subprocess

    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True).stdout


def test_default_out_works_at_the_root_of_a_clone_and_a_tracked_folder_is_refused(tmp_path, monkeypatch):
    """`runs` (the default --out) inside a git repository: fine where the repository ignores it (a
    clone of cuda-agent lists /runs/ in .gitignore), and the run says where it went; refused, with
    nothing written, where the workspace repository would sit in the user's tracked tree."""
    clone = tmp_path / "clone"
    clone.mkdir()
    _git(clone, "init", "-q")
    script = tmp_path / "script.json"
    script.write_text(json.dumps([call("list_files"), call("finish", summary="done")]))
    monkeypatch.chdir(clone)
    monkeypatch.delenv("CUDA_AGENT_OUT", raising=False)
    args = ["optimize", str(TASK / "model.py"), "--script", str(script), "--device", "cpu", "--no-compile-baseline"]
    refused = CliRunner().invoke(app, args)
    assert refused.exit_code == 2 and refused.stdout == "" and not (clone / "runs").exists()
    assert "inside the git repository" in refused.stderr and "does not ignore it" in refused.stderr
    assert "runs/ in" in refused.stderr and ".gitignore" in refused.stderr
    (clone / ".gitignore").write_text("/runs/\n")
    r = CliRunner().invoke(app, args)
    assert r.exit_code == 3, r.output  # no correct version: the script writes no kernel
    (run_dir,) = (clone / "runs").iterdir()
    assert f"run folder: {run_dir}\n" in r.stdout  # where the run went, unbroken
    assert (run_dir / "workspace" / ".git").exists() and (run_dir / "trajectory.jsonl").is_file()
    assert _git(clone, "status", "--porcelain").split() == ["??", ".gitignore"]  # the run is not in the tree
