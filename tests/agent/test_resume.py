"""Resuming runs: stopped by a limit, killed mid-turn (also by a real SIGKILL), or finished; steps
continue, versions are neither repeated nor lost, and the trajectory reads back whole."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_context import assert_paired
from test_loop import FINISH, LIST, TASK, WRITE_HONEST, call, turn
from typer.testing import CliRunner

from cuda_agent.agent.history import INTERRUPTED
from cuda_agent.agent.loop import Agent, AgentConfig, run_agent
from cuda_agent.agent.resume import AFTER_FINISH, resume_run
from cuda_agent.agent.scripted_model import ScriptedModel
from cuda_agent.cli import app
from cuda_agent.environment import Environment
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.run_folder import TRAJECTORY
from cuda_agent.task import load_task
from cuda_agent.trajectory import TrajectoryWriter, read_trajectory

VERIFY = turn(call("verify"))


def new_env(tmp_path: Path) -> Environment:
    cfg = EvalConfig(
        device="cpu",
        n_sets=2,
        baselines=["eager"],
        timeout_s=60,
        timing=TimingConfig(warmup_ms=5, min_batches=2, max_batches=3, budget_ms=30),
        cache_dir=tmp_path / "cache",
    )
    return Environment.create(load_task(str(TASK / "model.py")), runs_dir=tmp_path / "runs", eval_config=cfg)


def scripted(script: list, skip: int = 0) -> ScriptedModel:
    """The script as the CLI replays it on resume: the turns already taken are skipped (ids kept)."""
    model = ScriptedModel(script)
    del model.responses[:skip]
    return model


def first_run(tmp_path: Path, script: list, **limits) -> tuple[Agent, Path]:
    env = new_env(tmp_path)
    path = env.workspace.root.parent / TRAJECTORY
    with env, TrajectoryWriter(path) as writer:
        agent = Agent(scripted(script), env, AgentConfig(**limits), writer)
        agent.run()
    return agent, path


def resumed(path: Path, script: list, skip: int, **limits):
    env, messages, state = resume_run(path.parent)
    model = scripted(script, skip)
    with env, TrajectoryWriter(path) as writer:
        result = run_agent(model, env, AgentConfig(**limits), writer, resume_state=state)
    return model, result, env.workspace.versions()


def whole(path: Path) -> list:
    records = read_trajectory(path)
    assert len(path.read_text().splitlines()) == len(records)  # no torn or skipped line left
    return records


def of(records, kind):
    return [r for r in records if r.type == kind]


def test_a_run_stopped_by_max_steps_continues_without_repeating_or_losing_steps(tmp_path):
    script = [WRITE_HONEST, VERIFY, LIST, VERIFY, FINISH]
    agent, path = first_run(tmp_path, script, max_steps=3)  # two turns: two edits, then a verify
    env, messages, state = resume_run(path.parent)
    env.close()
    assert messages == agent.messages  # the conversation exactly as the model had it
    assert (state.turns, state.steps, state.previous_stop, state.interrupted, state.recovered, state.records) == (
        2,
        3,
        "max_steps",
        [],
        [],
        [],
    )
    assert state.wall_s == of(read_trajectory(path), "closing")[0].wall_s

    model, result, versions = resumed(path, script, skip=2, max_steps=10)
    assert result.stop_reason == "finished" and result.steps == 6
    assert model.calls[0]["messages"] == agent.messages
    records = whole(path)
    assert [r.step for r in of(records, "model_turn")] == [1, 2, 3, 4, 5]
    assert [r.name for r in of(records, "tool_result")] == [
        "edit_file",
        "edit_file",
        "verify",
        "list_files",
        "verify",
        "finish",
    ]
    kinds = [r.type for r in records]
    assert (kinds.count("header"), kinds.count("resume"), kinds.count("closing"), kinds[-1]) == (1, 1, 2, "closing")
    marker = of(records, "resume")[0]
    assert (marker.step, marker.previous_stop, marker.model) == (2, "max_steps", "scripted")
    assert marker.config["agent"]["max_steps"] == 10
    # each version once, each with its one evaluation record
    assert [v.version for v in versions] == [1, 2]
    assert [(e.step, e.commit) for e in of(records, "evaluation")] == [(2, versions[0].sha), (4, versions[1].sha)]
    assert records[-1].steps == 6 and records[-1].best_version == 1


def test_counters_carry_over_so_limits_count_the_whole_run(tmp_path):
    priced = dict(cost=0.5, usage={"prompt_tokens": 100, "completion_tokens": 10})
    script = [turn(call("no_such_tool"), **priced), turn(content="thinking", cost=None), turn(call("nope")), FINISH]
    _, path = first_run(tmp_path, script, max_steps=2)
    env, _, state = resume_run(path.parent)
    env.close()
    assert (state.steps, state.tokens, state.cost, state.unpriced, state.format_errors) == (2, 110, 0.5, 1, 2)
    # a third malformed turn in a row ends the run: the streak did not restart at the resume
    model, result, _ = resumed(path, script, skip=2, max_steps=10, max_format_errors=3)
    assert (result.stop_reason, result.steps, result.tokens, result.cost, result.unpriced_turns) == (
        "format_errors",
        3,
        110,
        0.5,
        1,
    )
    assert model.remaining == 1
    # wall time spent before counts too
    env, _, state = resume_run(path.parent)
    state.wall_s = 3600.0
    model = scripted(script, skip=3)
    with env, TrajectoryWriter(path) as writer:
        result = run_agent(model, env, AgentConfig(max_wall_s=1800), writer, resume_state=state)
    assert result.stop_reason == "max_wall_time" and model.calls == [] and result.wall_s >= 3600


def test_a_turn_cut_off_by_a_kill_is_answered_and_its_committed_version_kept(tmp_path):
    script = [WRITE_HONEST, turn(call("verify"), call("list_files")), FINISH, LIST, FINISH]
    _, path = first_run(tmp_path, script, max_steps=4)  # two turns of two calls each
    # as if killed during turn 2: its results, evaluation and the closing never written, a line torn
    lines = path.read_text().splitlines(keepends=True)
    cut = next(i for i, line in enumerate(lines) if '"model_turn"' in line and '"step": 2' in line) + 1
    path.write_text("".join(lines[:cut]) + lines[cut][:40])
    env, messages, state = resume_run(path.parent)
    env.close()
    v1 = env.workspace.versions()[0]  # the verify did commit before the kill
    # the calls cut off count as steps: they may have run
    assert (state.turns, state.steps, state.previous_stop, state.interrupted, state.recovered) == (
        2,
        4,
        None,
        ["call-2-0", "call-2-1"],
        [1],
    )
    assert [m["content"] for m in messages[-3:-1]] == [INTERRUPTED, INTERRUPTED]
    assert messages[-1]["role"] == "user" and "version 1 (correct, reward" in messages[-1]["content"]
    assert_paired(messages)

    model, result, versions = resumed(path, script, skip=2, max_steps=5)
    assert result.stop_reason == "finished" and model.calls[0]["messages"] == messages
    assert versions == [v1]  # nothing re-run: still one version
    records = whole(path)
    assert [(r.step, r.status) for r in of(records, "tool_result")][-3:] == [
        (2, "interrupted"),
        (2, "interrupted"),
        (3, "ok"),
    ]
    assert [(e.step, e.commit, e.version) for e in of(records, "evaluation")] == [(2, v1.sha, 1)]
    marker = of(records, "resume")[0]
    assert (marker.previous_stop, marker.interrupted_calls, marker.recovered_versions) == (
        None,
        ["call-2-0", "call-2-1"],
        [1],
    )
    assert [m.injected for m in of(records, "user_message")] == [False]

    # a finished run goes on with more steps; the earlier answers sit right after their turn
    env, messages, state = resume_run(path.parent)
    env.close()
    assert (state.previous_stop, state.interrupted, state.recovered) == ("finished", [], [])
    assert_paired(messages)
    assert messages[-1] == {"role": "user", "content": AFTER_FINISH}
    model, result, versions = resumed(path, script, skip=3, max_steps=7)
    assert result.stop_reason == "finished" and result.steps == 7 and versions == [v1]
    records = whole(path)
    assert [r.step for r in of(records, "model_turn")] == [1, 2, 3, 4, 5]
    assert [r.stop_reason for r in of(records, "closing")] == ["finished", "finished"]
    assert len(of(records, "resume")) == 2 and len(of(records, "evaluation")) == 1


def write_script(tmp_path: Path, script: list) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(script))
    return path


def optimize(*args: str) -> tuple[int, dict | str]:
    r = CliRunner().invoke(app, ["optimize", *args, "--json"])
    out = r.stdout
    # usage errors: the message with rich's line wrapping undone
    return r.exit_code, json.loads(out[out.index("{") :]) if r.exit_code != 2 else " ".join(r.output.split())


def test_optimize_resume_continues_a_scripted_run(tmp_path):
    script = write_script(tmp_path, [LIST, LIST, FINISH])
    code, first = optimize(
        str(TASK / "model.py"),
        "--script",
        str(script),
        "--out",
        str(tmp_path / "runs"),
        "--device",
        "cpu",
        "--no-compile-baseline",
        "--max-steps",
        "1",
    )
    assert code == 3 and first["stop_reason"] == "max_steps" and first["steps"] == 1
    code, second = optimize("--resume", first["run_dir"], "--script", str(script), "--max-steps", "5")
    assert code == 3 and second["stop_reason"] == "finished" and second["steps"] == 3
    assert second["run_dir"] == first["run_dir"]
    records = whole(Path(first["run_dir"]) / TRAJECTORY)
    assert [(r.step, r.tool_calls[0].name) for r in of(records, "model_turn")] == [
        (1, "list_files"),
        (2, "list_files"),
        (3, "finish"),
    ]
    assert [r.type for r in records].count("resume") == 1


def test_optimize_resume_usage_errors(tmp_path):
    script = str(write_script(tmp_path, [FINISH]))
    code, out = optimize("--script", script)
    assert code == 2 and "give a TASK to start a run, or --resume RUN_DIR" in out
    code, out = optimize(str(TASK / "model.py"), "--resume", str(tmp_path), "--script", script)
    assert code == 2 and "not both" in out
    code, out = optimize("--resume", str(tmp_path), "--script", script, "--allow-shell")
    assert code == 2 and "come from the run being resumed" in out
    code, out = optimize("--resume", str(tmp_path), "--script", script)
    assert code == 2 and f"holds no {TRAJECTORY}" in out


def test_a_run_killed_by_sigkill_resumes_and_completes(tmp_path):
    script = write_script(tmp_path, [turn(call("shell", command="echo $$ > shell.pid; exec sleep 120")), FINISH])
    out = tmp_path / "runs"
    cmd = [
        sys.executable,
        "-m",
        "cuda_agent.cli",
        "optimize",
        str(TASK / "model.py"),
        "--script",
        str(script),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--no-compile-baseline",
        "--allow-shell",
    ]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    sleeper = None
    try:
        deadline = time.monotonic() + 120
        while sleeper is None and time.monotonic() < deadline and proc.poll() is None:
            found = [p for p in out.glob("*/workspace/shell.pid") if p.read_text().strip()]
            sleeper = int(found[0].read_text()) if found else time.sleep(0.2)
        assert sleeper is not None, "the scripted run never reached its shell call"
        # while it runs, another resume is one line and touches nothing (it would commit the run's
        # half-made edits, clear git locks it holds, write the same trajectory)
        live = next(out.iterdir())
        before = (live / TRAJECTORY).read_bytes(), _git_log(live)
        code, message = optimize("--resume", str(live), "--script", str(script))
        assert code == 2 and f"this run is being run by another process (pid {proc.pid}" in message, message
        assert ((live / TRAJECTORY).read_bytes(), _git_log(live)) == before
        os.killpg(proc.pid, signal.SIGKILL)  # mid-turn: the shell call is running; the kernel drops its run lock
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if sleeper is not None:  # the shell tool gives its command a session of its own
            try:
                os.kill(sleeper, signal.SIGKILL)
            except ProcessLookupError:
                pass
    run_dir = next(out.iterdir())
    assert [r.type for r in read_trajectory(run_dir / TRAJECTORY)] == ["header", "model_turn"]
    code, summary = optimize("--resume", str(run_dir), "--script", str(script))
    assert code == 3 and summary["stop_reason"] == "finished" and summary["steps"] == 2
    records = whole(run_dir / TRAJECTORY)
    assert [r.type for r in records] == [
        "header",
        "model_turn",
        "resume",
        "tool_result",
        "model_turn",
        "tool_result",
        "closing",
    ]
    assert (records[2].previous_stop, records[2].interrupted_calls) == (None, ["call-1-0"])
    assert (records[3].status, records[3].observation) == ("interrupted", INTERRUPTED)
    log = subprocess.run(["git", "log", "--format=%s"], cwd=run_dir / "workspace", capture_output=True, text=True)
    assert "snapshot: uncommitted work found on re-open" in log.stdout  # shell.pid, kept


def _git_log(run_dir: Path) -> str:
    return subprocess.run(
        ["git", "log", "--format=%H %s"], cwd=run_dir / "workspace", capture_output=True, text=True
    ).stdout


def test_resume_refuses_a_workspace_whose_task_was_swapped(tmp_path):
    """The shell can rewrite the workspace's record and git objects; the trajectory, outside the
    workspace, names the task the run started with, and a resume checks the two agree."""
    from cuda_agent.agent.resume import ResumeError

    _, path = first_run(tmp_path, [WRITE_HONEST, VERIFY, FINISH], max_steps=1)
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    header["task"]["hash"] = "0" * 16  # as if the workspace now held another task than the run's
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    with pytest.raises(ResumeError, match="not the task this run started with"):
        resume_run(path.parent)


def test_a_cpu_run_resumed_without_device_stays_on_the_cpu(tmp_path, monkeypatch):
    """No layer names a device on resume: the run keeps the one its header recorded (no no-GPU stop,
    no move to cuda:0)."""
    script = write_script(tmp_path, [LIST, LIST, FINISH])
    code, first = optimize(
        str(TASK / "model.py"),
        "--script",
        str(script),
        "--out",
        str(tmp_path / "runs"),
        "--device",
        "cpu",
        "--no-compile-baseline",
        "--max-steps",
        "1",
    )
    assert code == 3
    monkeypatch.delenv("CUDA_AGENT_EVAL__DEVICE", raising=False)
    code, second = optimize("--resume", first["run_dir"], "--script", str(script), "--max-steps", "5")
    assert code == 3 and second["stop_reason"] == "finished", second
    resumed = of(whole(Path(first["run_dir"]) / TRAJECTORY), "resume")[0]
    assert resumed.config["eval"]["device"] == "cpu"
