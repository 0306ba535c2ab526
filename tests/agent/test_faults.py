"""Faults a run must turn into a verdict, not a traceback: lone surrogates from the model (in its text
and in its tool arguments) and in older trajectories, a server's empty reply, a stale git lock in
the workspace, and `--resume` of a finished run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuda_agent.agent.protocol import valid_arguments
from cuda_agent.cli import app
from cuda_agent.records import UserMessage, valid_text
from cuda_agent.trajectory import TrajectoryWriter, read_trajectory

TASK = Path(__file__).parent.parent / "harness" / "cpu_task"
CPU = ["--device", "cpu", "--no-compile-baseline"]
LONE = "\ud800"  # what a JSON "\ud800" escape decodes to: a character UTF-8 cannot carry
needs_litellm = pytest.mark.skipif(importlib.util.find_spec("litellm") is None, reason="litellm is not installed")


def optimize(*args: str, json_out: bool = True) -> tuple[int, dict | str, str]:
    """The command in-process: exit code, --json's summary (else stdout), stderr."""
    r = CliRunner().invoke(app, ["optimize", *args, *(["--json"] if json_out else [])])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.exc_info
    out = r.stdout
    return r.exit_code, json.loads(out[out.index("{") :]) if json_out and "{" in out else out, r.stderr


@pytest.fixture
def fast_retries(monkeypatch):
    """The command's LitellmModel with short back-offs (5 attempts take seconds, not a minute)."""
    from cuda_agent.agent.litellm_model import LitellmModel

    init = LitellmModel.__init__
    monkeypatch.setattr(
        LitellmModel,
        "__init__",
        lambda self, *a, **kw: init(self, *a, **{"backoff_s": 0.01, "max_backoff_s": 0.05, **kw}),
    )


def no_lone_surrogates(obj) -> bool:
    return valid_text(obj) == obj


def test_valid_text_and_arguments():
    assert valid_text(f"a{LONE}b") == "a\ufffdb" and valid_text("\ud83d\ude00") == "\U0001f600"
    assert valid_text({"k": [f"x{LONE}"], f"{LONE}": 1}) == {"k": ["x\ufffd"], "\ufffd": 1}
    assert valid_text("kernels/bad\udcff.cu") == "kernels/bad\\xff.cu"  # a non-UTF-8 byte, as list_files shows it
    assert valid_arguments('{"a": "\\ud800"}') == '{"a": "\ufffd"}'  # the escape, written again
    assert valid_arguments(f'{{"a": "{LONE}"}}') == '{"a": "\ufffd"}'  # the character itself
    for raw in ('{"a": "\\u00e9"}', '{"a": "\\\\ud800"}', '{"a": "\\ud83d\\ude00"}', "{bad \\ud800"):
        assert valid_arguments(raw) == raw  # nothing to replace (or not JSON): byte for byte


def test_a_trajectory_older_runs_wrote_reads_back(tmp_path):
    path = tmp_path / "trajectory.jsonl"
    with TrajectoryWriter(path) as w:
        w.write(UserMessage(step=1, content="fine"))
    with open(path, "ab") as f:  # a JSON escape of a lone surrogate, and bytes that are not UTF-8
        f.write(b'{"time": 1.0, "type": "user_message", "step": 2, "content": "a \\ud800 b"}\n')
        f.write(b'{"time": 1.0, "type": "user_message", "step": 3, "content": "c \xed\xa0\x80 d"}\n')
    records = read_trajectory(path)
    assert [r.content for r in records] == ["fine", "a \ufffd b", "c \ufffd\ufffd\ufffd d"]


SCRIPT = [
    {
        "content": f"thinking {LONE} here",
        "tool_calls": [
            {"name": "edit_file", "arguments": {"mode": "create", "path": "notes.txt", "file_text": f"x {LONE} y\n"}}
        ],
    },
    {
        "content": "again",
        "tool_calls": [
            {"name": "edit_file", "arguments": f'{{"mode": "create", "path": "more.txt", "file_text": "{LONE}"}}'}
        ],
    },
    {"content": "done", "tool_calls": [{"name": "finish", "arguments": {"summary": f"s {LONE}"}}]},
]


def check_surrogate_run(run_dir: Path) -> None:
    records = read_trajectory(run_dir / "trajectory.jsonl")
    assert records[-1].type == "closing" and records[-1].stop_reason == "finished"
    assert "\ufffd" in records[1].content and no_lone_surrogates([r.model_dump() for r in records])
    results = [r for r in records if r.type == "tool_result"]
    assert [r.status for r in results if r.name == "edit_file"] == ["ok", "ok"], results
    ws = run_dir / "workspace"
    assert (ws / "notes.txt").read_text() == "x \ufffd y\n" and (ws / "more.txt").read_text() == "\ufffd"


