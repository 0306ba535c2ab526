"""A run's trajectory.jsonl (docs/architecture.md): append-only, each record flushed and fsynced as it
happens, so a crash loses at most the line being written (read back, a torn last line is skipped).
Secrets never reach the file: every string of every record is redacted (secrets.Redactor, with the
model keys the loop registers through `add_secrets`); the header's and resume's configs are scrubbed
before that (secrets.scrub_config). The record types are records.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from cuda_agent.records import Record, map_strings, parse_record
from cuda_agent.secrets import Redactor
from cuda_agent.untrusted_files import UnreadableFile, read_bytes

MAX_BYTES = 1 << 30  # a trajectory read back whole: thousands of steps fit; a bigger file is not one of ours


class TrajectoryWriter(contextlib.AbstractContextManager):
    """Appends records, each redacted (secrets.Redactor, with what `add_secrets` registers) and flushed to disk."""

    def __init__(self, path: Path | str, secrets: tuple = ()):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        _drop_torn_tail(self.path)  # a resumed run must not glue its first record onto a torn line
        self._file = open(self.path, "a", encoding="utf-8")
        self._scrub = Redactor(extra=secrets)

    def add_secrets(self, *values) -> None:
        """More values never to write: plain strings or (name, value) pairs (the model's key)."""
        self._scrub.add(*values)

    def write(self, record: Record) -> None:
        obj = self._scrub(record.model_dump(mode="json"))
        line = json.dumps(obj, ensure_ascii=False)
        try:
            line.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate (a file name that is not UTF-8): written as backslash
            # escapes, text rather than JSON escapes, so the file reads back as plain UTF-8
            line = json.dumps(
                map_strings(obj, lambda s: s.encode("utf-8", "backslashreplace").decode("utf-8")), ensure_ascii=False
            )
        self._file.write(line + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()

    def __exit__(self, *exc) -> None:
        self.close()


def read_trajectory(path: Path | str) -> list[Record]:
    """Every record of a trajectory. A torn last line (a crash mid-write) is skipped; a bad line
    anywhere else is corruption and raises ValueError naming the line. Bytes that are not UTF-8 and
    lone surrogate escapes read as U+FFFD (records.parse_record). The file is read as
    untrusted_files says, in its run folder: a symlink, a FIFO or a file over MAX_BYTES is an
    UnreadableFile (an OSError; FileNotFoundError-like when missing: `.missing`), never followed."""
    path = Path(path)
    lines = read_bytes(path, root=path.parent, limit=MAX_BYTES).decode("utf-8", "replace").split("\n")
    records = []
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            records.append(parse_record(line))
        except ValueError as e:
            if i == len(lines) - 1:  # no newline after it: the write never finished
                break
            raise ValueError(f"{path}:{i + 1}: not a trajectory record: {e}") from e
    return records


def _drop_torn_tail(path: Path) -> None:
    try:
        data = read_bytes(path, root=path.parent, limit=MAX_BYTES)
    except UnreadableFile as e:
        if e.missing:
            return
        raise
    if not data or data.endswith(b"\n"):
        return
    tail = data[data.rfind(b"\n") + 1 :]
    try:
        parse_record(tail)  # whole but for its newline: keep it
        with open(path, "ab") as f:
            f.write(b"\n")
    except ValueError:
        with open(path, "r+b") as f:
            f.truncate(len(data) - len(tail))
