"""What a commit may stage, checked by lstat before any `git add` (which would hash whatever the
model left): regular files up to a size cap, and symlinks (git keeps their target's name, never
reads it). A 40 GiB sparse kernels/huge.cu made every add run 300 s, and a resume (which commits
first) could not get past it; a FIFO, a socket or a device is no file to keep. Whatever fails the
gate stays out of the commit (and out of the index, were it there before), one line each that the
model is told. A `.git` below the workspace's root (a repository the shell made, whose config a
person's git there would run) is removed: the harness's is the only one (history.py).
No git calls here: history.py turns the gate into pathspecs."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass, field

from ..filenames import build_output, shown
from ..untrusted_files import kind_of
from .content import MAX_OBJECT_BYTES, VERSION_PATHS
from .paths import PROTECTED, RECORD

MAX_FILE_BYTES = MAX_OBJECT_BYTES  # no kernel source is bigger (content.py hashes no bigger object)
MAX_TOTAL_BYTES = 1 << 30  # every file of the work tree together: thousands of 60 MiB sparse files are no sources
_FIRST = {p.encode() for p in (*PROTECTED, RECORD)}  # counted first toward it: the task's files, then the version's
SHOWN = 10  # findings listed one per line; the rest counted


@dataclass
class Gate:
    """What one scan of the work tree found; paths are bytes relative to it (any name a file system holds)."""

    skipped: list[bytes] = field(default_factory=list)  # kept out of the commit
    nested_git: list[bytes] = field(default_factory=list)  # `.git` entries below the root, to remove
    problems: list[str] = field(default_factory=list)  # one line per skipped file a person would look for

    def findings(self) -> list[str]:
        """The lines to show: the first SHOWN, then how many more."""
        more = len(self.problems) - SHOWN
        return self.problems[:SHOWN] + ([f"... and {more} more files not committed"] if more > 0 else [])


def scan(work_tree: os.PathLike) -> Gate:
    """Walk the work tree without following symlinks: files that fail the gate, and nested `.git` entries."""
    gate, files = Gate(), []
    top = os.fsencode(work_tree)
    folders = [b""]
    while folders:
        rel = folders.pop()
        try:
            entries = list(os.scandir(os.path.join(top, rel) if rel else top))
        except OSError:
            continue  # unreadable: git skips it too (--ignore-errors)
        for entry in entries:
            path = os.path.join(rel, entry.name) if rel else entry.name
            if entry.name == b".git":
                if rel:  # the root's is the harness's pointer to its history (history.py)
                    gate.nested_git.append(path)
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                folders.append(path)
            elif stat.S_ISREG(st.st_mode):
                files.append((path, st.st_size))
            elif not stat.S_ISLNK(st.st_mode):
                _skip(gate, path, f"{kind_of(st.st_mode)}, not a regular file")
    total = 0
    for path, size in sorted(files, key=lambda f: (f[0] not in _FIRST, not _in_version(f[0]), f[0])):
        if size > MAX_FILE_BYTES:
            _skip(gate, path, f"{_size(size)}, over the {_size(MAX_FILE_BYTES)} one file may have")
        elif (total := total + size) > MAX_TOTAL_BYTES:
            total -= size
            _skip(gate, path, f"the workspace's files pass {_size(MAX_TOTAL_BYTES)} in all with it")
    return gate


def _skip(gate: Gate, path: bytes, why: str) -> None:
    gate.skipped.append(path)
    if not _build_output(path):  # ignored by .gitignore anyway: kept out without a word
        gate.problems.append(
            f"{shown(os.fsdecode(path))}: {why}: not committed (delete it, or make it a small source file)"
        )


def _in_version(path: bytes) -> bool:
    return any(path == p.encode() or path.startswith(p.encode() + b"/") for p in VERSION_PATHS)


def _build_output(path: bytes) -> bool:
    return build_output(os.fsdecode(path))


def _size(n: int) -> str:
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.1f} {unit}"
    return f"{n} B"
