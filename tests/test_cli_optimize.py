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


def test_confirm_asks_before_each_call_and_a_rejection_reaches_the_model(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([call("list_files"), call("finish", summary="done")]))
    out = tmp_path / "runs"
    # reject list_files with a reason, approve finish
    r = CliRunner().invoke(app, ["optimize", str(TASK / "model.py"), "--script", str(script), "--out", str(out),
                                 "--device", "cpu", "--no-compile-baseline", "--confirm"],
                           input="r\nnot now\na\n")
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
