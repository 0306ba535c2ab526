"""An sft/rft export (export.py) read back, and each run put in the chat form a model's template renders.

Two forms, because a chat template either shows tool calls or silently drops them (SmolLM2's, the
basic Llama 3 one): training on such a render would teach the model text without its actions.
- native: assistant `tool_calls` with `arguments` as a dict (what HF chat templates and TRL expect;
  the export keeps OpenAI's JSON string), `tools` passed to the template, tool results as `tool`.
- text: the agent's own text protocol for models without native tool calling (agent/text_protocol.py):
  the tools described in the system prompt, one ```action block per assistant turn, results as user
  messages. A text-protocol run stays in that form (the export's `metadata.protocol` is `text`; an
  older export without it is judged by its assistant turns holding action blocks).

A turn an MCP client made (`"external": true`, exported with --include-external) has no text: it is
trained as its tool calls alone (native: the call with empty content; text: the action block alone),
and counted apart in the training report.

Only assistant turns the model wrote are trained. A turn with `"weight": 0` (a person edited it, a
script wrote it, or it belongs to an earlier stretch of a trimmed run, trained in that stretch's
record) is context only, and so is a turn the text form cannot show as the model wrote it (several
calls in one turn, arguments that are not JSON).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from os.path import commonprefix
from pathlib import Path
from typing import Any

from cuda_agent.agent.errors import FormatError
from cuda_agent.agent.prompts import system_message
from cuda_agent.agent.text_protocol import parse_action, to_text_messages

WEIGHT_ZERO = "weight 0 (a person edited it, a script wrote it, or another record of the run trains it)"
SEVERAL_CALLS = "several tool calls in one turn (the text protocol takes one)"
BAD_ARGUMENTS = "tool-call arguments that are not a JSON object"


class BadExport(ValueError):
    """The file is not an sft/rft export, or holds nothing to train on."""


@dataclass
class Conversation:
    """One run, ready for a chat template: messages, the tools to pass it (None in the text form),
    and per message whether its tokens are trained."""

    run: str
    messages: list[dict]
    tools: list[dict] | None
    trained: list[bool]
    form: str  # "native" or "text"
    untrained: Counter = field(default_factory=Counter)  # reason -> assistant turns not trained
    external: int = 0  # trained turns an MCP client made (tool calls, no text)


def read_export(path: Path) -> list[dict]:
    """The export's rows; BadExport when a line is not one, or no row has a turn the model wrote."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (make one with `cuda-agent export RUNS --format sft`)")
    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError:
                raise BadExport(
                    f"{path}:{n}: not JSON; expected an sft/rft export (cuda-agent export --format sft)"
                ) from None
            if not _is_row(row):
                raise BadExport(f"{path}:{n}: not an sft/rft export line (needs `messages` with roles and `tools`)")
            rows.append(row)
    if not rows:
        raise BadExport(f"{path}: no records")
    if not any(model_turns(r) for r in rows):
        raise BadExport(
            f"{path}: nothing to train on: every assistant turn has weight 0 (a person or a script wrote it)"
        )
    return rows


def _is_row(row: Any) -> bool:
    return (
        isinstance(row, dict)
        and isinstance(row.get("messages"), list)
        and isinstance(row.get("tools"), list)
        and all(isinstance(m, dict) and isinstance(m.get("role"), str) for m in row["messages"])
    )


def model_turns(row: dict) -> int:
    """Assistant turns the model wrote (OpenAI's convention: weight 0 means do not train on it)."""
    return sum(1 for m in row["messages"] if m["role"] == "assistant" and m.get("weight") != 0)


def is_text_protocol_run(row: dict) -> bool:
    """The run's protocol as its export recorded it; else (older exports) whether a turn holds an action block."""
    protocol = (row.get("metadata") or {}).get("protocol")
    if protocol in ("text", "native"):
        return protocol == "text"
    return any(_has_action(m.get("content")) for m in row["messages"] if m["role"] == "assistant")


def _has_action(content: str | None) -> bool:
    try:
        return bool(parse_action(content or ""))
    except FormatError:
        return True  # a broken action block is still the text protocol