def test_lone_surrogates_from_a_scripted_model_end_normally_and_resume(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps(SCRIPT))  # the file holds "\ud800" escapes, as a model's JSON would
    code, first, err = optimize(
        str(TASK / "model.py"), "--script", str(script), "--out", str(tmp_path / "runs"), *CPU, "--max-steps", "1"
    )
    assert (code, first["stop_reason"]) == (3, "max_steps"), err
    code, second, err = optimize("--resume", first["run_dir"], "--script", str(script), "--max-steps", "5")
    assert (code, second["stop_reason"]) == (3, "finished"), err
    check_surrogate_run(Path(first["run_dir"]))


@needs_litellm
def test_lone_surrogates_from_a_server_end_normally_and_resume(tmp_path, fake_openai):
    # content and arguments as the client decodes them: a lone surrogate in the text, and in the
    # arguments both as the character and as the JSON escape
    fake_openai.reply(
        content=f"thinking {LONE} here",
        tool_calls=[
            {
                "name": "edit_file",
                "arguments": json.dumps({"mode": "create", "path": "notes.txt", "file_text": f"x {LONE} y\n"}),
            }
        ],
    )
    fake_openai.reply(
        content="again", tool_calls=[{"name": "edit_file", "arguments": SCRIPT[1]["tool_calls"][0]["arguments"]}]
    )
    model = ["--model", "openai/gpt-4o", "--api-base", fake_openai.base_url]  # native tool calls
    code, first, err = optimize(
        str(TASK / "model.py"), *model, "--out", str(tmp_path / "runs"), *CPU, "--max-steps", "2"
    )
    assert (code, first["stop_reason"]) == (3, "max_steps"), err
    fake_openai.reply(content="done", tool_calls=[{"name": "finish", "arguments": {"summary": f"s {LONE}"}}])
    code, second, err = optimize("--resume", first["run_dir"], *model, "--max-steps", "5")
    assert (code, second["stop_reason"]) == (3, "finished"), err
    check_surrogate_run(Path(first["run_dir"]))
    sent = [r["body"]["messages"] for r in fake_openai.chat_requests]
    assert len(sent) == 3 and no_lone_surrogates(sent)
    assert sent[1][2]["content"] == "thinking \ufffd here"  # the history as the next request carried it
    assert sent[2][: len(sent[1])] == sent[1]  # the resumed history is the one the run had


@needs_litellm
def test_an_empty_reply_is_retried_and_then_a_model_error(tmp_path, fake_openai, fast_retries):
    from cuda_agent.agent.errors import ModelError
    from cuda_agent.agent.litellm_model import LitellmModel

    def empty():
        fake_openai.reply(content="never read")
        fake_openai.script[-1]["body"]["choices"] = []

    model = LitellmModel(
        "openai/fake-model",
        api_base=fake_openai.base_url,
        tools="native",
        backoff_s=0.01,
        max_backoff_s=0.05,
        retries=2,
    )
    empty()
    fake_openai.reply(content="here")
    r = model.query([{"role": "user", "content": "hi"}], [])
    assert r.content == "here" and r.raw["retries"] == 1
    for _ in range(3):
        empty()
    with pytest.raises(ModelError) as e:
        model.query([{"role": "user", "content": "hi"}], [])
    assert e.value.kind == "unavailable" and "no choices" in str(e.value) and "3 attempt(s)" in str(e.value)
    # the command: one line on stderr, exit code 4, the closing names it
    for _ in range(5):
        empty()
    code, out, err = optimize(
        str(TASK / "model.py"),
        "--model",
        "openai/gpt-4o",
        "--api-base",
        fake_openai.base_url,
        "--out",
        str(tmp_path / "runs"),
        *CPU,
        "--quiet",
        json_out=False,
    )
    assert code == 4 and out.startswith("model_error:unavailable after 0 steps"), (out, err)
    assert err.count("\n") == 1 and "no choices" in err, err


WRITE_CORRECT = [
    {
        "content": "kernel",
        "tool_calls": [
            {
                "name": "edit_file",
                "arguments": {
                    "mode": "create",
                    "path": "kernels/scale_add.cu",
                    "overwrite": True,
                    "file_text": (TASK / "honest" / "kernels" / "scale_add.cu").read_text(),
                },
            }
        ],
    },
    {
        "content": "module",
        "tool_calls": [
            {
                "name": "edit_file",
                "arguments": {
                    "mode": "create",
                    "path": "model_new.py",
                    "overwrite": True,
                    "file_text": (TASK / "honest" / "model_new.py").read_text(),
                },
            }
        ],
    },
    {"content": "check", "tool_calls": [{"name": "verify", "arguments": {}}]},
]
FINISH = {"content": "done", "tool_calls": [{"name": "finish", "arguments": {"summary": "fused"}}]}
LIST = {"content": "look", "tool_calls": [{"name": "list_files", "arguments": {}}]}


