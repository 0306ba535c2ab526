"""What one compile read: nvcc's dependency file (-MD -MF), split into the toolkit's and system's
headers and the rest (the candidate's own files, whatever their names), which the object cache
and the static guards must cover. An `#include` whose name a macro computes, or a header with no
suffix, is read by nvcc like any other; only this list names it for certain.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from pathlib import Path

from cuda_agent.untrusted_files import read_bytes

TARGET = "dep"  # the rule's target (-MT): ours, so the rule's first ':' is known
# A dependency there is not a file the candidate wrote, and reading it in the parent (to hash or
# scan it) would read the parent's own process or devices.
_PSEUDO = (Path("/proc"), Path("/sys"), Path("/dev"))
INPUT_CAP = 64 << 20  # bytes of one file a compile read, hashed: a bigger one is no source


class DepfileError(ValueError):
    """The dependency list cannot be trusted: a file it names is gone, or is no plain file."""


def parse_depfile(text: str) -> list[str]:
    """The prerequisites of the make rule `dep : a.cu my\\ impl.h ...` as nvcc 13 writes it: a blank
    in a name escaped by a backslash (2N+1 backslashes before a blank are N and the blank, 2N are N
    and a break), '$' and '#' as they are, a backslash before a newline continuing the line. nvcc
    turns a backslash in a name into '/', and writes a tab as it is: such names come back as
    files that do not exist, which local_inputs refuses."""
    head = re.match(rf"\s*{re.escape(TARGET)}\s*:", text)
    if head is None:
        raise DepfileError(f"nvcc's list of the files it read does not start with '{TARGET} :': {text[:80]!r}")
    body = text[head.end() :]
    names: list[str] = []
    word: list[str] = []
    i, n = 0, len(body)

    def end_word() -> None:
        if "".join(word):
            names.append("".join(word))
        word.clear()

    while i < n:
        c = body[i]
        if c == "\\":
            j = i
            while j < n and body[j] == "\\":
                j += 1
            run, nxt = j - i, body[j] if j < n else ""
            if nxt == "\n" or body.startswith("\r\n", j):
                word.append("\\" * (run - 1))
                end_word()
                i = j + (2 if nxt == "\r" else 1)
            elif nxt in (" ", "\t"):
                word.append("\\" * (run // 2) + (nxt if run % 2 else ""))
                if not run % 2:
                    end_word()
                i = j + 1
            else:
                word.append("\\" * run)
                i = j
        elif c in " \t\r\n":
            end_word()
            i += 1
        else:
            word.append(c)
            i += 1
    end_word()
    return names


def local_inputs(names: Iterable[str], cwd: Path, system_dirs: Iterable[Path]) -> dict[str, str]:
    """Every dependency outside `system_dirs` (the toolkit's and the host compiler's include
    folders) -> the sha256 of its bytes, named as nvcc wrote it: relative to nvcc's `cwd` where
    the preprocessor found it by a relative name, so the same source elsewhere (another candidate
    folder, the same cache) is checked against its own files. A file inside `cwd` counts whatever
    folder it is in; one that cannot be read as a plain file is a DepfileError."""
    cwd, system = cwd.resolve(), [d.resolve() for d in system_dirs]
    found: dict[str, str] = {}
    for name in names:
        path = (cwd / name).resolve()
        if name in found or (not path.is_relative_to(cwd) and any(path.is_relative_to(d) for d in system)):
            continue
        if any(path.is_relative_to(d) for d in _PSEUDO) or not path.is_file():
            raise DepfileError(
                f"{name} was read by nvcc but is not a plain file the harness can read again: "
                "include only files of kernels/"
            )
        found[name] = file_sha(path, cwd if path.is_relative_to(cwd) else None)
    return found


def unchanged(recorded: dict[str, str], cwd: Path) -> bool:
    """Whether every recorded file (named as local_inputs names it) still has its recorded sha256."""
    for name, sha in recorded.items():
        inside = not Path(name).is_absolute() and ".." not in Path(name).parts  # the candidate's: no link below cwd
        try:
            if (file_sha(cwd / name, cwd) if inside else file_sha((cwd / name).resolve())) != sha:
                return False
        except OSError:  # UnreadableFile too: a FIFO or a link put where a header was is a change, not a hang
            return False
    return True


def file_sha(path: Path, root: Path | None = None) -> str:
    """The sha256 of a file a compile read, read as untrusted_files says below `root` (default: its
    own folder; an UnreadableFile for a FIFO, a link or a file over INPUT_CAP)."""
    return hashlib.sha256(read_bytes(path, root=root or path.parent, limit=INPUT_CAP)).hexdigest()
