"""A counting semaphore across processes: N lock files per device, flock'ed without blocking.

Task processes are started by the batch and share nothing but the file system, so the slots are
files; a process that dies releases its lock with its file descriptors (no stale slots).
"""

from __future__ import annotations

import fcntl
import os
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

POLL_S = 0.05


@contextmanager
def hold_slot(lock_dir: Path, device: str, slots: int) -> Iterator[int]:
    """Wait for one of `slots` slots of `device`; yield its number."""
    lock_dir.mkdir(parents=True, exist_ok=True)
    while True:
        for i in range(slots):
            fd = os.open(lock_dir / f"{device.replace(':', '')}.slot{i}.lock", os.O_CREAT | os.O_RDWR, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield i
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
            return
        time.sleep(POLL_S)
