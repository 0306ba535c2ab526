"""A file name that is not UTF-8 (a lone surrogate once Python reads it) in the workspace, the
history, the observations and the trajectory: nothing crashes, the name is shown escaped, and a run
holding one resumes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from cuda_agent.agent.loop import AgentConfig, run_agent
from cuda_agent.agent.resume import resume_run
from cuda_agent.agent.scripted_model import ScriptedModel
from cuda_agent.environment import Environment
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.records import ModelTurn, ToolResultRecord
from cuda_agent.run_folder import TRAJECTORY
from cuda_agent.tools.base import ToolContext
from cuda_agent.tools.files import DeleteFile, ListFiles
from cuda_agent.trajectory import TrajectoryWriter, read_trajectory
from cuda_agent.workspace import Workspace

RAW = b"kernels/bad\xff\xfename.cu"  # not UTF-8: os.fsdecode gives 'bad\udcff\udcfename.cu'
SHOWN = "kernels/bad\\xff\\xfename.cu"


def make_raw(root: Path, raw: bytes = RAW) -> bytes:
    path = os.path.join(os.fsencode(root), raw)
    with open(path, "wb") as f:
        f.write(b"// written by the shell\n")
    return path


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


def turn(*calls: dict, content: str = "") -> dict:
    return {"content": content, "tool_calls": list(calls)}


def test_history_and_reopen_with_a_non_utf8_name(ws, verdicts):
    raw = make_raw(ws.root)
    v1 = ws.commit_version(verdicts.incorrect(0, 3))
    listing = ws.history.git("ls-tree", "-r", "-z", "--name-only", v1.sha).split("\0")
    committed = next(n for n in listing if n.startswith("kernels/bad"))
    assert os.fsencode(committed) == RAW  # the real bytes, not a lossy decode
    assert ws.history.show(v1.sha, committed) == b"// written by the shell\n"
    assert [v.version for v in ws.versions()] == [1]
    os.remove(raw)
    make_raw(ws.root, b"kernels/other\xfd.cu")
    again = Workspace.open(ws.root)  # uncommitted work with such a name is committed on re-open
    assert again.history.git("log", "-1", "--format=%s").startswith("snapshot:")
    assert again.versions() == ws.versions()


def test_list_and_delete_through_a_real_workspace(ws):
    make_raw(ws.root)
    ctx = ToolContext(workspace=ws)
    r = ListFiles().run({}, ctx)
    assert r.status == "ok" and SHOWN.split("/")[1] in r.observation and "not allowed" in r.observation
    r.observation.encode("utf-8")
    assert DeleteFile().run({"path": SHOWN}, ctx).observation == f"deleted {SHOWN}"
    assert not os.path.lexists(os.path.join(os.fsencode(ws.root), RAW))


def test_the_trajectory_writer_escapes_what_utf8_cannot_carry(tmp_path):
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as w:
        w.write(ModelTurn(step=1, content="a lone \ud800 surrogate"))
        w.write(
            ToolResultRecord(
                step=1,
                call_id="c",
                name="list_files",
                observation="bad\udcff.cu",
                status="ok",
                data={"path": "kernels/bad\udcff.cu", "list": ["\udcfe"]},
            )
        )
    back = read_trajectory(path)
    assert back[0].content == "a lone \\ud800 surrogate"
    assert back[1].observation == "bad\\udcff.cu"
    assert back[1].data == {"path": "kernels/bad\\udcff.cu", "list": ["\\udcfe"]}
    path.read_bytes().decode("utf-8")  # plain UTF-8 through and through


def test_a_run_holding_such_a_name_resumes_and_the_model_can_delete_it(task, tmp_path):
    cfg = EvalConfig(device="cpu", n_sets=2, baselines=["eager"], timeout_s=60, cache_dir=tmp_path / "cache")
    env = Environment.create(task, runs_dir=tmp_path / "runs", eval_config=cfg)
    run_dir = env.workspace.root.parent
    make_raw(env.workspace.root)
    first = [
        turn(call("list_files"), content="what is there? \ud800"),
        # the model copies the name back raw (a JSON \udcff escape): refused, escaped, no crash
        turn(call("view_file", path="kernels/bad\udcff\udcfename.cu")),
    ]
    with env, TrajectoryWriter(run_dir / TRAJECTORY) as writer:
        result = run_agent(ScriptedModel(first), env, AgentConfig(max_steps=2), writer)
    assert result.stop_reason == "max_steps"
    records = read_trajectory(run_dir / TRAJECTORY)
    results = [r for r in records if r.type == "tool_result"]
    assert SHOWN.split("/")[1] in results[0].observation and results[1].status == "error"
    assert "\\xff" in results[1].observation

    make_raw(env.workspace.root, b"kernels/late\xfc.cu")  # left uncommitted when the run stopped
    env2, messages, state = resume_run(run_dir)
    assert any(SHOWN.split("/")[1] in (m.get("content") or "") for m in messages)
    json.dumps(messages).encode("utf-8")  # what goes to the model is plain text
    second = [
        turn(call("delete_file", path=SHOWN), call("delete_file", path="kernels/late\\xfc.cu")),
        turn(call("finish", summary="removed the bad names")),
    ]
    model = ScriptedModel(first + second)
    del model.responses[:2]
    with env2, TrajectoryWriter(run_dir / TRAJECTORY) as writer:
        result = run_agent(model, env2, AgentConfig(max_steps=10), writer, resume_state=state)
    assert result.stop_reason == "finished"
    kernels = os.listdir(os.path.join(os.fsencode(env2.workspace.root), b"kernels"))
    assert not any(name.startswith((b"bad", b"late")) for name in kernels)
    records = read_trajectory(run_dir / TRAJECTORY)
    deleted = [r.observation for r in records if r.type == "tool_result" and r.name == "delete_file"]
    assert deleted == [f"deleted {SHOWN}", "deleted kernels/late\\xfc.cu"]
