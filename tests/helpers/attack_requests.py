"""The requests of the attacker child in tests/harness/test_jail_limits.py: a jailed process served
by the evaluator's own channel (cuda_agent/eval/channel.py) whose handlers attack the jail's
limits. Imported by the test (the parent's side) and by the child (its side)."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import Field

from cuda_agent.eval.protocol import Request


class FillTmp(Request):
    op: Literal["fill_tmp"] = "fill_tmp"


class FillScratch(Request):
    op: Literal["fill_scratch"] = "fill_scratch"


class Bomb(Request):
    op: Literal["bomb"] = "bomb"


Attack = Annotated[Union[FillTmp, FillScratch, Bomb], Field(discriminator="op")]
