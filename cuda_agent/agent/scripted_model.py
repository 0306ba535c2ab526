"""A model that answers from a script: the same responses in the same order every run. Tests drive
the real loop with it, and a scripted demonstration replays a session through the real tools
without any model key. It records what it was asked, so tests can check the prompts."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from cuda_agent.agent.errors import ModelError
from cuda_agent.agent.protocol import ModelResponse, ToolCall
from cuda_agent.agent.text_protocol import parse_action

SHAPE = (
    'a script is a JSON list of responses, or an object {"responses": [...]} ("name" optional), each a string or '
    '{"content": "...", "tool_calls": [{"name": "...", "arguments": {...}}]} (examples/scale_add_small/'
    "demo_session.json is one)"
)


class ScriptError(ValueError):
    """A script file that cannot be replayed (missing, not JSON, not a script): one line, the file named."""


class ScriptExhausted(ModelError):
    def __init__(self, used: int):
        super().__init__(
            "unavailable",
            f"the scripted model ran out after {used} responses; add responses "
            "to the script or end it with a finish call",
        )


def _tool_call(spec: dict | ToolCall, turn: int, index: int) -> ToolCall:
    if isinstance(spec, ToolCall):
        return spec
    if "name" not in spec:
        raise ValueError(f"scripted tool call {spec!r} needs a 'name'; write {{'name': ..., 'arguments': {{...}}}}")
    args = spec.get("arguments", {})
    return ToolCall(
        id=spec.get("id", f"call-{turn}-{index}"),
        name=spec["name"],
        arguments=args if isinstance(args, str) else json.dumps(args),
    )


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
    """The Model protocol (agent/interfaces.py) answered from a script: no tokenizer of its own
    (count_tokens: None, the loop estimates), no key, nothing decided at run time; its window and
    reply limit only when given (a test playing a small model), `settings` only to play a client
    that was configured (what the header records of it)."""

    def __init__(
        self,
        responses: list[ModelResponse | dict | str],
        name: str = "scripted",
        context_tokens: int | None = None,
        native_tools: bool = True,
        max_tokens: int | None = None,
        settings: dict[str, Any] | None = None,
    ):
        self.name = name
        # native_tools=False plays a text-protocol model: actions are read from the content.
        self.native_tools = native_tools
        self.max_tokens = max_tokens
        self.deadline: float | None = None  # set by the loop; a script answers at once, so nothing waits on it
        # Validate the whole script up front: a typo in entry 30 should fail before the run starts.
        self.responses = [to_response(r, i + 1, name) for i, r in enumerate(responses)]
        self.calls: list[dict] = []  # {"messages": [...], "tools": [...]} per query, deep-copied
        self._context_tokens = context_tokens
        self._settings = dict(settings or {})

    @classmethod
    def from_json(cls, path: str | Path, name: str | None = None) -> ScriptedModel:
        """A script file: a JSON list of entries, or {"name": ..., "responses": [...]} (other keys, such
        as "about", are the author's notes). Raises ScriptError for a file that cannot be replayed."""
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except OSError as e:
            raise ScriptError(f"script {path}: {e.strerror or e}; give the JSON file of scripted responses") from None
        except ValueError as e:  # not UTF-8, not JSON
            raise ScriptError(f"script {path} is not JSON ({str(e).splitlines()[0]}); {SHAPE}") from None
        script = data if isinstance(data, dict) else {"responses": data}
        responses, title = script.get("responses"), name or script.get("name", "scripted")
        if not isinstance(responses, list) or not isinstance(title, str):
            raise ScriptError(f"script {path}: {SHAPE}")
        try:
            return cls(responses, name=title)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ScriptError(
                f"script {path}: entry {_failing_entry(responses, title)}: {where}: {err['msg']}; {SHAPE}"
            ) from None
        except TypeError as e:  # it names the entry
            raise ScriptError(f"script {path}: {e}") from None
        except ValueError as e:
            raise ScriptError(f"script {path}: entry {_failing_entry(responses, title)}: {e}") from None

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
    def window_source(self) -> str:
        return "model" if self._context_tokens else "unknown"

    def count_tokens(self, messages: list[dict]) -> int | None:
        return None  # no tokenizer: the loop's estimate (tests give a counter of their own here)

    def resolved(self) -> dict[str, Any]:
        return {}

    def client_config(self) -> dict[str, Any]:
        return dict(self._settings)

    def secret_values(self) -> list[tuple[str, str]]:
        return []

    def check_key(self) -> None:
        pass  # a script needs no key and no library

    @property
    def remaining(self) -> int:
        return len(self.responses) - len(self.calls)


def _failing_entry(responses: list, name: str) -> int:
    """The number (from 1) of the first entry that does not validate."""
    for turn, item in enumerate(responses, 1):
        try:
            to_response(item, turn, name)
        except (TypeError, ValueError):
            return turn
    return 0
