"""The real loop driving a real Environment on CPU (host-only kernels, real nvcc and workers),
with a ScriptedModel standing in for the LLM."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pydantic import BaseModel

from cuda_agent.agent.errors import ModelError
from cuda_agent.agent.loop import AgentConfig, Decision, run_agent
from cuda_agent.agent.scripted_model import ScriptedModel
from cuda_agent.agent.text_protocol import FORMAT_HELP
from cuda_agent.environment import Environment
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.eval.timing import TimingConfig
from cuda_agent.task import load_task
from cuda_agent.trajectory import TrajectoryWriter, read_trajectory

TASK = Path(__file__).parent.parent / "harness" / "cpu_task"
KERNEL = (TASK / "honest" / "kernels" / "scale_add.cu").read_text()
MODEL_NEW = (TASK / "honest" / "model_new.py").read_text()


@pytest.fixture
def env(tmp_path):
    cfg = EvalConfig(
        device="cpu",
        n_sets=2,
        baselines=["eager"],
        timeout_s=60,
        timing=TimingConfig(warmup_ms=5, min_batches=2, max_batches=3, budget_ms=30),
        cache_dir=tmp_path / "cache",
    )
    with Environment.create(load_task(str(TASK / "model.py")), runs_dir=tmp_path / "runs", eval_config=cfg) as e:
        yield e


def call(name: str, **arguments) -> dict:
    return {"name": name, "arguments": arguments}


def turn(*calls: dict, content: str = "", **fields) -> dict:
    return {"content": content, "tool_calls": list(calls), **fields}


WRITE_HONEST = turn(
    call("edit_file", mode="create", path="kernels/scale_add.cu", file_text=KERNEL),
    call("edit_file", mode="create", path="model_new.py", overwrite=True, file_text=MODEL_NEW),
    content="A host loop: one pass over x and y.",
)
FINISH = turn(call("finish", summary="fused scale-add"))
LIST = turn(call("list_files"))


def run(env, tmp_path, script, native_tools=True, **kw):
    config = AgentConfig(**{k: kw.pop(k) for k in list(kw) if k in AgentConfig.model_fields})
    model = kw.pop("model", None) or ScriptedModel(script, native_tools=native_tools)
    path = tmp_path / f"t{len(list(tmp_path.glob('t*.jsonl')))}.jsonl"  # one file per run
    with TrajectoryWriter(path) as writer:
        result = run_agent(model, env, config, writer, **kw)
    return model, result, read_trajectory(path)


def of(records, kind):
    return [r for r in records if r.type == kind]


def test_scripted_session_finishes_with_a_verified_version_and_a_whole_trajectory(env, tmp_path):
    script = [WRITE_HONEST, turn(call("compile")), turn(call("benchmark")), FINISH]
    model, result, records = run(env, tmp_path, script, target_speedup=1000.0, target_baseline="eager")
    assert result.stop_reason == "finished" and result.steps == 5  # a step per tool call: two edits in turn 1
    assert result.best is not None and result.best.correct and result.best.reward >= 1
    assert [r.type for r in records[:3]] == ["header", "model_turn", "tool_result"]
    header, closing = records[0], records[-1]
    assert header.task.class_name == "Model" and header.model == "scripted" and "torch" in header.versions
    assert header.config["agent"]["max_steps"] == 50 and header.config["eval"]["device"] == "cpu"
    assert [t["function"]["name"] for t in header.tools] == [t["function"]["name"] for t in model.calls[0]["tools"]]
    evaluation = of(records, "evaluation")[-1]
    assert (evaluation.reward, evaluation.commit, evaluation.status) == (result.best.reward, result.best.sha, "correct")
    assert evaluation.speedup_eager is not None and evaluation.time_ms > 0
    assert (closing.type, closing.stop_reason, closing.best_version) == ("closing", "finished", result.best.version)
    # the model saw SKILL.md and the task, and each observation as it was recorded
    first = model.calls[0]["messages"]
    assert "SKILL" in first[0]["content"] and "function calls" in first[0]["content"]
    assert "return self.alpha * x + y" in first[1]["content"] and "shape [32768], dtype float32" in first[1]["content"]
    results = of(records, "tool_result")
    assert [r.name for r in results] == ["edit_file", "edit_file", "compile", "benchmark", "finish"]
    seen = [m for m in model.calls[3]["messages"] if m["role"] == "tool"]
    assert [m["content"] for m in seen] == [r.observation for r in results[:4]]
    assert [m["tool_call_id"] for m in seen] == [
        c["id"] for m in model.calls[3]["messages"] if m["role"] == "assistant" for c in m["tool_calls"]
    ]


def test_target_speedup_stops_the_run_when_the_best_version_reaches_it(env, tmp_path):
    model, result, records = run(
        env, tmp_path, [WRITE_HONEST, turn(call("benchmark")), FINISH], target_speedup=0.01, target_baseline="eager"
    )
    assert result.stop_reason == "target_reached" and model.remaining == 1
    assert of(records, "closing")[0].best_reward == result.best.reward >= 1


def test_max_steps_stops_before_the_next_query(env, tmp_path):
    model, result, records = run(env, tmp_path, [LIST, LIST, LIST, FINISH], max_steps=2)
    assert result.stop_reason == "max_steps" and result.steps == 2 and len(model.calls) == 2
    assert len(of(records, "model_turn")) == 2 and records[-1].stop_reason == "max_steps"


def test_cost_and_token_limits_and_unpriced_turns(env, tmp_path):
    priced = dict(cost=0.6, usage={"prompt_tokens": 100, "completion_tokens": 20})
    _, result, _ = run(env, tmp_path, [turn(call("list_files"), **priced)] * 4, max_cost=1.0)
    assert (result.stop_reason, result.steps, result.cost, result.tokens) == ("max_cost", 2, pytest.approx(1.2), 240)
    unpriced = dict(cost=None, usage={"prompt_tokens": 100, "completion_tokens": 20})
    _, result, records = run(
        env,
        tmp_path,
        [turn(call("list_files"), **unpriced), turn(call("list_files"), **priced), turn(call("list_files"), **unpriced)]
        * 2,
        max_tokens=300,
    )
    assert (result.stop_reason, result.steps, result.cost, result.unpriced_turns) == ("max_tokens", 3, 0.6, 2)
    assert records[-1].cost == 0.6 and records[-1].unpriced_turns == 2
    _, result, _ = run(env, tmp_path, [turn(call("list_files"), **unpriced), FINISH | {"cost": None}])
    assert result.cost is None and result.unpriced_turns == 2  # no price at all: unknown, not $0


def test_wall_time_limit(env, tmp_path):
    model, result, _ = run(env, tmp_path, [LIST], max_wall_s=0)
    assert result.stop_reason == "max_wall_time" and model.calls == []


def test_text_protocol_model(env, tmp_path):
    def action(tool, **arguments):
        return f"Next step.\n```action\n{json.dumps({'tool': tool, 'arguments': arguments})}\n```"

    script = [
        action("list_files"),
        "I think I am done.",
        action("view_file", path="model.py"),
        action("finish", summary="looked around"),
    ]
    model, result, records = run(env, tmp_path, script, native_tools=False)
    assert result.stop_reason == "finished"
    assert "action block" in model.calls[0]["messages"][0]["content"]
    assert model.calls[2]["messages"][-1] == {"role": "user", "content": f"Your reply had no action. {FORMAT_HELP}"}
    assert "class Model" in model.calls[3]["messages"][-1]["content"]
    assert [r.name for r in of(records, "tool_result")] == ["list_files", "view_file", "finish"]
    assert len(of(records, "format_error")) == 1


def test_three_malformed_turns_in_a_row_end_the_run(env, tmp_path):
    script = [
        turn(call("no_such_tool")),
        turn({"name": "view_file", "arguments": "{not json"}),
        turn(call("view_file", start_line=3)),
        FINISH,
    ]
    model, result, records = run(env, tmp_path, script)
    assert result.stop_reason == "format_errors" and model.remaining == 1
    shown = [model.calls[i]["messages"][-1]["content"] for i in (1, 2)]
    assert shown[0].startswith("Format error:") and "no tool named 'no_such_tool'" in shown[0]
    assert shown[1].startswith("Format error:") and "not valid JSON" in shown[1]
    assert all(r.format_error and r.status == "error" for r in of(records, "tool_result"))
    assert records[-1].stop_reason == "format_errors"


def test_a_good_call_resets_the_format_error_count(env, tmp_path):
    # a turn without a tool call counts as a format error too, and is told so
    script = [turn(content="thinking"), turn(call("nope")), LIST, turn(call("nope")), turn(), FINISH]
    model, result, records = run(env, tmp_path, script)
    assert result.stop_reason == "finished"
    assert "called no tool" in model.calls[1]["messages"][-1]["content"]
    assert [r.type for r in records].count("format_error") == 2


def test_approval_hook_rejects_and_edits(env, tmp_path):
    asked = []

    def approval(c):
        asked.append(c.name)
        if c.name == "list_files":
            return Decision(approve=False, reason="look at SKILL.md first")
        if c.name == "view_file":
            return Decision(edited_arguments=json.dumps({"path": "SKILL.md"}))
        return Decision()

    script = [LIST, turn(call("view_file", path="model.py")), FINISH]
    model, result, records = run(env, tmp_path, script, approval=approval)
    assert result.stop_reason == "finished" and asked == ["list_files", "view_file", "finish"]
    assert model.calls[1]["messages"][-1]["content"] == "A person rejected this call: look at SKILL.md first"
    rejected, viewed = of(records, "tool_result")[:2]
    assert rejected.status == "rejected"
    assert "# SKILL" in viewed.observation  # the edited arguments ran
    turns = of(records, "model_turn")
    assert [t.edited_by_person for t in turns] == [False, True, False]
    edited = turns[1].tool_calls[0]
    assert json.loads(edited.arguments) == {"path": "SKILL.md"}
    assert json.loads(edited.original_arguments) == {"path": "model.py"}


def test_injected_messages_are_recorded_and_seen(env, tmp_path):
    pending = [["use float4 loads"], []]
    model, result, records = run(env, tmp_path, [LIST, FINISH], inbox=lambda: pending.pop(0) if pending else [])
    assert model.calls[0]["messages"][-1] == {"role": "user", "content": "use float4 loads"}
    assert [(r.content, r.injected) for r in of(records, "user_message")] == [("use float4 loads", True)]


class Failing(ScriptedModel):
    """A model whose every query raises `exc` (the rest of the Model protocol: ScriptedModel's)."""

    def __init__(self, exc):
        super().__init__([], name="failing")
        self.exc = exc

    def query(self, messages, tools):
        raise self.exc


def test_model_error_ends_the_run_cleanly(env, tmp_path):
    model = Failing(ModelError("auth", "the provider rejected the API key: check OPENAI_API_KEY"))
    _, result, records = run(env, tmp_path, [], model=model)
    assert result.stop_reason == "model_error:auth" and result.best is None
    assert records[-1].stop_reason == "model_error:auth" and "OPENAI_API_KEY" in records[-1].error


def test_interrupt_writes_the_closing_record(env, tmp_path):
    _, result, records = run(env, tmp_path, [], model=Failing(KeyboardInterrupt()))
    assert result.stop_reason == "interrupted" and [r.type for r in records] == ["header", "closing"]


def test_a_torn_last_line_is_tolerated(env, tmp_path):
    run(env, tmp_path, [LIST, FINISH])
    path = tmp_path / "t0.jsonl"
    whole = read_trajectory(path)
    with open(path, "a") as f:
        f.write('{"type": "model_turn", "step": 3, "content": "half a rec')
    assert [r.type for r in read_trajectory(path)] == [r.type for r in whole]


def test_no_record_holds_an_api_key(env, tmp_path, monkeypatch):
    key, other = "sk-proj-LOOPTESTKEY0123456789abcdef", "sk-ant-ANOTHERKEY0123456789xyz"
    monkeypatch.setenv("OPENAI_API_KEY", key)

    class Settings(BaseModel):
        model: str = "gpt-x"
        api_key: str = other
        api_base: str = "http://localhost:8000/v1"
        max_tokens: int = 512

    model = ScriptedModel(
        [
            turn(
                call("edit_file", mode="create", path="notes.txt", file_text=f"key={key}\n"),
                content=f"my key is {other}",
            ),
            turn(call("view_file", path="notes.txt")),
            FINISH,
        ],
        settings=Settings().model_dump(),
    )
    _, result, records = run(env, tmp_path, [], model=model)
    text = (tmp_path / "t0.jsonl").read_text()
    assert result.stop_reason == "finished" and key not in text and other not in text
    assert "[redacted:OPENAI_API_KEY]" in of(records, "tool_result")[1].observation  # view_file echoed the key
    assert records[0].config["model"] == {"model": "gpt-x", "api_base": "http://localhost:8000/v1", "max_tokens": 512}


GH_PAT = "ghp_" + "Lo0pTe5t" * 4 + "abcd"
LEAKS = {"OPENAI_API_KEY": "sk-test-123", "GH_PAT": GH_PAT, "DATABASE_URL": "postgres://admin:pw@db/x"}


def test_environment_secrets_in_observations_reach_neither_the_model_nor_the_trajectory(env, tmp_path, monkeypatch):
    """Tool output that printed the environment (a file the tools read, a failing candidate's error in
    verify's observation): every credential is redacted by value before the model or the file sees it,
    the short key and the configured one included."""
    for name, value in LEAKS.items():
        monkeypatch.setenv(name, value)
    configured = "cfg-only-key-77"  # known only to the model's settings, in no variable
    printed = "".join(f"{k}={v}\n" for k, v in LEAKS.items()) + f"api_key: {configured}\n"
    (env.workspace.root / "env.txt").write_text(printed + "PATH=/usr/bin\n")
    # a candidate whose import fails with the environment in its message: verify shows the error
    (env.workspace.root / "model_new.py").write_text(f"raise RuntimeError({printed!r})\n")

    class Settings(BaseModel):
        model: str = "gpt-x"
        api_key: str = configured

    model = ScriptedModel(
        [turn(call("view_file", path="env.txt")), turn(call("verify")), FINISH], settings=Settings().model_dump()
    )
    _, result, records = run(env, tmp_path, [], model=model)
    assert result.stop_reason == "finished"
    seen = json.dumps([c["messages"] for c in model.calls])
    written = (tmp_path / "t0.jsonl").read_text()
    for secret in [*LEAKS.values(), configured, "admin:pw@"]:
        assert secret not in seen and secret not in written, secret
    view, verify = of(records, "tool_result")[:2]
    assert "OPENAI_API_KEY=[redacted:OPENAI_API_KEY]" in view.observation
    assert "GH_PAT=[redacted:GH_PAT]" in view.observation and "DATABASE_URL=[redacted:DATABASE_URL]" in view.observation
    assert "api_key: [redacted:api_key]" in view.observation and "PATH=/usr/bin" in view.observation
    assert verify.name == "verify" and "RuntimeError" in verify.observation
    assert "[redacted:GH_PAT]" in verify.observation
    # what the model was shown is what was recorded
    shown = [m["content"] for m in model.calls[1]["messages"] if m["role"] == "tool"]
    assert shown == [view.observation]
