"""Text files as the file tools show and change them: read whole (size, binary and UTF-8 checked),
lines numbered within a budget, written atomically, and, when an edit's old_str is not found, the
most similar lines of the file."""

from __future__ import annotations

import os
import tempfile
from difflib import SequenceMatcher
from pathlib import Path

from ..untrusted_files import SOURCE_CAP, UnreadableFile, kind_of, read_bytes
from .base import ToolError

MAX_FILE_BYTES = SOURCE_CAP  # bigger than any kernel source; reading it all would waste memory
MAX_LINE_CHARS = 400  # one minified line must not eat the whole observation


def read_text(p: Path, shown: str) -> str:
    """The text of the workspace file `p`, which file_paths.resolve resolved (no link on the way
    then). It is read as untrusted_files says, from the filesystem root down: a link the shell
    put on the way since, a FIFO or a file grown past the cap is a refusal, never followed or waited on."""
    if p.is_dir():
        raise ToolError(f"{shown} is a folder; list_files with path={shown!r} shows what is in it")
    if not p.is_file():
        try:
            kind = kind_of(os.lstat(p).st_mode)  # a FIFO or a socket the shell made: there, but no file to read
        except OSError:
            raise ToolError(f"{shown} does not exist; list_files shows the workspace's files") from None
        raise ToolError(
            f"{shown} is {kind}, not a text file: delete it with delete_file, or replace it with "
            "edit_file mode=create and overwrite=true"
        )
    if (size := p.stat().st_size) > MAX_FILE_BYTES:
        raise ToolError(f"{shown} is {human(size)}, too large to open here (limit {human(MAX_FILE_BYTES)})")
    try:
        data = read_bytes(p, root=Path(p.anchor), limit=MAX_FILE_BYTES, shown=shown)
    except UnreadableFile as e:
        raise ToolError(str(e)) from None
    if b"\0" in data:
        raise ToolError(f"{shown} is a binary file; only text files can be viewed or edited")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{shown} is not UTF-8 text; only text files can be viewed or edited") from None


def lines_of(text: str) -> list[str]:
    """Lines split on '\\n' only, so numbers agree with offsets counted the same way."""
    return text.removesuffix("\n").split("\n") if text else []


def line_at(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def numbered(lines: list[str], start: int, end: int, budget: int) -> tuple[str, int]:
    """Lines start..end (1-based, inclusive) as `  12| text`, stopping before `budget` characters.
    Returns the text and the last line shown."""
    width = max(4, len(str(end)))
    out, used, last = [], 0, start - 1
    for n in range(start, end + 1):
        text = lines[n - 1].rstrip("\r")
        if len(text) > MAX_LINE_CHARS:
            text = f"{text[:MAX_LINE_CHARS]}...[{len(text) - MAX_LINE_CHARS} more characters]"
        row = f"{n:>{width}}| {text}"
        if out and used + len(row) + 1 > budget:
            break
        out.append(row)
        used += len(row) + 1
        last = n
    return "\n".join(out), last


def write_atomic(p: Path, text: str) -> None:
    """Write through a temporary file and rename, so a crash never leaves half a file. A symlink
    at `p` is replaced by the file, never written through."""
    mode = p.stat().st_mode & 0o7777 if p.is_file() and not p.is_symlink() else 0o644
    fd, tmp = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def span(first: int, last: int) -> str:
    return f"line {first}" if first == last else f"lines {first}-{last}"


def human(n: float) -> str:
    for unit in ("B", "KB", "MB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GB"


def occurrences(text: str, sub: str) -> list[int]:
    """Start offsets of `sub`, overlapping ones included (they make a replace just as ambiguous)."""
    hits, i = [], text.find(sub)
    while i >= 0:
        hits.append(i)
        i = text.find(sub, i + 1)
    return hits


def no_match(text: str, old: str, shown: str) -> str:
    """Why old_str was not found, with the most similar lines of the file and their numbers."""
    lines, want = lines_of(text), lines_of(old) or [old]
    n = len(want)
    target = "\n".join(s.strip() for s in want)  # indentation aside: a common cause of misses
    best: list[tuple[float, int]] = []  # the two best windows that do not overlap: (score, index)
    for i in range(max(1, min(len(lines), 20000) - n + 1)):
        sm = SequenceMatcher(None, "\n".join(s.strip() for s in lines[i : i + n]), target, autojunk=False)
        floor = best[-1][0] if len(best) == 2 else 0.0
        if not (sm.real_quick_ratio() > floor and sm.quick_ratio() > floor and (r := sm.ratio()) > floor):
            continue
        clash = [b for b in best if abs(b[1] - i) < n]
        if all(b[0] < r for b in clash):
            best = sorted([*(b for b in best if b not in clash), (r, i)], reverse=True)[:2]
    if not best or best[0][0] < 0.5:
        return f"old_str was not found in {shown} and nothing similar is there; view_file {shown} to see its text"
    parts = [f"old_str was not found in {shown}."]
    for r, i in best:
        if r < 0.5:
            continue
        end = min(i + min(n, 12), len(lines))
        body, _ = numbered(lines, i + 1, end, 2000)
        note = " (differs only in whitespace)" if r == 1.0 else ""
        parts.append(f"Closest text, {span(i + 1, end)}{note}:\n{body}")
    parts.append("Copy the exact text, indentation included, from these lines or from view_file.")
    return "\n".join(parts)
