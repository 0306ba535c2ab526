"""`cuda-agent export`: SFT / RFT chat JSONL and verl's parquet of tasks, read back and checked
field by field; marked turns, filters, redaction, and a real scripted run end to end."""

import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from fake_run import build
from typer.testing import CliRunner

from cuda_agent.cli import app
from cuda_agent.train.export import export

SECRET = "sk-test1234567890abcdefghijklmnop"


def edit_records(run_dir: Path, change) -> None:
    """Rewrite the trajectory's records with `change(record) -> record | None` (None drops it)."""
    path = run_dir / "trajectory.jsonl"
    out = [change(json.loads(line)) for line in path.read_text().splitlines()]
    path.write_text("".join(json.dumps(r) + "\n" for r in out if r is not None))


@pytest.fixture
def runs(tmp_path, monkeypatch):
    """Three runs of one task: plain (reward 2), edited by a person + a leaked key (reward 3, as its
    verdict ledger says), and one that never closed."""
    plain = build(tmp_path / "a", monkeypatch)
    edited = build(tmp_path / "b", monkeypatch, best_reward=3)

    def edit(r):
        if r["type"] == "model_turn" and r["step"] == 3:
            r["edited_by_person"] = True
            r["tool_calls"][0]["original_arguments"] = '{"path": "x"}'
        if r["type"] == "tool_result" and r["step"] == 1:
            r["observation"] += f" key={SECRET}"  # as if an older writer had let it through
        return r

    edit_records(edited, edit)
    unfinished = build(tmp_path / "c", monkeypatch)
    edit_records(unfinished, lambda r: None if r["type"] == "closing" else r)
    return tmp_path, plain, edited, unfinished


def lines(path):
    return [json.loads(x) for x in Path(path).read_text().splitlines()]


def test_sft_keeps_raw_messages_tools_and_marks_what_the_model_did_not_write(runs):
    root, plain, edited, _ = runs
    report = export([root], "sft", root / "sft.jsonl")
    assert (report.runs, report.written) == (3, 2)
    assert report.skipped == {"unfinished (no closing record; resume it or pass --include-unfinished)": 1}
    rows = {Path(r["metadata"]["run"]).parent.name: r for r in lines(root / "sft.jsonl")}
    a, b = rows["a"], rows["b"]
    roles = [m["role"] for m in a["messages"]]
    assert roles[:2] == ["system", "user"] and roles.count("assistant") == 6 and roles.count("tool") == 6
    assert roles.count("user") == 2  # the task, and a person's message (step 3)
    first = a["messages"][2]
    assert first["tool_calls"][0]["function"]["name"] == "edit_file"
    assert a["messages"][3] == {
        "role": "tool",
        "tool_call_id": "call-1",
        "content": "created kernels/scale_add.cu (11 lines, 512 B)",
    }
    assert [t["function"]["name"] for t in a["tools"]] == ["edit_file", "benchmark", "verify", "finish"]
    assert a["metadata"]["reward"] == 2 and a["metadata"]["person_message_steps"] == [3]
    assert not any("weight" in m for m in a["messages"])
    # the edited turn is kept, with weight 0, and listed; the key is redacted on the way out
    weights = [m.get("weight") for m in b["messages"] if m["role"] == "assistant"]
    assert weights == [None, None, 0, None, None, None] and b["metadata"]["edited_steps"] == [3]
    assert SECRET not in json.dumps(b) and "[redacted]" in b["messages"][3]["content"]
    assert report.marked_turns == 1


def test_filters_say_why(runs):
    root, *_ = runs
    report = export([root], "sft", root / "sft.jsonl", min_reward=3, drop_marked=True, include_unfinished=True)
    assert report.written == 0 and not (root / "sft.jsonl").exists()  # nothing to write: no file
    assert report.skipped == {"reward below 3": 2, "turns written by a person or a script (--drop-marked)": 1}
    assert report.why_empty() == (
        "3 run(s) read, every one left out: 2 reward below 3; 1 turns written by a person or a script (--drop-marked)"
    )


def test_rft_keeps_the_best_run_of_each_task(runs):
    root, plain, edited, _ = runs
    report = export([root], "rft", root / "rft.jsonl", min_reward=2)
    (row,) = lines(root / "rft.jsonl")
    assert Path(row["metadata"]["run"]) == edited and row["metadata"]["reward"] == 3
    assert report.skipped["not the best run of its task"] == 1


def test_verl_parquet_of_tasks(runs):
    root, plain, *_ = runs
    report = export([plain], "verl", root / "tasks.parquet")
    assert report.written == 1
    table = pq.read_table(root / "tasks.parquet")
    assert set(table.column_names) == {"data_source", "prompt", "ability", "reward_model", "extra_info", "agent_name"}
    (row,) = table.to_pylist()
    assert row["data_source"] == "cuda-agent" and row["agent_name"] == "cuda_agent"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"] and "x * 2 + y" in row["prompt"][1]["content"]
    assert row["reward_model"] == {"style": "rule", "ground_truth": "0" * 16}
    extra = row["extra_info"]
    assert extra["need_tools_kwargs"] and extra["task_hash"] == "0" * 16 and "def forward" in extra["task_source"]
    assert set(extra["tools_kwargs"]) == {"edit_file", "benchmark", "verify", "finish"}
    assert extra["tools_kwargs"]["verify"]["create_kwargs"] == {"task_hash": "0" * 16}


