"""`export --include-external`: runs an MCP client drove (`cuda-agent mcp`) kept as demonstrations.

The run is made as the server makes it: the loop on the CPU task with the client's bridge as its
model (each queued call is the client's next tools/call). By default it stays out of sft/rft with
that reason; with the flag every turn the client made is marked `"external": true`, holds only its
tool calls, and `train sft`'s data side trains exactly those calls (the action block alone in the
text form, the call in the native form) and counts them. A model's run an MCP client resumed has
only the resumed turns marked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fidelity_run import make_run, native_script
from typer.testing import CliRunner

from cuda_agent.agent.loop import AgentConfig, run_agent
from cuda_agent.agent.protocol import ToolCall
from cuda_agent.environment import Environment
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.mcp_server.bridge import ClientBridge
from cuda_agent.task import load_task
from cuda_agent.train.export import EXTERNAL, export
from cuda_agent.train.sft_data import to_conversation
from cuda_agent.trajectory import TrajectoryWriter

TASK = Path(__file__).resolve().parents[1] / "harness" / "cpu_task"
CLIENT = "mcp:test-client/9.1"
CALLS = [
    ("view_file", {"path": "model.py"}),
    ("edit_file", {"mode": "create", "path": "notes.txt", "file_text": "fuse the two ops\n"}),
    ("finish", {"summary": "notes only"}),
]


def rows(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


@pytest.fixture(scope="module")
def mcp_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("mcp-run")
    bridge = ClientBridge(CLIENT)
    for n, (name, args) in enumerate(CALLS, 1):  # what the server submits for each of the client's tools/call
        bridge.submit(ToolCall(id=f"mcp-{n}", name=name, arguments=json.dumps(args)))
    cfg = EvalConfig(device="cpu", baselines=["eager"], cache_dir=root / "cache")
    with Environment.create(load_task(str(TASK / "model.py")), runs_dir=root / "runs", eval_config=cfg) as env:
        run_dir = env.workspace.root.parent
        with TrajectoryWriter(run_dir / "trajectory.jsonl") as writer:
            assert run_agent(bridge, env, AgentConfig(), writer).stop_reason == "finished"
    return run_dir


def test_by_default_an_mcp_run_stays_out_and_the_flag_keeps_it_marked(mcp_run, tmp_path):
    assert export([mcp_run], "sft", tmp_path / "default.jsonl").skipped == {EXTERNAL: 1}
    assert not (tmp_path / "default.jsonl").exists()
    report = export([mcp_run], "sft", tmp_path / "sft.jsonl", include_external=True)
    assert report.written == 1 and report.external_turns == 3 and not report.skipped
    assert any("MCP client" in line and '"external": true' in line for line in report.lines())
    (row,) = rows(tmp_path / "sft.jsonl")
    turns = [m for m in row["messages"] if m["role"] == "assistant"]
    assert [
        (m["tool_calls"][0]["function"]["name"], json.loads(m["tool_calls"][0]["function"]["arguments"])) for m in turns
    ] == CALLS  # the client's calls, as it made them
    assert all(m["external"] is True and m["content"] is None and "weight" not in m for m in turns)
    assert not any("external" in m for m in row["messages"] if m["role"] != "assistant")
    meta = row["metadata"]
    assert meta["model"] == CLIENT and meta["external_clients"] == [CLIENT] and meta["external_steps"] == [1, 2, 3]
    # rft too (its reward bar is the user's: this run found no correct version)
    assert export([mcp_run], "rft", tmp_path / "rft.jsonl", include_external=True, min_reward=-1).written == 1


def test_the_cli_flag(mcp_run, tmp_path):
    from cuda_agent.cli import app

    out = tmp_path / "sft.jsonl"
    r = CliRunner().invoke(app, ["export", str(mcp_run), "--format", "sft", "--out", str(out)])
    assert r.exit_code == 3 and "--include-external keeps them" in r.stderr, r.output
    r = CliRunner().invoke(app, ["export", str(mcp_run), "--format", "sft", "--out", str(out), "--include-external"])
    assert r.exit_code == 0 and "3 assistant turn(s) an MCP client made" in r.stderr, r.output
    assert rows(out)[0]["metadata"]["external_steps"] == [1, 2, 3]


def test_a_model_run_an_mcp_client_resumed_marks_only_the_clients_turns(tmp_path):
    _, run_dir = make_run(tmp_path, native_script(), trim=False)
    path = run_dir / "trajectory.jsonl"
    lines = path.read_text().splitlines()
    turns = [k for k, x in enumerate(lines) if json.loads(x)["type"] == "model_turn"]
    cut = turns[-2]  # the last two turns come after a resume by an MCP client
    resume = {"type": "resume", "step": json.loads(lines[cut])["step"] - 1, "model": "mcp:codex/0.9"}
    path.write_text("\n".join([*lines[:cut], json.dumps(resume), *lines[cut:]]) + "\n")
    assert export([run_dir], "sft", tmp_path / "default.jsonl").skipped == {EXTERNAL: 1}
    export([run_dir], "sft", tmp_path / "sft.jsonl", include_external=True)
    (row,) = rows(tmp_path / "sft.jsonl")
    marked = [bool(m.get("external")) for m in row["messages"] if m["role"] == "assistant"]
    assert marked == [False] * (len(marked) - 2) + [True, True]
    assert row["metadata"]["external_clients"] == ["mcp:codex/0.9"] and len(row["metadata"]["external_steps"]) == 2


@pytest.fixture(scope="module")
def tokenizer(request, tmp_path_factory):
    from smollm2 import smollm2_tokenizer

    return smollm2_tokenizer(request, tmp_path_factory)


@pytest.mark.parametrize("form", ["text", "native"])
def test_training_takes_the_clients_turns_as_their_calls_alone(mcp_run, tmp_path, tokenizer, form):
    pytest.importorskip("trl")
    import importlib.resources

    from cuda_agent.train.sft_tokens import IGNORE, build_dataset, label, training_template

    export([mcp_run], "sft", tmp_path / "sft.jsonl", include_external=True)
    (row,) = rows(tmp_path / "sft.jsonl")
    own = tokenizer.chat_template
    try:
        if form == "native":  # a template that shows tool calls: TRL's copy of Qwen2.5's
            qwen = importlib.resources.files("trl") / "chat_templates" / "qwen2_5.jinja"
            tokenizer.chat_template = qwen.read_text()
        template = training_template(tokenizer)
        conv = to_conversation(row, native=form == "native")
        assert conv.form == form and conv.external == 3 and conv.trained.count(True) == 3
        ids, labels = label(tokenizer, conv, template)
        _, report = build_dataset([row], tokenizer, max_length=len(ids) + 10)
    finally:
        tokenizer.chat_template = own
    assert report.used == 1 and report.external_turns == 3
    assert any("3 trained turn(s) an MCP client made" in line for line in report.lines())
    spans, cur = [], []
    for tid, lab in zip(ids, labels):
        if lab != IGNORE:
            cur.append(tid)
        elif cur:
            spans, cur = spans + [tokenizer.decode(cur)], []
    spans += [tokenizer.decode(cur)] if cur else []
    assert len(spans) == 3
    for span, (name, args) in zip(spans, CALLS):
        if form == "text":  # nothing but the action block and the end of the turn
            block = json.dumps({"tool": name, "arguments": args}, ensure_ascii=False)
            assert span == f"```action\n{block}\n```<|im_end|>\n"
        else:  # the call alone: no text before it
            call = json.dumps({"name": name, "arguments": args})
            assert span == f"<tool_call>\n{call}\n</tool_call><|im_end|>\n"  # Qwen2.5's rendering
