"""What the loop needs from a model, and what a model answers: plain data, so a scripted model,
litellm and a recorded trajectory all look the same to the loop."""

from __future__ import annotations

from typing import Any, Protocol

from pydantic import BaseModel, Field


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


class Model(Protocol):
    """messages are OpenAI-style chat dicts; tools are OpenAI function definitions."""

    name: str

    def query(self, messages: list[dict], tools: list[dict]) -> ModelResponse: ...

    def context_window(self) -> int | None: ...


def assistant_message(content: str, calls: list) -> dict:
    """A turn as the history holds it; `calls` (ToolCall or CallRecord) are the calls as they ran,
    so every result answers its call."""
    wire = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}} for c in calls]
    message: dict = {"role": "assistant", "content": content or (None if wire else "")}
    if wire:
        message["tool_calls"] = wire
    return message
