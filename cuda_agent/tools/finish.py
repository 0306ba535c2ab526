"""The finish tool: the model says it is done. The loop stops when a result carries `finished`."""

from __future__ import annotations

from pydantic import Field

from .base import StrictArgs, Tool, ToolContext, ToolResult


class Finish(Tool):
    name = "finish"
    description = "End the run; the best verified version is its result."

    class Args(StrictArgs):
        summary: str = Field(min_length=1, description="what you built, how fast, what you would try next")

    def execute(self, a: Args, ctx: ToolContext) -> ToolResult:
        return ToolResult(observation=f"finished: {a.summary}", data={"finished": True, "summary": a.summary})
