"""The export holds exactly the messages the model was shown, in order (format-error feedback,
trims, a person's message), and says which protocol and prompt version they were; runs the model
never answered in are left out with that reason; an empty selection writes no file, in every format."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_run import build
from fidelity_run import make_run, native_script, sent
from typer.testing import CliRunner

from cuda_agent.agent.loop import NO_CALL_NATIVE
from cuda_agent.agent.prompts import PROMPT_VERSION
from cuda_agent.train.export import EXTERNAL, NO_MODEL_TURN, export
from cuda_agent.train.sft_data import to_conversation


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def unweighted(messages: list[dict]) -> list[dict]:
    return [{k: v for k, v in m.items() if k != "weight"} for m in messages]


def test_sft_records_are_what_the_model_was_shown_with_feedback_and_trims(tmp_path):
    model, run_dir = make_run(tmp_path, native_script(), inbox=["keep it short"])
    trims = [
        json.loads(x)
        for x in (run_dir / "trajectory.jsonl").read_text().splitlines()
        if json.loads(x)["type"] == "trim"
    ]
    report = export([run_dir], "sft", tmp_path / "sft.jsonl")
    records = rows(tmp_path / "sft.jsonl")
    # one record per stretch between trims
    assert trims and report.written == len(records) == len(trims) + 1, report.lines()
    assert [(r["metadata"]["segment"], r["metadata"]["segments"]) for r in records] == [
        (k, len(records)) for k in range(len(records))
    ]
    trained = []
    for row in records:
        messages = unweighted(row["messages"])
        turns = [i for i, m in enumerate(row["messages"]) if m["role"] == "assistant"]
        for n, i in enumerate(turns):
            if "weight" not in row["messages"][i]:  # a trained turn: exactly the context it was written from
                assert messages[:i] == model.calls[n]["messages"]
                assert messages[i]["content"] == model.responses[n].content
                trained.append(n)
    assert trained == list(range(len(model.calls)))  # every turn trained once, in order
    last = sent(model)
    final = unweighted(records[-1]["messages"])
    assert final[: len(last)] == last and [m["role"] for m in final[len(last) :]] == ["assistant", "tool"]
    feedback = final.index({"role": "user", "content": NO_CALL_NATIVE})
    assert final[feedback - 1] == {"role": "assistant", "content": "I think I am done?"}
    assert {"role": "user", "content": "keep it short"} in final
    meta = records[0]["metadata"]
    assert (meta["protocol"], meta["prompt_version"]) == ("native", PROMPT_VERSION)
    assert meta["format_error_steps"] == [2] and meta["trimmed_steps"] == [t["step"] for t in trims]
    assert meta["person_message_steps"] == [3]


def test_a_text_protocol_run_says_so_and_keeps_its_form_for_training(tmp_path):
    """Garbage only (as a 135M model writes): every turn answered by feedback until the streak ends the run."""
    model, run_dir = make_run(
        tmp_path, ["hello!", "I will now write a kernel.", "ok"], native_tools=False, trim=False, max_format_errors=3
    )
    report = export([run_dir], "sft", tmp_path / "sft.jsonl")
    (row,) = rows(tmp_path / "sft.jsonl")
    assert report.written == 1 and row["metadata"]["stop_reason"] == "format_errors"
    assert row["metadata"]["protocol"] == "text" and row["metadata"]["format_error_steps"] == [1, 2, 3]
    roles = [m["role"] for m in row["messages"]]
    assert roles == ["system", "user"] + ["assistant", "user"] * 3  # each turn, then its feedback
    assert unweighted(row["messages"])[: len(sent(model))] == sent(model)
    # no action block anywhere, yet the recorded protocol keeps it in the text form
    assert to_conversation(row, native=True).form == "text"


def test_a_run_without_a_model_turn_is_left_out_with_that_reason(tmp_path):
    _, run_dir = make_run(tmp_path, [])  # the model fails at its first request
    assert export([run_dir], "sft", tmp_path / "sft.jsonl").skipped == {NO_MODEL_TURN: 1}
    assert export([run_dir], "verl", tmp_path / "tasks.parquet").written == 1  # a task is still a task


def test_a_run_an_mcp_client_drove_is_left_out_of_sft_and_rft_with_that_reason(tmp_path):
    _, run_dir = make_run(tmp_path, native_script())
    assert export([run_dir], "sft", tmp_path / "sft.jsonl").written >= 1  # the same run, as a model's
    path = run_dir / "trajectory.jsonl"
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    path.write_text("\n".join([json.dumps({**header, "model": "mcp:claude-code/2.1"}), *lines[1:]]) + "\n")
    for fmt in ("sft", "rft"):
        assert export([run_dir], fmt, tmp_path / f"{fmt}.jsonl").skipped == {EXTERNAL: 1}
    assert export([run_dir], "verl", tmp_path / "tasks.parquet").written == 1  # a task is still a task


def test_older_runs_say_unknown_rather_than_guess(tmp_path, monkeypatch):
    run = build(tmp_path, monkeypatch)  # a header without protocol or prompt version
    export([run], "sft", tmp_path / "sft.jsonl")
    (row,) = rows(tmp_path / "sft.jsonl")
    assert (row["metadata"]["protocol"], row["metadata"]["prompt_version"]) == ("unknown", "unknown")


@pytest.mark.parametrize("fmt", ["sft", "rft", "verl"])
def test_an_empty_selection_writes_no_file_and_exits_3(tmp_path, monkeypatch, fmt):
    from cuda_agent.cli import app

    build(tmp_path / "runs", monkeypatch)  # reward 2: below --min-reward 3
    out = tmp_path / f"out.{fmt}"
    r = CliRunner().invoke(
        app,
        [
            "export",
            str(tmp_path / "runs"),
            "--format",
            fmt,
            "--out",
            str(out),
            *([] if fmt == "verl" else ["--min-reward", "3"]),
            "--drop-trimmed",
        ],
    )
    if fmt == "verl":  # verl takes tasks whatever their reward: it writes
        assert r.exit_code == 0 and out.exists()
        r = CliRunner().invoke(app, ["export", str(tmp_path / "nothing"), "--format", fmt, "--out", str(out)])
        assert r.exit_code == 2  # a path that does not exist: bad usage
        (tmp_path / "empty").mkdir()
        r = CliRunner().invoke(app, ["export", str(tmp_path / "empty"), "--format", fmt, "--out", str(out)])
    assert r.exit_code == 3 and r.stdout == "", r.output
    if fmt == "verl":
        assert "left as it was" in r.stderr and "no run folder" in r.stderr
    else:
        assert not out.exists() and "reward below 3" in r.stderr
