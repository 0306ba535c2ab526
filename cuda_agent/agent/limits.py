"""When a run stops: the limits the loop checks before every turn and every tool call, and the
target it checks after each evaluation (a settings section of its own, so the settings module need
not import the loop). How steps count: loop.py."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

from cuda_agent.flags import Flag

if TYPE_CHECKING:
    from cuda_agent.workspace import VersionInfo


class AgentConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")  # a misspelt limit in a config file is an error, not ignored

    # the flags' help (cuda_agent/flags.py); a batch counts the budgets per task
    max_steps: Annotated[int, Flag(per_task=True)] = Field(
        50,
        ge=1,
        description=(
            "Steps at most: each tool call that runs is one step, a model reply that runs none is one; no tool call "
            "starts past it."
        ),
    )
    max_cost: Annotated[float | None, Flag(per_task=True)] = Field(
        None, description=("Dollars at most over priced turns (unpriced ones count as 0).")
    )
    max_tokens: Annotated[int | None, Flag(per_task=True)] = Field(
        None, description=("Prompt + completion tokens at most (summed over turns: what is billed).")
    )
    max_wall_s: Annotated[float | None, Flag(name="--max-wall", per_task=True)] = Field(
        None,
        description=(
            "Seconds of agent wall time at most: a deadline; no model request lasts past it (its timeout is the time "
            "left, retries included) and no tool call starts past it; the re-verification at the end comes after it."
        ),
    )
    max_calls_per_turn: Annotated[int, Flag()] = Field(
        8, ge=1, description=("Tool calls of one model reply that run; the rest are answered as skipped and never run.")
    )
    target_speedup: Annotated[float | None, Flag()] = Field(
        None,
        description=(
            "Stop once the best version is this much faster than limits.target_baseline, torch.compile by default."
        ),
    )
    target_baseline: Literal["compile", "eager"] = "compile"  # ...than this baseline
    max_format_errors: int = Field(3, ge=1)  # turns in a row with no usable tool call

    def past_deadline(self, started: float) -> bool:  # started: time.monotonic() at the run's start
        return self.max_wall_s is not None and time.monotonic() - started >= self.max_wall_s

    def exceeded(self, steps: int, cost: float | None, tokens: int, started: float) -> str | None:
        """The limit reached before a turn (its stop reason), or None."""
        if steps >= self.max_steps:
            return "max_steps"
        if self.max_cost is not None and (cost or 0.0) >= self.max_cost:
            return "max_cost"
        if self.max_tokens is not None and tokens >= self.max_tokens:
            return "max_tokens"
        return "max_wall_time" if self.past_deadline(started) else None

    def target_met(self, best: VersionInfo | None) -> bool:
        """The workspace's best correct version is target_speedup times faster than target_baseline."""
        if self.target_speedup is None or best is None:
            return False
        speedup = best.speedup_compile if self.target_baseline == "compile" else best.speedup_eager
        return speedup is not None and speedup >= self.target_speedup

    def held_back(self, index: int, n: int, allowed: int, started: float) -> tuple[str, str] | None:
        """Why call `index` of a reply's `n` must not run (its limit, and what the model reads), or None;
        `allowed`: how many of the reply's calls the step limit leaves."""
        if index >= self.max_calls_per_turn:
            return "max_calls_per_turn", (
                f"[skipped: your reply made {n} tool calls and at most {self.max_calls_per_turn} "
                "run per reply (--max-calls-per-turn); this one did not run. Call it again "
                "in your next reply if you still need it.]"
            )
        if index >= allowed:
            return "max_steps", (
                f"[skipped: the run reached its step limit ({self.max_steps}, --max-steps) before "
                "this call; it did not run]"
            )
        if self.past_deadline(started):
            return "max_wall_time", (
                f"[skipped: the run reached its wall-time limit ({self.max_wall_s:g} s, "
                "--max-wall) before this call; it did not run]"
            )
        return None
