"""The text protocol: one fenced action per turn, read back into a ToolCall, or a FormatError
that tells the model the exact format."""

from __future__ import annotations

import json

import pytest

from cuda_agent.agent.errors import FormatError
from cuda_agent.agent.text_protocol import (
    FORMAT_HELP,
    parse_action,
    render_tool_result,
    to_text_messages,
    tools_addendum,
)

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "compile",
            "description": "Build the kernels.",
            "parameters": {"type": "object", "properties": {}},
        },
    },
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "description": "Write a file.",
            "parameters": {
                "type": "object",
                "required": ["path", "content"],
                "properties": {"path": {"type": "string"}, "content": {"type": "string"}},
            },
        },
    },
]


def test_one_action_becomes_one_call():
    text = 'I will build.\n```action\n{"tool": "compile", "arguments": {}}\n```\n'
    (call,) = parse_action(text, call_id="text-3")
    assert (call.id, call.name, json.loads(call.arguments)) == ("text-3", "compile", {})


def test_no_action_is_no_call():
    assert parse_action("Thinking out loud, no action yet. ```python\nx = 1\n```") == []
    assert parse_action("") == []


def test_missing_arguments_default_to_empty():
    (call,) = parse_action('```action\n{"tool": "compile"}\n```')
    assert json.loads(call.arguments) == {}


def test_kernel_source_with_fences_and_raw_newlines_survives():
    src = "// ```cuda inside a comment\n__global__ void k(float* x) { x[0] = 1; }\n"
    escaped = (
        "```action\n"
        + json.dumps({"tool": "write_file", "arguments": {"path": "kernels/k.cu", "content": src}})
        + "\n```"
    )
    (call,) = parse_action(escaped)
    assert json.loads(call.arguments)["content"] == src
    # Models often write raw newlines inside JSON strings; accept them rather than bounce the turn.
    raw = '```action\n{"tool": "write_file", "arguments": {"path": "a.cu", "content": "line1\nline2"}}\n```'
    assert json.loads(parse_action(raw)[0].arguments)["content"] == "line1\nline2"


@pytest.mark.parametrize(
    "text, says",
    [
        ('```action\n{"tool": "compile"}\n```\nand\n```action\n{"tool": "compile"}\n```', "exactly one"),
        ('```action\n{"tool": "compile", }\n```', "not valid JSON"),
        ('```action\n{"arguments": {}}\n```', '"tool" field'),
        ('```action\n["compile"]\n```', '"tool" field'),
        ('```action\n{"tool": "compile", "arguments": [1]}\n```', "must be a JSON object"),
        ('```action\n{"tool": "compile", "path": "a.cu"}\n```', 'inside "arguments"'),
        ('```action\n{"tool": "compile", "arguments": {}}\n', "not closed"),
    ],
)
def test_malformed_actions_say_the_format(text, says):
    with pytest.raises(FormatError) as e:
        parse_action(text)
    assert says in str(e.value) and FORMAT_HELP in str(e.value)
    assert e.value.response is None


def test_addendum_lists_every_tool_with_its_arguments():
    text = tools_addendum(TOOLS)
    assert "## compile\nBuild the kernels.\nNo arguments." in text
    assert "## write_file\nWrite a file.\nArguments:\n- path (string, required)\n- content (string, required)" in text
    assert FORMAT_HELP in text and "```action" in text


def test_addendum_argument_lines_say_type_default_bounds_and_meaning():
    tool = {
        "name": "edit",
        "description": "Edit.",
        "parameters": {
            "type": "object",
            "required": ["mode"],
            "properties": {
                "mode": {"enum": ["replace", "create"], "type": "string"},
                "line": {"type": "integer", "default": 1, "minimum": 1, "description": "first line"},
                "text": {"type": "string", "default": ""},
            },
        },
    }
    text = tools_addendum([tool])
    assert (
        '- mode ("replace" | "create", required)\n- line (integer, default 1, >= 1): first line\n'
        "- text (string)\n" in text
    )


def test_native_history_is_rewritten_for_text_models():
    messages = [
        {"role": "system", "content": "You write kernels."},
        {"role": "user", "content": "Task."},
        {
            "role": "assistant",
            "content": '```action\n{"tool": "compile"}\n```',
            "tool_calls": [{"id": "text-1", "type": "function", "function": {"name": "compile", "arguments": "{}"}}],
        },
        {"role": "tool", "tool_call_id": "text-1", "content": "built in 1.2 s"},
        {"role": "user", "content": "Note: 10 steps left."},
    ]
    out = to_text_messages(messages, TOOLS)
    assert [m["role"] for m in out] == ["system", "user", "assistant", "user"]
    assert out[0]["content"].startswith("You write kernels.") and "## compile" in out[0]["content"]
    assert "tool_calls" not in out[2]
    assert out[3]["content"] == render_tool_result("compile", "built in 1.2 s") + "\n\nNote: 10 steps left."
    assert messages[2]["tool_calls"]  # the caller's history is left alone


def test_instructions_are_not_added_twice():
    system = "You write kernels.\n\n" + tools_addendum(TOOLS)
    out = to_text_messages([{"role": "system", "content": system}, {"role": "user", "content": "go"}], TOOLS)
    assert out[0]["content"] == system
    bare = to_text_messages([{"role": "user", "content": "go"}], TOOLS)
    assert bare[0]["role"] == "system" and FORMAT_HELP in bare[0]["content"]


def test_render_tool_result_names_the_tool():
    assert render_tool_result("verify", "PASS") == "Result of `verify`:\n\nPASS"
