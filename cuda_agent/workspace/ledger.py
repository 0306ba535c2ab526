"""The verdict ledger: the harness's own record of every evaluation it ran, one JSON line each,
in the run folder (`<run>/ledger.jsonl`, RunFolder.ledger: beside trajectory.jsonl, outside the workspace). Nothing
jailed binds the run folder (the shell, profile and sanitize get the workspace only; the jail
hides the run folder even where a read-only system path would hold it) and the file tools stay
inside the workspace, so neither the model nor the candidate can write or read it.

An entry is keyed by the content hash of the version it evaluated (content.py); the commit it was
recorded with is for display. Every reader of results (the best version, the RL reward, the
closing record, resume, re-verification, the report, export) reads these entries, never the
version commits' trailers or the `best` ref, which are for display: the history lives in the run
folder too (git_dir.py), but anyone who can write a commit can write any trailer.

Written append-only by the parent (O_APPEND, one write per line, fsync); read as untrusted_files
says (a regular file opened without following a symlink, non-blocking and size-capped): a FIFO,
a symlink or a damaged line is a one-line LedgerError, never a hang.
"""

from __future__ import annotations

import os
import stat
import time
from pathlib import Path

from pydantic import Field, ValidationError

from ..records import VersionMetrics
from ..untrusted_files import UnreadableFile, read_bytes

MAX_BYTES = 64 << 20  # some 100,000 evaluations; a bigger file is not one the harness wrote
_FLAGS = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class LedgerError(ValueError):
    """The ledger cannot be read or written as the harness's own file; says which and why."""


class LedgerEntry(VersionMetrics):
    """One evaluation the harness ran, as its verdict concluded it."""

    content: str | None  # content.version_digest of the version; None: it could not be read back (no result)
    workspace: str  # the workspace folder's name: a run folder holds one, a shared parent may hold more
    version: int
    commit: str  # the commit it was recorded with: where to look first, and what `git log` shows
    correct: bool
    guards: list[str] = []
    subject: str = ""
    time: float = Field(default_factory=time.time)

    def rank(self) -> tuple[int, float]:
        """Larger is better: reward first, then the lower time (a missing time ranks last)."""
        return (self.reward, -(self.time_ms if self.time_ms is not None else float("inf")))

    @property
    def is_result(self) -> bool:
        """A correct verdict of a version whose content is known: one that may be the run's best."""
        return self.correct and self.status == "correct" and self.content is not None


def start_ledger(path: Path) -> None:
    """Make the (empty) ledger of a new workspace: a run folder without one predates the ledger."""
    _write(path, b"")


def append_entry(path: Path, entry: LedgerEntry) -> None:
    """Add one line to the ledger (made if missing), on disk before this returns."""
    _write(path, (entry.model_dump_json() + "\n").encode())


def _write(path: Path, line: bytes) -> None:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _FLAGS, 0o644)
    except OSError as e:
        raise LedgerError(
            f"cannot write the verdict ledger {path}: {e.strerror} (it must be a regular "
            "file the harness made: remove whatever is there and re-verify)"
        ) from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise LedgerError(f"{path} is not a regular file: remove it and re-verify (the ledger is the harness's)")
        while line:
            line = line[os.write(fd, line) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(dir_fd)  # the file's name too, when this line made it
    finally:
        os.close(dir_fd)


def read_entries(path: Path) -> list[LedgerEntry] | None:
    """Every entry, oldest first; None when there is no ledger (a run made before it existed).
    A torn last line (a crash mid-write) is left out; anything else wrong is a LedgerError."""
    try:
        text = read_bytes(path, root=path.parent, limit=MAX_BYTES, shown=f"the verdict ledger {path}")
    except UnreadableFile as e:  # a symlink, a FIFO, over the cap (the ledger's own MAX_BYTES)
        if e.missing:
            return None
        raise LedgerError(f"{e}: it is not the harness's ledger; re-run or re-verify the run") from None
    lines = text.split(b"\n")
    lines.pop()  # after the last newline: empty, or a line still being written
    out = []
    for n, line in enumerate(lines, 1):
        try:
            out.append(LedgerEntry.model_validate_json(line))
        except ValidationError:
            raise LedgerError(
                f"{path} line {n} is not a ledger entry: the ledger was changed by hand; re-run or re-verify the run"
            ) from None
    return out


def best_entries(entries: list[LedgerEntry]) -> list[LedgerEntry]:
    """Entries that may be the result, best first; a tie keeps the older one first."""
    return sorted((e for e in entries if e.is_result), key=LedgerEntry.rank, reverse=True)
