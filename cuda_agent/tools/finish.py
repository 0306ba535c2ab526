"""The finish tool: the model says it is done. The loop stops when a result carries `finished`."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from .base import Tool, ToolContext, ToolResult


class Finish(Tool):
    name = "finish"
    description = ("End the run. Call it when the kernel is verified and as fast as you can make it, "
                   "or when you cannot go further; the best verified version found so far is the result.")

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        summary: str = Field(min_length=1, description="a few sentences: what you built, how it performs, "
                                                       "what you would try next")

    def execute(self, a: Args, ctx: ToolContext) -> ToolResult:
        return ToolResult(observation=f"finished: {a.summary}", data={"finished": True, "summary": a.summary})
