"""Following an append-only file: the app on a trajectory, the agent on its control commands."""

from __future__ import annotations

import os
from pathlib import Path

from cuda_agent.untrusted_files import UnreadableFile, open_regular, read_fd

MAX_READ = 64 << 20  # bytes read per call: what is past it comes with the next


def read_new_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """The complete lines appended to `path` after byte `offset`, and the offset after them. A line
    still being written (no newline yet) is left for the next call. The file is read as
    untrusted_files says, in its own folder: a FIFO or a symlink there gives nothing, as a missing
    file does (never followed, never waited on)."""
    try:
        fd = open_regular(path, root=path.parent)
    except UnreadableFile:
        return [], offset
    try:
        os.lseek(fd, offset, os.SEEK_SET)
        data = read_fd(fd, MAX_READ)
    finally:
        os.close(fd)
    end = data.rfind(b"\n") + 1
    if not end and len(data) == MAX_READ:  # one line longer than a whole read: passed over, not waited on
        return [], offset + len(data)
    return [x for x in data[:end].decode("utf-8", "replace").splitlines() if x.strip()], offset + end
