"""Limits that hold: --max-wall is a deadline (no model request lasts past it, retries and waits
included; no tool starts past it), --max-calls-per-turn caps one reply's calls, and every tool call
that runs is a step of --max-steps (none starts past it)."""

from __future__ import annotations

import importlib.util
import json
import time

import pytest
from test_context import assert_paired
from test_loop import FINISH, LIST, TASK, call, env, of, run, turn  # noqa: F401 (env is a fixture)
from typer.testing import CliRunner

from cuda_agent.agent.errors import LimitsExceeded
from cuda_agent.agent.limits import AgentConfig
from cuda_agent.agent.loop import run_agent
from cuda_agent.agent.resume import rebuild
from cuda_agent.agent.scripted_model import ScriptedModel
from cuda_agent.cli import app
from cuda_agent.cli_flags import SettingFlags
from cuda_agent.settings import resolve
from cuda_agent.trajectory import TrajectoryWriter, read_trajectory

needs_litellm = pytest.mark.skipif(importlib.util.find_spec("litellm") is None, reason="litellm is not installed")


def test_calls_beyond_the_cap_are_answered_skipped_and_never_run(env, tmp_path):
    twelve = turn(*[call("list_files")] * 12)
    model, result, records = run(env, tmp_path, [twelve, FINISH], max_calls_per_turn=8)
    assert result.stop_reason == "finished" and result.steps == 9  # 8 calls of turn 1, then finish
    results = of(records, "tool_result")
    assert [r.status for r in results] == ["ok"] * 8 + ["skipped"] * 4 + ["ok"]
    skipped = results[8]
    assert skipped.data == {"skipped": "max_calls_per_turn"} and "at most 8 run per reply" in skipped.observation
    assert "12 tool calls" in skipped.observation
    sent = model.calls[1]["messages"]
    assert_paired(sent)  # every call of the reply has its answer: the history stays valid for the API
    assert sum(m["role"] == "tool" and m["content"] == skipped.observation for m in sent) == 4
    assert "at most 8 calls run per reply" in model.calls[0]["messages"][1]["content"]  # the task says so


def test_every_call_is_a_step_and_no_evaluation_starts_past_max_steps(env, tmp_path):
    eight = turn(*[call("verify")] * 8)
    model, result, records = run(env, tmp_path, [eight, FINISH], max_steps=2)
    assert (result.stop_reason, result.steps, len(model.calls)) == ("max_steps", 2, 1)
    results = of(records, "tool_result")
    assert [r.status for r in results].count("skipped") == 6
    assert {r.data["skipped"] for r in results if r.status == "skipped"} == {"max_steps"}
    assert len(of(records, "evaluation")) == len(env.workspace.versions()) == 2
    assert "step limit (2, --max-steps)" in results[-1].observation
    assert records[-1].steps == 2
    # a turn that runs no tool is a step, so replies without calls cannot go on for ever
    model, result, _ = run(
        env, tmp_path, [turn(content="hmm"), turn(content="hmm"), FINISH], max_steps=2, max_format_errors=5
    )
    assert (result.stop_reason, result.steps, len(model.calls)) == ("max_steps", 2, 2)


def test_no_tool_starts_past_the_wall_deadline(env, tmp_path, monkeypatch):
    real = env.step

    def slow(name, arguments):
        if name == "list_files":
            time.sleep(1.5)
        return real(name, arguments)

    monkeypatch.setattr(env, "step", slow)
    started = time.monotonic()
    model, result, records = run(env, tmp_path, [turn(*[call("list_files")] * 3), FINISH], max_wall_s=1.0)
    assert result.stop_reason == "max_wall_time" and len(model.calls) == 1
    assert time.monotonic() - started < 1.0 + 1.5 + 1.0  # the one call that started, not three
    results = of(records, "tool_result")
    assert [r.status for r in results] == ["ok", "skipped", "skipped"]
    assert (
        results[1].data == {"skipped": "max_wall_time"}
        and "wall-time limit (1 s, --max-wall)" in results[1].observation
    )
    assert result.steps == 1 and records[-1].stop_reason == "max_wall_time"


