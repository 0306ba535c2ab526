"""Following an append-only file: the app on a trajectory, the agent on its control commands."""

from __future__ import annotations

from pathlib import Path


def read_new_lines(path: Path, offset: int) -> tuple[list[str], int]:
    """The complete lines appended to `path` after byte `offset`, and the offset after them. A line
    still being written (no newline yet) is left for the next call."""
    if not path.exists():
        return [], offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    return [x for x in data[:end].decode("utf-8", "replace").splitlines() if x.strip()], offset + end