def test_cli_export_of_a_scripted_run_is_empty_and_says_why(tmp_path):
    """A scripted session is not model output: every turn is marked, nothing is trained on."""
    task = Path(__file__).resolve().parents[1] / "harness" / "cpu_task"
    script = tmp_path / "script.json"
    script.write_text(
        json.dumps(
            [
                {"content": "look", "tool_calls": [{"name": "list_files", "arguments": {}}]},
                {"content": "done", "tool_calls": [{"name": "finish", "arguments": {"summary": "x"}}]},
            ]
        )
    )
    r = CliRunner().invoke(
        app,
        [
            "optimize",
            str(task / "model.py"),
            "--script",
            str(script),
            "--out",
            str(tmp_path / "runs"),
            "--device",
            "cpu",
            "--no-compile-baseline",
            "--quiet",
        ],
    )
    assert r.exit_code == 3, r.output  # no correct version
    r = CliRunner().invoke(
        app, ["export", str(tmp_path / "runs"), "--format", "sft", "--out", str(tmp_path / "o.jsonl")]
    )
    # nothing to write: no file, one line on stderr saying why, exit code 3
    assert r.exit_code == 3 and not (tmp_path / "o.jsonl").exists() and r.stdout == ""
    assert r.stderr.count("\n") == 1 and "o.jsonl not written" in r.stderr, r.stderr
    assert "no turn written by the model" in r.stderr and "wrote" not in r.stderr
    (tmp_path / "empty").mkdir()
    r = CliRunner().invoke(
        app, ["export", str(tmp_path / "empty"), "--format", "rft", "--out", str(tmp_path / "o.jsonl")]
    )
    assert r.exit_code == 3 and not (tmp_path / "o.jsonl").exists() and r.stderr.count("\n") == 1, r.stderr
    assert "no run folder" in r.stderr
    r = CliRunner().invoke(app, ["export", str(tmp_path / "runs"), "--format", "dpo", "--out", str(tmp_path / "o")])
    assert r.exit_code == 2 and "use sft, rft or verl" in r.output


# -- the reward is the verdict ledger's; a trajectory that disagrees is refused -----------------------


def test_a_best_reward_edited_by_hand_is_refused_and_the_rest_goes_on(tmp_path, monkeypatch):
    honest = build(tmp_path / "a", monkeypatch)
    edited = build(tmp_path / "b", monkeypatch)
    edit_records(edited, lambda r: {**r, "best_reward": 3} if r["type"] == "closing" else r)
    report = export([tmp_path], "rft", tmp_path / "rft.jsonl", min_reward=2)
    (row,) = lines(tmp_path / "rft.jsonl")
    assert Path(row["metadata"]["run"]) == honest and row["metadata"]["reward"] == 2
    (line,) = report.refused
    assert line.startswith(str(edited)) and "best_reward 3" in line and "reward 2" in line and "\n" not in line
    assert f"refused {line}" in report.lines()


def test_an_evaluation_record_edited_by_hand_is_refused(tmp_path, monkeypatch):
    run = build(tmp_path, monkeypatch)
    edit_records(run, lambda r: {**r, "reward": 3} if r["type"] == "evaluation" and r["version"] == 1 else r)
    report = export([run], "sft", tmp_path / "sft.jsonl")
    assert report.written == 0 and "evaluation record of version 1 says correct, reward 3" in report.refused[0]
    assert "refused" in report.why_empty()


def test_the_exported_reward_is_the_ledgers(tmp_path, monkeypatch):
    run = build(tmp_path, monkeypatch, best_reward=3)
    export([run], "sft", tmp_path / "sft.jsonl")
    assert lines(tmp_path / "sft.jsonl")[0]["metadata"]["reward"] == 3


def test_a_run_without_a_ledger_is_refused_saying_to_run_it_again(tmp_path, monkeypatch):
    old = build(tmp_path / "old", monkeypatch)
    (old / "ledger.jsonl").unlink()  # a run made before the harness kept one
    report = export([old], "rft", tmp_path / "rft.jsonl", min_reward=None)
    assert report.written == 0 and "no verdict ledger" in report.refused[0] and "re-run" in report.refused[0]
    assert export([old], "verl", tmp_path / "t.parquet").written == 1  # tasks only: no reward taken


def test_a_fifo_in_the_ledgers_place_is_refused_not_a_hang(tmp_path, monkeypatch):
    run = build(tmp_path, monkeypatch)
    (run / "ledger.jsonl").unlink()
    os.mkfifo(run / "ledger.jsonl")
    report = export([run], "sft", tmp_path / "sft.jsonl")
    assert report.written == 0 and "not a regular file" in report.refused[0]


def test_cli_export_prints_the_refused_run(tmp_path, monkeypatch):
    run = build(tmp_path, monkeypatch)
    edit_records(run, lambda r: {**r, "best_reward": 3} if r["type"] == "closing" else r)
    r = CliRunner().invoke(app, ["export", str(run), "--format", "rft", "--out", str(tmp_path / "o.jsonl")])
    assert r.exit_code == 3 and not (tmp_path / "o.jsonl").exists()
    assert f"refused {run}: its closing record says best_reward 3" in r.stderr
