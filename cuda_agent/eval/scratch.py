"""Private temporary folders of an evaluation (a jailed process's scratch, the judge's task copy),
named after the process that made them, so that folders left by one that was killed (kill -9 of
the agent, a batch child stopped by a signal) are removed by the next evaluator on the machine."""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

_NAME = re.compile(r"^cuda-agent-(judge|recorder|task)-(\d+)-")


def private_dir(kind: str) -> Path:
    """A new folder only we can enter (mkdtemp: 0700), named `cuda-agent-<kind>-<our pid>-...`."""
    return Path(tempfile.mkdtemp(prefix=f"cuda-agent-{kind}-{os.getpid()}-"))


def sweep_stale(root: Path | None = None) -> int:
    """Remove such folders whose process is gone; returns how many."""
    root = Path(root or tempfile.gettempdir())
    removed = 0
    try:
        entries = list(os.scandir(root))
    except OSError:
        return 0
    for entry in entries:
        m = _NAME.match(entry.name)
        if not m or not entry.is_dir(follow_symlinks=False):
            continue
        pid = int(m.group(2))
        if pid == os.getpid() or _alive(pid):
            continue
        shutil.rmtree(entry.path, ignore_errors=True)
        removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
