"""Tool calls for models without native tool calling: the tools are listed in the system prompt
and the model writes one fenced ```action block per turn; observations go back as user messages.
`to_text_messages` turns the loop's native-style history into this form, so the loop never needs
to know which protocol a model speaks."""

from __future__ import annotations

import json
import re

from cuda_agent.agent.errors import FormatError
from cuda_agent.agent.protocol import ModelResponse, ToolCall

FORMAT_HELP = (
    'Reply with your reasoning, then exactly one action block: a line "```action", one JSON object '
    '{"tool": "<tool name>", "arguments": {...}} (JSON strings escape newlines as \\n), and a line "```".'
)

# A JSON string cannot hold a raw newline followed by ``` once parsed strictly, so the first
# line that is exactly ``` closes the block even when the arguments contain kernel source.
_BLOCK = re.compile(r"^```action[ \t]*\n(.*?)\n?^```[ \t]*$", re.MULTILINE | re.DOTALL)
_OPENING = re.compile(r"^```action[ \t]*$", re.MULTILINE)


def _function(tool: dict) -> dict:
    return tool.get("function", tool)  # OpenAI definitions wrap the function; accept bare ones too


def _argument(name: str, schema: dict, required: bool) -> str:
    """`- path (string, required): what it is`, from one property of a JSON schema."""
    kind = " | ".join(json.dumps(v) for v in schema["enum"]) if "enum" in schema else schema.get("type", "any")
    facts = [str(kind)] + (["required"] if required else [])
    if "default" in schema and schema["default"] not in ("", None):
        facts.append(f"default {json.dumps(schema['default'])}")
    facts += [f">= {schema['minimum']}"] if "minimum" in schema else []
    line = f"- {name} ({', '.join(facts)})"
    return line + (f": {schema['description']}" if schema.get("description") else "")


def tools_addendum(tools: list[dict]) -> str:
    """The system-prompt section that replaces native tool definitions: each tool's description and
    its arguments, one line each (a JSON schema costs a small model's window several times as much)."""
    lines = ["# Tools", "", "You act by calling one tool per turn. The tools:", ""]
    for tool in tools:
        fn = _function(tool)
        params = fn.get("parameters") or {}
        required = set(params.get("required", []))
        args = [_argument(k, v, k in required) for k, v in (params.get("properties") or {}).items()]
        lines += [
            f"## {fn['name']}",
            fn.get("description", "").strip(),
            *(["Arguments:", *args] if args else ["No arguments."]),
            "",
        ]
    names = [_function(t)["name"] for t in tools]
    example = (
        '{"tool": "view_file", "arguments": {"path": "SKILL.md", "start_line": 1, "end_line": 40}}'
        if "view_file" in names
        else '{"tool": "' + (names[0] if names else "finish") + '", "arguments": {}}'
    )
    lines += [
        "# How to call a tool",
        "",
        FORMAT_HELP,
        "For example:",
        "",
        "```action",
        example,
        "```",
        "",
        "Write nothing after the action block; its result comes back in the next message.",
    ]
    return "\n".join(lines)


def parse_action(text: str, call_id: str = "text-1", response: ModelResponse | None = None) -> list[ToolCall]:
    """The action in a model's reply: [] when it wrote none, one ToolCall, or FormatError (carrying
    `response`, the reply it read, so the loop can still record the turn)."""
    blocks = _BLOCK.findall(text or "")
    if len(_OPENING.findall(text or "")) > len(blocks):
        raise FormatError(f"An ```action block was not closed. {FORMAT_HELP}", response)
    if not blocks:
        return []
    if len(blocks) > 1:
        raise FormatError(f"You wrote {len(blocks)} action blocks; write exactly one per turn. {FORMAT_HELP}", response)
    try:
        action = json.loads(blocks[0], strict=False)  # strict=False: tolerate raw newlines in strings
    except json.JSONDecodeError as e:
        raise FormatError(
            f"The action block is not valid JSON ({e.msg} at line {e.lineno} column {e.colno}). {FORMAT_HELP}", response
        ) from None
    if not isinstance(action, dict) or not isinstance(action.get("tool"), str) or not action["tool"]:
        raise FormatError(f'The action needs a "tool" field naming the tool. {FORMAT_HELP}', response)
    arguments = action.get("arguments", {})
    if not isinstance(arguments, dict):
        raise FormatError(f'"arguments" must be a JSON object. {FORMAT_HELP}', response)
    if extra := set(action) - {"tool", "arguments"}:
        raise FormatError(
            f'Unexpected fields {sorted(extra)} in the action; put tool arguments inside "arguments". {FORMAT_HELP}',
            response,
        )
    return [ToolCall(id=call_id, name=action["tool"], arguments=json.dumps(arguments))]


def render_tool_result(name: str, observation: str) -> str:
    """An observation as the user message that answers the model's action."""
    return f"Result of `{name}`:\n\n{observation}"


def _plain_user(msg: dict) -> bool:
    return msg["role"] == "user" and isinstance(msg.get("content"), str)


def to_text_messages(messages: list[dict], tools: list[dict]) -> list[dict]:
    """The loop's native-style history rewritten for a text-protocol model: tools described in the
    system prompt (unless it already has them), tool results as user messages, assistant
    tool_calls dropped (the action is already in the assistant's text), consecutive user messages
    merged (some providers insist on alternating roles)."""
    out: list[dict] = []
    call_names: dict[str, str] = {}
    for msg in messages:
        role = msg.get("role")
        if role == "assistant":
            for call in msg.get("tool_calls") or []:
                call_names[call.get("id", "")] = call.get("function", {}).get("name", "tool")
            out.append({"role": "assistant", "content": msg.get("content") or ""})
        elif role == "tool":
            name = msg.get("name") or call_names.get(msg.get("tool_call_id", ""), "tool")
            out.append({"role": "user", "content": render_tool_result(name, msg.get("content") or "")})
        else:
            out.append({k: v for k, v in msg.items() if k in ("role", "content")})
        if len(out) > 1 and _plain_user(out[-1]) and _plain_user(out[-2]):
            last = out.pop()
            out[-1] = {"role": "user", "content": out[-1]["content"] + "\n\n" + last["content"]}
    if out and out[0]["role"] == "system":
        if FORMAT_HELP not in str(out[0]["content"]):  # the loop may have put the instructions in already
            out[0] = {"role": "system", "content": f"{out[0]['content']}\n\n{tools_addendum(tools)}"}
    else:
        out.insert(0, {"role": "system", "content": tools_addendum(tools)})
    return out