def to_conversation(row: dict, *, native: bool) -> Conversation:
    """The row in the native form (native=True and the run used native calls) or the text form."""
    run = str(row.get("metadata", {}).get("run", "?"))
    if native and not is_text_protocol_run(row):
        return _native(row, run)
    return _text(row, run)


def _arguments(raw: Any) -> dict | None:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _native(row: dict, run: str) -> Conversation:
    conv = Conversation(run=run, messages=[], tools=row["tools"] or None, trained=[], form="native")
    names: dict[str, str] = {}
    for m in row["messages"]:
        msg: dict[str, Any] = {"role": m["role"], "content": m.get("content") or ""}
        trained = m["role"] == "assistant" and m.get("weight") != 0
        if m.get("tool_calls"):
            msg["tool_calls"] = []
            for c in m["tool_calls"]:
                fn = c.get("function", {})
                args = _arguments(fn.get("arguments"))
                if args is None:  # kept as written for the context, never taught
                    trained = _untrained(conv, BAD_ARGUMENTS) if trained else False
                names[c.get("id", "")] = fn.get("name", "")
                msg["tool_calls"].append(
                    {
                        "id": c.get("id", ""),
                        "type": "function",
                        "function": {
                            "name": fn.get("name", ""),
                            "arguments": args if args is not None else fn.get("arguments"),
                        },
                    }
                )
        if m["role"] == "tool":
            msg["tool_call_id"] = m.get("tool_call_id", "")
            msg["name"] = names.get(msg["tool_call_id"], "tool")
        if m["role"] == "assistant" and m.get("weight") == 0:
            conv.untrained[WEIGHT_ZERO] += 1
        conv.external += bool(trained and m.get("external"))
        conv.messages.append(msg)
        conv.trained.append(trained)
    return conv


def _untrained(conv: Conversation, reason: str) -> bool:
    conv.untrained[reason] += 1
    return False


def _text(row: dict, run: str) -> Conversation:
    conv = Conversation(run=run, messages=[], tools=None, trained=[], form="text")
    native_run = not is_text_protocol_run(row)
    assistants: list[dict] = []
    trained_turns: list[bool] = []
    for m in row["messages"]:
        if m["role"] != "assistant":
            assistants.append(m)
            continue
        content, trained = m.get("content") or "", m.get("weight") != 0
        if not trained:
            conv.untrained[WEIGHT_ZERO] += 1
        calls = m.get("tool_calls") or []
        if native_run and calls:
            if len(calls) > 1:
                trained = _untrained(conv, SEVERAL_CALLS) if trained else False
            fn = calls[0].get("function", {})
            args = _arguments(fn.get("arguments"))
            if args is None:
                trained = _untrained(conv, BAD_ARGUMENTS) if trained else False
                args = {}
            block = json.dumps({"tool": fn.get("name", ""), "arguments": args}, ensure_ascii=False)
            content = (content.rstrip() + "\n\n" if content.strip() else "") + f"```action\n{block}\n```"
        assistants.append({**m, "content": content})
        trained_turns.append(trained)
        conv.external += bool(trained and m.get("external"))
    conv.messages = to_text_messages(assistants, row["tools"])
    if native_run and conv.messages and conv.messages[0]["role"] == "system":
        conv.messages[0] = {"role": "system", "content": _text_protocol_system(conv.messages[0]["content"])}
    turns = iter(trained_turns)  # to_text_messages keeps every assistant turn, in order
    conv.trained = [next(turns) if msg["role"] == "assistant" else False for msg in conv.messages]
    return conv


def _text_protocol_system(content: str) -> str:
    """A native run's system prompt tells the model to call functions; the agent's text-protocol
    prompt says to write action blocks instead. Swap that sentence (found by rendering both)."""
    native, text = system_message(native_tools=True, skill=""), system_message(native_tools=False, skill="")
    start = len(commonprefix([native, text]))
    end = len(commonprefix([native[::-1], text[::-1]]))
    said, instead = native[start : len(native) - end], text[start : len(text) - end]
    return content.replace(said, instead, 1) if said and said in content else content
