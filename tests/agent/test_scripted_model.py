"""ScriptedModel: the same answers in the same order, what it was asked recorded, and a clear end."""

from __future__ import annotations

import json

import pytest

from cuda_agent.agent.errors import FormatError, ModelError
from cuda_agent.agent.protocol import ModelResponse, ToolCall, Usage
from cuda_agent.agent.scripted_model import ScriptedModel, ScriptExhausted

MESSAGES = [{"role": "user", "content": "Make it fast."}]
TOOLS = [{"type": "function", "function": {"name": "compile", "parameters": {"type": "object"}}}]


def test_entries_of_each_kind_in_order():
    given = ModelResponse(content="given", usage=Usage(prompt_tokens=5), cost=0.25)
    model = ScriptedModel(
        [
            "just text",
            {
                "content": "building",
                "tool_calls": [
                    {"name": "compile", "arguments": {"verbose": True}},
                    {"name": "verify", "arguments": '{"sets": 3}', "id": "mine"},
                ],
                "usage": {"prompt_tokens": 10, "completion_tokens": 4},
            },
            given,
        ]
    )
    first = model.query(MESSAGES, TOOLS)
    assert (first.content, first.tool_calls, first.cost, first.model) == ("just text", [], 0.0, "scripted")
    second = model.query(MESSAGES, TOOLS)
    assert [(c.id, c.name, json.loads(c.arguments)) for c in second.tool_calls] == [
        ("call-2-0", "compile", {"verbose": True}),
        ("mine", "verify", {"sets": 3}),
    ]
    assert second.usage.completion_tokens == 4
    third = model.query(MESSAGES, TOOLS)
    assert third.raw == {"injected": True}  # marked as written by a script, not a model
    assert third.model_copy(update={"raw": {}}) == given
    assert model.remaining == 0


def test_runs_are_identical():
    script = [{"tool_calls": [{"name": "compile", "arguments": {}}]}, "done"]
    a, b = ScriptedModel(script), ScriptedModel(script)
    assert [a.query(MESSAGES, []) for _ in script] == [b.query(MESSAGES, []) for _ in script]


def test_records_what_it_was_asked_as_it_was_then():
    model = ScriptedModel(["one", "two"])
    history = list(MESSAGES)
    model.query(history, TOOLS)
    history.append({"role": "assistant", "content": "one"})
    model.query(history, TOOLS)
    assert [len(c["messages"]) for c in model.calls] == [1, 2]  # a copy, not the caller's live list
    assert model.calls[0]["tools"] == TOOLS


def test_answers_are_copies():
    model = ScriptedModel([{"tool_calls": [{"name": "compile", "arguments": {}}]}], name="demo")
    model.query(MESSAGES, []).tool_calls.append(ToolCall(id="x", name="y", arguments="{}"))
    assert len(model.responses[0].tool_calls) == 1 and model.responses[0].model == "demo"


def test_running_out_is_a_clear_model_error():
    model = ScriptedModel(["only"])
    model.query(MESSAGES, [])
    with pytest.raises(ScriptExhausted, match="ran out after 1 responses") as e:
        model.query(MESSAGES, [])
    assert isinstance(e.value, ModelError) and e.value.kind == "unavailable"


def test_bad_entries_fail_before_the_run():
    with pytest.raises(ValueError, match="needs a 'name'"):
        ScriptedModel(["fine", {"tool_calls": [{"arguments": {}}]}])
    with pytest.raises(TypeError, match="entry 2"):
        ScriptedModel(["fine", 42])


def test_text_protocol_mode_reads_actions_from_content():
    script = ['```action\n{"tool": "compile", "arguments": {}}\n```', "no action", "```action\n{oops}\n```"]
    model = ScriptedModel(script, native_tools=False)
    assert [(c.id, c.name) for c in model.query(MESSAGES, TOOLS).tool_calls] == [("text-1", "compile")]
    assert model.query(MESSAGES, TOOLS).tool_calls == []
    with pytest.raises(FormatError) as e:
        model.query(MESSAGES, TOOLS)
    assert e.value.response.content == "```action\n{oops}\n```"


def test_from_json_and_context_window(tmp_path):
    path = tmp_path / "session.json"
    path.write_text(json.dumps({"name": "demo-session", "responses": ["a", {"content": "b", "cost": 0.5}]}))
    model = ScriptedModel.from_json(path)
    assert model.name == "demo-session" and model.context_window() is None
    assert [model.query(MESSAGES, []).cost for _ in range(2)] == [0.0, 0.5]
    assert ScriptedModel([], context_tokens=4096).context_window() == 4096
