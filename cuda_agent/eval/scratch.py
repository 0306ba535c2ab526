"""Private temporary folders of an evaluation (a jailed process's scratch, the judge's task copy),
named after the process that made them, so that folders left by one that was killed (kill -9 of
the agent, a batch child stopped by a signal) are removed by the next evaluator on the machine."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from cuda_agent.pid_alive import pid_alive

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
        if pid == os.getpid() or pid_alive(pid):
            continue
        remove_tree(Path(entry.path))
        removed += 1
    return removed


def remove_tree(path: Path) -> None:
    """Remove `path` and everything below it, however deep the folders a jailed process nested in
    it: shutil.rmtree recurses once a level, and 3000 levels raised RecursionError out of the
    evaluator; rm (coreutils) walks any depth."""
    try:
        shutil.rmtree(path, ignore_errors=True)
    except RecursionError:
        subprocess.run(
            ["rm", "-rf", "--one-file-system", "--", str(path)],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=300,
        )
