"""A task whose own code fails (here: its reference forward raises) stops the agent run at the
first evaluation as `unscorable`, with the task's error in the closing record and exit code 5,
instead of "verify failed inside the tool" on every later call."""

import json
from pathlib import Path

from typer.testing import CliRunner

from cuda_agent.cli import app
from cuda_agent.trajectory import read_trajectory

TASK = Path(__file__).parents[1] / "harness" / "cpu_task"


def call(name, **args):
    return {"content": f"calling {name}", "tool_calls": [{"name": name, "arguments": args}]}


def test_a_task_whose_reference_raises_stops_the_run_as_unscorable(tmp_path):
    task = tmp_path / "task.py"
    task.write_text(
        (TASK / "model.py")
        .read_text()
        .replace("        return self.alpha * x + y", "        raise RuntimeError('the reference is broken')")
    )
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
                call("verify"),
                call("verify"),
                call("benchmark"),
                call("finish", summary="never reached"),
            ]
        )
    )
    r = CliRunner().invoke(
        app,
        [
            "optimize",
            str(task),
            "--script",
            str(script),
            "--out",
            str(tmp_path / "runs"),
            "--device",
            "cpu",
            "--no-compile-baseline",
            "--json",
        ],
    )
    assert r.exit_code == 5, r.output
    summary = json.loads(r.stdout[r.stdout.index("{") :])
    assert summary["stop_reason"] == "unscorable"
    records = read_trajectory(Path(summary["run_dir"]) / "trajectory.jsonl")
    closing = records[-1]
    assert closing.type == "closing" and closing.stop_reason == "unscorable"
    assert "the task's forward raised RuntimeError: the reference is broken (model.py line" in closing.error
    assert [rec.name for rec in records if rec.type == "tool_result"] == ["edit_file", "edit_file", "verify"]
