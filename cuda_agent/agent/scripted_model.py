"""A model that answers from a script: the same responses in the same order every run. Tests drive
the real loop with it, and a scripted demonstration replays a session through the real tools
without any model key. It records what it was asked, so tests can check the prompts."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from cuda_agent.agent.errors import ModelError
from cuda_agent.agent.protocol import ModelResponse, ToolCall
from cuda_agent.agent.text_protocol import parse_action


class ScriptExhausted(ModelError):
    def __init__(self, used: int):
        super().__init__("unavailable", f"the scripted model ran out after {used} responses; add responses "
                                        "to the script or end it with a finish call")


def _tool_call(spec: dict | ToolCall, turn: int, index: int) -> ToolCall:
    if isinstance(spec, ToolCall):
        return spec
    if "name" not in spec:
        raise ValueError(f"scripted tool call {spec!r} needs a 'name'; write {{'name': ..., 'arguments': {{...}}}}")
    args = spec.get("arguments", {})
    return ToolCall(id=spec.get("id", f"call-{turn}-{index}"), name=spec["name"],
                    arguments=args if isinstance(args, str) else json.dumps(args))


def to_response(item: ModelResponse | dict | str, turn: int, name: str) -> ModelResponse:
    """One script entry as a ModelResponse: a str is the content; a dict gives ModelResponse
    fields, with tool_calls as {"name", "arguments" (dict or raw JSON str), "id"?}."""
    if isinstance(item, ModelResponse):
        return item
    if isinstance(item, str):
        return ModelResponse(content=item, cost=0.0, model=name)
    if not isinstance(item, dict):
        raise TypeError(f"script entry {turn} is a {type(item).__name__}; use a str, a dict or a ModelResponse")
    fields: dict[str, Any] = {"cost": 0.0, "model": name, **item}  # a script costs nothing unless it says so
    fields["tool_calls"] = [_tool_call(c, turn, i) for i, c in enumerate(item.get("tool_calls") or [])]
    return ModelResponse.model_validate(fields)


class ScriptedModel:
    def __init__(self, responses: list[ModelResponse | dict | str], name: str = "scripted",
                 context_tokens: int | None = None, native_tools: bool = True):
        self.name = name
        # native_tools=False plays a text-protocol model: actions are read from the content.
        self.native_tools = native_tools
        # Validate the whole script up front: a typo in entry 30 should fail before the run starts.
        self.responses = [to_response(r, i + 1, name) for i, r in enumerate(responses)]
        self.calls: list[dict] = []  # {"messages": [...], "tools": [...]} per query, deep-copied
        self._context_tokens = context_tokens

    @classmethod
    def from_json(cls, path: str | Path, name: str | None = None) -> ScriptedModel:
        """A script file: a JSON list of entries, or {"name": ..., "responses": [...]}."""
        data = json.loads(Path(path).read_text())
        script = data if isinstance(data, dict) else {"responses": data}
        return cls(script["responses"], name=name or script.get("name", "scripted"))

    def query(self, messages: list[dict], tools: list[dict]) -> ModelResponse:
        used = len(self.calls)
        if used >= len(self.responses):
            raise ScriptExhausted(used)
        self.calls.append({"messages": copy.deepcopy(messages), "tools": copy.deepcopy(tools)})
        response = self.responses[used].model_copy(deep=True)  # callers may mutate what they get
        response.raw = {**response.raw, "injected": True}  # a script wrote it, not a model: exports skip it
        if not self.native_tools and not response.tool_calls:
            response.tool_calls = parse_action(response.content, call_id=f"text-{used + 1}", response=response)
        return response

    def context_window(self) -> int | None:
        return self._context_tokens

    @property
    def remaining(self) -> int:
        return len(self.responses) - len(self.calls)
