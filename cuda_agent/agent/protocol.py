"""What a model answers, as plain data, so a scripted model, litellm and a recorded trajectory all
look the same to the loop (what the loop needs from a model: interfaces.Model)."""

from __future__ import annotations

import json
from typing import Any, Callable

from pydantic import BaseModel, Field

from cuda_agent.records import valid_text


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: str  # raw JSON text as the model wrote it; the loop parses it (bad JSON -> FormatError)


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0


class ModelResponse(BaseModel):
    content: str = ""  # the model's text (its reasoning, or a text-protocol action)
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: Usage = Usage()
    cost: float | None = None  # dollars; None when the price is unknown
    latency_s: float = 0.0
    model: str = ""
    raw: dict[str, Any] = Field(default_factory=dict)  # provider fields worth keeping (finish_reason...)


def assistant_message(content: str, calls: list) -> dict:
    """A turn as the history holds it; `calls` (ToolCall or CallRecord) are the calls as they ran,
    so every result answers its call."""
    wire = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
    return {"role": "assistant", "content": content or (None if wire else ""), **({"tool_calls": wire} if wire else {})}


def valid_arguments(raw: str) -> str:
    """A call's raw JSON arguments with no lone surrogate, in the text or behind a `\\ud800` escape
    (what would reach a file, git or the next request as a character UTF-8 cannot carry): such
    arguments are written again with U+FFFD in its place; all others stay byte for byte."""
    raw = valid_text(raw)
    if "\\u" not in raw:
        return raw
    try:
        parsed = json.loads(raw)
    except ValueError:
        return raw  # malformed: the registry says so; a surrogate escape in it decodes to nothing
    cleaned = valid_text(parsed)
    return raw if cleaned == parsed else json.dumps(cleaned, ensure_ascii=False)


def valid_response(r: ModelResponse) -> ModelResponse:
    """A model's answer as it enters the run: text UTF-8 can carry (see valid_arguments)."""
    calls = [
        c.model_copy(
            update={"id": valid_text(c.id), "name": valid_text(c.name), "arguments": valid_arguments(c.arguments)}
        )
        for c in r.tool_calls
    ]
    return r.model_copy(update={"content": valid_text(r.content), "tool_calls": calls})


class Decision(BaseModel):
    """A person's answer to one tool call (the --confirm prompt, the TUI)."""

    approve: bool = True
    reason: str = ""
    edited_arguments: str | None = None  # raw JSON to run instead of the model's


Approval = Callable[[ToolCall], Decision]
