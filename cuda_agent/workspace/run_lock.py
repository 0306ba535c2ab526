"""One process at a time runs a run: an exclusive flock on `<workspace>/.git/cuda-agent-run`,
held as long as the process has the workspace open. A second `optimize --resume`, `mcp --resume`,
batch or TUI resume of a run that is still running would otherwise commit the other's edits
half-made, clear git locks it holds and write the same trajectory. The kernel drops the lock when
the holder dies (kill -9 too): nothing stale is ever left to clear.
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path

from .paths import WorkspaceError

LOCK_NAME = "cuda-agent-run"  # not *.lock: those are git's, which a resume clears when stale


_held: dict[Path, list[int]] = {}  # this process's locks: [fd, holders]; a second Workspace here shares it


def hold_run(git_dir: Path) -> Path:
    """Hold the run's lock (a key for release_run; children don't inherit it); WorkspaceError names another holder."""
    path = (Path(git_dir) / LOCK_NAME).resolve()
    if path in _held:
        _held[path][1] += 1
        return path
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.read(fd, 400).decode(errors="replace").strip() or "a process that did not say which"
        os.close(fd)
        raise WorkspaceError(
            f"this run is being run by another process ({holder}): wait for it to end or "
            "stop it, then resume; follow it meanwhile with `cuda-agent tui RUN_DIR`"
        ) from None
    os.ftruncate(fd, 0)
    command = " ".join(os.path.basename(a) if i == 0 else a for i, a in enumerate(sys.argv))[:200]
    os.write(fd, f"pid {os.getpid()}, {command}, since {time.strftime('%Y-%m-%d %H:%M:%S')}".encode())
    _held[path] = [fd, 1]
    return path


def release_run(key: Path | None) -> None:
    held = _held.get(key)
    if held is not None:
        held[1] -= 1
        if held[1] == 0:
            os.close(_held.pop(key)[0])


def run_holder(git_dir: Path) -> str | None:
    """Who runs the run now ("pid N, command, since T"), or None: asked without taking the lock."""
    path = (Path(git_dir) / LOCK_NAME).resolve()
    if path in _held:
        return None  # this process: it is the one running it
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None  # never run by a release that locks, or not a run
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return os.read(fd, 400).decode(errors="replace").strip() or "a process that did not say which"
    finally:
        os.close(fd)
    return None
