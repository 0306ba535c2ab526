"""When a run stops: the limits the loop checks before every turn and every tool call (a settings
section of its own, so the settings module need not import the loop). How steps count: loop.py."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt limit in a config file is an error, not ignored

    max_steps: int = Field(50, ge=1)  # tool calls that run (a turn that runs none: one); none starts past it
    max_cost: float | None = None  # dollars, over the priced turns (unpriced ones count as 0)
    max_tokens: int | None = None  # prompt + completion tokens summed over turns (what is billed)
    max_wall_s: float | None = None  # a deadline: no model request lasts past it, no tool starts past it
    max_calls_per_turn: int = Field(8, ge=1)  # calls of one reply beyond these are answered "skipped"
    target_speedup: float | None = None  # stop once the best correct version is this much faster...
    target_baseline: Literal["compile", "eager"] = "compile"  # ...than this baseline
    max_format_errors: int = Field(3, ge=1)  # turns in a row with no usable tool call
