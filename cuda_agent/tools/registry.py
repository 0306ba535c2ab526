"""Which tools a run offers, their schemas, and calling one by name. Tools are found by module
path, so adding a tool is adding its module: every `Tool` subclass a listed module defines is
offered, in the order it is defined there."""

from __future__ import annotations

import importlib
import json
from typing import Any

from cuda_agent.tools.settings import ToolSettings

from .base import Tool, ToolContext, ToolResult, bound

# in the order the model sees them
TOOL_MODULES = (
    "cuda_agent.tools.files",
    "cuda_agent.tools.harness_tools",  # compile, verify, benchmark
    "cuda_agent.tools.profile_tool",  # profile (ncu)
    "cuda_agent.tools.sanitize_tool",  # sanitize (compute-sanitizer)
    "cuda_agent.tools.shell",
    "cuda_agent.tools.finish",
)
OPT_IN = {"shell": "allow_shell"}  # tool name -> the ToolSettings flag that must be true to offer it


def default_tools(settings: ToolSettings) -> list[Tool]:
    tools: list[Tool] = []
    for path in TOOL_MODULES:
        for obj in vars(importlib.import_module(path)).values():
            # a tool is a class that names itself there; shared outlines (no name of their own) are not
            if isinstance(obj, type) and issubclass(obj, Tool) and obj.__module__ == path and "name" in vars(obj):
                if obj.name not in OPT_IN or getattr(settings, OPT_IN[obj.name]):
                    tools.append(obj())
    names = [t.name for t in tools]
    if len(set(names)) != len(names):
        raise RuntimeError(f"two tools share a name in {names}; rename one")
    return tools


def schemas(tools: list[Tool]) -> list[dict]:
    return [t.schema() for t in tools]


def dispatch(tools: list[Tool], name: str, raw_args: Any, ctx: ToolContext) -> ToolResult:
    """Call the tool `name` with the model's arguments (a dict or its JSON text). Never raises:
    an unknown tool, unreadable arguments or a crash inside a tool are error observations."""
    by_name = {t.name: t for t in tools}
    redact = getattr(ctx, "redact", None)
    if name not in by_name:
        return _error(f"there is no tool named {name!r}; the tools are: {', '.join(by_name)}", redact)
    if isinstance(raw_args, str):
        try:
            raw_args = json.loads(raw_args) if raw_args.strip() else {}
        except json.JSONDecodeError as e:
            return _error(
                f"{name}: arguments are not valid JSON ({e.msg} at character {e.pos}); send a JSON object", redact
            )
    if raw_args is not None and not isinstance(raw_args, dict):
        return _error(f"{name}: arguments must be a JSON object, got {type(raw_args).__name__}", redact)
    try:
        return by_name[name].run(raw_args, ctx)
    except Exception as e:  # a bug in a tool must not end the run; the record keeps the cause
        return _error(f"{name} failed inside the tool: {type(e).__name__}: {e}", redact, internal=True)


def _error(text: str, redact=None, internal: bool = False) -> ToolResult:
    text = redact(text) if redact is not None else text
    return ToolResult(observation=bound(text), status="error", data={"internal_error": True} if internal else {})
