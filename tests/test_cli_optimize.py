"""`cuda-agent optimize` end to end on CPU with a scripted model: run folder, trajectory, exit code."""

import json
from pathlib import Path

from typer.testing import CliRunner

from cuda_agent.cli import app
from cuda_agent.records import read_trajectory

TASK = Path(__file__).parent / "harness" / "cpu_task"


def call(name, **args):
    return {"content": f"calling {name}", "tool_calls": [{"name": name, "arguments": args}]}


def test_scripted_run_writes_workspace_and_trajectory(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        call("edit_file", mode="create", path="kernels/scale_add.cu",
             file_text=(TASK / "honest" / "kernels" / "scale_add.cu").read_text()),
        call("edit_file", mode="create", path="model_new.py", overwrite=True,
             file_text=(TASK / "honest" / "model_new.py").read_text()),
        call("benchmark"),
        call("finish", summary="host loop, fused"),
    ]))
    out = tmp_path / "runs"
    r = CliRunner().invoke(app, ["optimize", str(TASK / "model.py"), "--script", str(script), "--out", str(out),
                                 "--device", "cpu", "--no-compile-baseline", "--json"])
    assert r.exit_code == 1, r.output  # correct; "faster than torch.compile" is out of reach without it
    summary = json.loads(r.stdout[r.stdout.index("{"):])
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


def test_missing_key_ends_the_run_cleanly_with_exit_4(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    r = CliRunner().invoke(app, ["optimize", str(TASK / "model.py"), "--model", "anthropic/claude-sonnet-4-5",
                                 "--out", str(tmp_path / "runs"), "--device", "cpu", "--no-compile-baseline"])
    assert r.exit_code == 4, r.output
    assert "model_error" in r.output and "ANTHROPIC_API_KEY" in r.output
