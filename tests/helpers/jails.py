"""The jails the attack tests attack (tests/harness/test_jail*.py): the plain one, and, GPU-marked, the
judge's and the shell's exactly as they are built on a GPU machine (the device nodes bound, no
address-space limit), from the same functions the judge's spares and the shell tool call."""

from __future__ import annotations

from pathlib import Path

import pytest

from cuda_agent.eval.spares import judge_jail
from cuda_agent.jail import Jail
from cuda_agent.tools.shell import shell_jail

KINDS = ["plain", pytest.param("judge", marks=pytest.mark.gpu), pytest.param("shell", marks=pytest.mark.gpu)]


def make_jail(kind: str, folder: Path, **limits) -> Jail:
    """The jail of `kind` that may write `folder` (the judge's scratch, the shell's workspace), with
    `limits` (Jail fields: pids, tmp_bytes, quota...) set on it."""
    folder = Path(folder)
    if kind == "judge":
        jail = judge_jail(folder, [], gpu=True, quota=1 << 30)
    elif kind == "shell":
        jail = shell_jail(folder)
    else:
        jail = Jail(writable=[folder], cwd=folder)
    for name, value in limits.items():
        setattr(jail, name, value)
    return jail