@needs_litellm
def test_a_model_request_ends_at_the_deadline_retries_and_waits_included(fake_openai):
    from cuda_agent.agent.litellm_model import LitellmModel

    messages = [{"role": "user", "content": "hi"}]
    model = LitellmModel(
        "openai/fake-model",
        api_base=fake_openai.base_url,
        tools="native",
        timeout_s=600,
        backoff_s=0.01,
        max_backoff_s=0.05,
    )
    fake_openai.reply(content="quick")  # without a deadline nothing changes (and litellm is imported now)
    assert model.query(messages, []).content == "quick"
    for _ in range(5):
        fake_openai.reply(content="slow", delay_s=20)  # every attempt would wait 20 s; 600 s allowed each
    model.deadline = time.monotonic() + 1.5
    started = time.monotonic()
    with pytest.raises(LimitsExceeded) as e:
        model.query(messages, [])
    assert e.value.reason == "max_wall_time" and time.monotonic() - started < 5
    # a back-off never sleeps past the deadline either: 500s with 30-60 s waits
    fake_openai.script.clear()
    fake_openai.fail(500, times=5)
    model = LitellmModel(
        "openai/fake-model", api_base=fake_openai.base_url, tools="native", backoff_s=60, max_backoff_s=120
    )
    model.deadline = time.monotonic() + 1.0
    started = time.monotonic()
    with pytest.raises(LimitsExceeded):
        model.query(messages, [])
    assert time.monotonic() - started < 4


@needs_litellm
def test_max_wall_bounds_a_run_whose_server_answers_slowly(tmp_path, fake_openai):
    fake_openai.reply(
        content="thinking very slowly", delay_s=60, tool_calls=[{"name": "finish", "arguments": {"summary": "late"}}]
    )
    started = time.monotonic()
    r = CliRunner().invoke(
        app,
        [
            "optimize",
            str(TASK / "model.py"),
            "--model",
            "openai/gpt-4o",
            "--api-base",
            fake_openai.base_url,
            "--out",
            str(tmp_path / "runs"),
            "--device",
            "cpu",
            "--no-compile-baseline",
            "--max-wall",
            "3",
            "--json",
        ],
    )
    elapsed = time.monotonic() - started
    assert r.exit_code == 3, r.output
    summary = json.loads(r.stdout[r.stdout.index("{") :])
    assert summary["stop_reason"] == "max_wall_time" and summary["steps"] == 0 and summary["error"] is None
    assert elapsed < 30, elapsed  # the request waited for the time left, not 600 s x 5 attempts
    closing = read_trajectory(f"{summary['run_dir']}/trajectory.jsonl")[-1]
    assert closing.stop_reason == "max_wall_time" and closing.wall_s < 8


def test_the_command_holds_its_limits(tmp_path):
    """The reviewer's case: one reply asking for 8 evaluations under --max-steps 2 --max-wall 3."""
    script = tmp_path / "script.json"
    script.write_text(json.dumps([turn(*[call("verify")] * 8), FINISH]))
    r = CliRunner().invoke(
        app,
        [
            "optimize",
            str(TASK / "model.py"),
            "--script",
            str(script),
            "--out",
            str(tmp_path / "runs"),
            "--device",
            "cpu",
            "--no-compile-baseline",
            "--max-steps",
            "2",
            "--max-wall",
            "3",
            "--json",
        ],
    )
    summary = json.loads(r.stdout[r.stdout.index("{") :])
    assert summary["stop_reason"] in ("max_steps", "max_wall_time") and summary["steps"] <= 2, summary
    records = read_trajectory(f"{summary['run_dir']}/trajectory.jsonl")
    assert (
        1 <= len(of(records, "evaluation")) <= 2
        and [r.status for r in of(records, "tool_result")].count("skipped") >= 6
    )


def test_the_cap_is_a_setting_and_a_flag(tmp_path, monkeypatch):
    none = SettingFlags().layer()  # what optimize's flags give when none is passed
    assert resolve(none, project_dir=tmp_path).settings.limits.max_calls_per_turn == 8
    monkeypatch.setenv("CUDA_AGENT_LIMITS__MAX_CALLS_PER_TURN", "5")
    assert resolve(none, project_dir=tmp_path).settings.limits.max_calls_per_turn == 5
    resolved = resolve(SettingFlags({"limits.max_calls_per_turn": 3}).layer(), project_dir=tmp_path)
    assert resolved.settings.limits.max_calls_per_turn == 3 and resolved.origins["limits.max_calls_per_turn"] == "flag"
    with pytest.raises(ValueError):
        AgentConfig(max_calls_per_turn=0)
    for command in (["optimize"], ["batch"]):
        shown = " ".join(CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "300"}).output.split())
        assert "--max-calls-per-turn" in shown and "limits.max_calls_per_turn" in shown
        assert "each tool call that runs is one step" in shown


def test_steps_carry_over_on_resume(env, tmp_path):
    """A resumed run's steps are counted as the loop counts them: calls that ran, skipped ones not."""
    path = tmp_path / "t.jsonl"
    model = ScriptedModel([turn(*[call("list_files")] * 3), LIST, FINISH])
    with TrajectoryWriter(path) as writer:
        run_agent(model, env, AgentConfig(max_steps=3, max_calls_per_turn=2), writer)
    records = read_trajectory(path)
    assert [r.status for r in of(records, "tool_result")] == ["ok", "ok", "skipped", "ok"]
    state = rebuild(records)
    assert (state.turns, state.steps, records[-1].steps) == (2, 3, 3)