def git_head(run_dir: Path) -> str:
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=run_dir / "workspace", capture_output=True, text=True, check=True
    ).stdout


def test_resuming_a_finished_run_changes_nothing(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([*WRITE_CORRECT, FINISH]))
    code, first, err = optimize(str(TASK / "model.py"), "--script", str(script), "--out", str(tmp_path / "runs"), *CPU)
    assert (code, first["stop_reason"]) == (1, "finished") and first["verified_reward"] >= 1, err
    run_dir = Path(first["run_dir"])
    (run_dir / "workspace" / "scratch.txt").write_text("left by hand")  # a resume would commit it
    before = {
        p: p.read_bytes() for p in (run_dir / "report.md", run_dir / "trajectory.jsonl", run_dir / "outcome.json")
    }
    head = git_head(run_dir)
    code, out, err = optimize("--resume", str(run_dir), "--script", str(script), "--max-steps", "50", json_out=False)
    assert code == 1 and out.count("\n") == 1 and err == "", (out, err)
    assert (
        "the run is finished" in out
        and f"version 1 re-verified, reward {first['verified_reward']}" in out
        and "nothing to resume" in out
    )
    assert {p: p.read_bytes() for p in before} == before and git_head(run_dir) == head
    code, again, err = optimize("--resume", str(run_dir), "--max-steps", "50")  # no model needed either
    assert code == 1 and again == first and "the run is finished" in err


def test_a_finished_run_without_its_saved_outcome_is_only_finalized(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([LIST, FINISH]))
    code, first, err = optimize(str(TASK / "model.py"), "--script", str(script), "--out", str(tmp_path / "runs"), *CPU)
    run_dir = Path(first["run_dir"])
    (run_dir / "outcome.json").unlink()  # as a run made before it was saved, or killed while re-verifying
    (run_dir / "report.md").unlink()
    lines = (run_dir / "trajectory.jsonl").read_text().count("\n")
    code, second, err = optimize("--resume", str(run_dir), "--script", str(script))
    assert (code, second["stop_reason"], second["steps"]) == (3, "finished", 2), err
    assert "- stop reason: finished" in (run_dir / "report.md").read_text()
    assert (run_dir / "trajectory.jsonl").read_text().count("\n") == lines  # no turn was taken
    code, third, err = optimize("--resume", str(run_dir), "--script", str(script))
    assert code == 3 and third == second and "the run is finished" in err


def test_a_stale_git_lock_is_removed_on_resume_and_a_live_one_is_an_error(tmp_path):
    script = tmp_path / "script.json"
    script.write_text(json.dumps([LIST, FINISH]))
    code, first, err = optimize(
        str(TASK / "model.py"), "--script", str(script), "--out", str(tmp_path / "runs"), *CPU, "--max-steps", "1"
    )
    run_dir = Path(first["run_dir"])
    lock = run_dir / "workspace.git" / "index.lock"
    (run_dir / "workspace" / "notes.txt").write_text("uncommitted")  # the re-open commits it: git must work
    holder = subprocess.Popen([sys.executable, "-c", f"f = open({str(lock)!r}, 'w'); import time; time.sleep(60)"])
    try:
        deadline = time.monotonic() + 30
        while not lock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        code, out, err = optimize("--resume", str(run_dir), "--script", str(script), "--max-steps", "5", json_out=False)
        assert code == 2 and err.count("\n") == 1 and f"pid {holder.pid}" in err and "held by a running" in err, err
        assert lock.exists()
    finally:
        holder.kill()
        holder.wait()
    code, second, err = optimize("--resume", str(run_dir), "--script", str(script), "--max-steps", "5")
    assert (code, second["stop_reason"]) == (3, "finished"), err
    assert not lock.exists() and f"removed {lock}: a stale git lock" in err and err.count("a stale git lock") == 1
    assert (
        "snapshot: uncommitted work found on re-open"
        in subprocess.run(
            ["git", "log", "--format=%s"], cwd=run_dir / "workspace", capture_output=True, text=True
        ).stdout
    )


def test_a_failure_inside_the_run_is_one_line_and_exit_4(tmp_path, monkeypatch):
    from cuda_agent.agent.loop import Agent

    def broken(self):
        raise RuntimeError("a bug in the loop\nsecond line")

    monkeypatch.setattr(Agent, "step", broken)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([FINISH]))
    code, out, err = optimize(
        str(TASK / "model.py"),
        "--script",
        str(script),
        "--out",
        str(tmp_path / "runs"),
        *CPU,
        "--quiet",
        json_out=False,
    )
    assert code == 4 and err.count("\n") == 1, (out, err)
    assert "the run failed: RuntimeError: a bug in the loop" in err and "traceback in" in err
    run_dir = next((tmp_path / "runs").iterdir())
    assert "RuntimeError" in (run_dir / "error.log").read_text()
    assert read_trajectory(run_dir / "trajectory.jsonl")[-1].stop_reason == "error"
