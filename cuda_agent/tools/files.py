"""The file tools: view_file, edit_file, list_files, delete_file, rename_file. Every path a tool
takes must be a plain name (cuda_agent.filenames: letters, digits, `_ - . /`) and goes through the
workspace's `resolve`, which refuses escapes (`..`, absolute paths, symlinks out, .git) and writes
to protected files; the refusals come back to the model as observations. Names made some other way
(the shell) are listed escaped and flagged, and delete_file / rename_file take them exactly as
list_files shows them, so a bad name can always be undone."""

from __future__ import annotations

import os
import shutil
import tempfile
from difflib import SequenceMatcher
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from ..filenames import name_problem, path_error
from ..filenames import shown as display
from .base import MAX_OBSERVATION, Tool, ToolContext, ToolError, ToolResult

MAX_FILE_BYTES = 8 * 1024 * 1024  # bigger than any kernel source; reading it all would waste memory
MAX_LINE_CHARS = 400  # one minified line must not eat the whole observation
LIST_LIMIT = 300  # entries list_files shows before cutting
# .cuda-agent is the workspace's own record, not the model's work
HIDDEN_DIRS = {".git", ".cuda-agent", "__pycache__", "build", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
HIDDEN_SUFFIXES = (".o", ".so", ".a", ".pyc", ".cubin", ".fatbin")
BAD_NAME = "  [name not allowed: rename_file or delete_file it]"


# ---- shared helpers -------------------------------------------------------------------------

def resolve(ctx: ToolContext, path: str, *, for_write: bool = False) -> Path:
    """`path` checked against the file-name rule, then the workspace's answer for it; refusals
    become ToolErrors (the model's mistake)."""
    refused = path_error(path)
    if refused is not None:
        parts = path.split("/")
        if ".." not in parts and not path.startswith("/") and os.path.lexists(Path(ctx.workspace.root) / path):
            refused += "; this one exists: rename it with rename_file or delete it with delete_file"
        raise ToolError(refused)
    return _workspace_resolve(ctx, path, for_write=for_write)


def _workspace_resolve(ctx: ToolContext, path: str, *, for_write: bool = False) -> Path:
    try:
        return ctx.workspace.resolve(path, for_write=for_write)
    except Exception as e:
        if isinstance(e, ValueError) or any(c.__name__ == "WorkspaceError" for c in type(e).__mro__):
            raise ToolError(str(e)) from None
        raise


def read_text(p: Path, shown: str) -> str:
    if p.is_dir():
        raise ToolError(f"{shown} is a folder; list_files with path={shown!r} shows what is in it")
    if not p.is_file():
        raise ToolError(f"{shown} does not exist; list_files shows the workspace's files")
    size = p.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ToolError(f"{shown} is {human(size)}, too large to open here (limit {human(MAX_FILE_BYTES)})")
    data = p.read_bytes()
    if b"\0" in data:
        raise ToolError(f"{shown} is a binary file; only text files can be viewed or edited")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ToolError(f"{shown} is not UTF-8 text; only text files can be viewed or edited") from None


def lines_of(text: str) -> list[str]:
    """Lines split on '\\n' only, so numbers agree with offsets counted the same way."""
    parts = text.split("\n")
    if parts[-1] == "":
        parts.pop()
    return parts


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


# ---- view_file ------------------------------------------------------------------------------

class ViewFile(Tool):
    name = "view_file"
    description = ("Show a text file of the workspace with numbered lines. Long files are shown in "
                   "parts: use start_line/end_line to see a range.")

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        path: str = Field(description="file path relative to the workspace root, e.g. kernels/add.cu")
        start_line: int = Field(1, ge=1, description="first line to show (1-based)")
        end_line: int = Field(0, ge=0, description="last line to show, inclusive; 0 = as far as fits")

    def execute(self, a: Args, ctx: ToolContext) -> ToolResult:
        try:
            text = read_text(resolve(ctx, a.path), a.path)
        except OSError as e:
            raise ToolError(f"cannot read {a.path}: {e.strerror or e}") from None
        lines = lines_of(text)
        total = len(lines)
        if total == 0:
            return ToolResult(observation=f"{a.path} is empty (0 lines)", data={"path": a.path, "total_lines": 0})
        if a.start_line > total:
            raise ToolError(f"start_line {a.start_line} is past the end: {a.path} has {total} lines")
        end = min(a.end_line or total, total)
        if end < a.start_line:
            raise ToolError(f"end_line {a.end_line} is before start_line {a.start_line}")
        body, last = numbered(lines, a.start_line, end, MAX_OBSERVATION - 400)
        obs = f"{a.path}: lines {a.start_line}-{last} of {total}\n{body}"
        if last < end:
            obs += f"\n[{end - last} more lines not shown; view_file with start_line={last + 1} to see more]"
        return ToolResult(observation=obs, data={"path": a.path, "start_line": a.start_line,
                                                 "end_line": last, "total_lines": total})


# ---- edit_file ------------------------------------------------------------------------------

class EditFile(Tool):
    name = "edit_file"
    description = (
        "Change a text file of the workspace. mode=replace: replace old_str, which must occur exactly "
        "once, by new_str. mode=insert: insert new_str after line insert_line (0 = at the top). "
        "mode=create: make a new file with file_text (overwrite=true to replace an existing one).")

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        mode: Literal["replace", "insert", "create"] = Field(description="what to do; see the tool description")
        path: str = Field(description="file path relative to the workspace root, e.g. kernels/add.cu")
        old_str: str = Field("", description="replace: the exact text to replace (copy it from view_file, "
                                             "with enough surrounding lines to occur only once)")
        new_str: str = Field("", description="replace: the text to put in its place; insert: the text to insert")
        insert_line: int = Field(0, ge=0, description="insert: the line after which new_str goes; 0 = top")
        file_text: str = Field("", description="create: the whole content of the new file")
        overwrite: bool = Field(False, description="create: replace the file if it already exists")

    def execute(self, a: Args, ctx: ToolContext) -> ToolResult:
        needed = {"replace": ("old_str", "new_str"), "insert": ("insert_line", "new_str"),
                  "create": ("file_text",)}[a.mode]
        missing = [f for f in needed if f not in a.model_fields_set]
        if missing:
            raise ToolError(f"mode={a.mode} needs {' and '.join(missing)}")
        p = resolve(ctx, a.path, for_write=True)
        try:
            return getattr(self, f"_{a.mode}")(a, p)
        except OSError as e:
            raise ToolError(f"cannot write {a.path}: {e.strerror or e}") from None

    def _replace(self, a: Args, p: Path) -> ToolResult:
        if not a.old_str:
            raise ToolError("old_str is empty; copy the exact text to replace from view_file")
        if a.old_str == a.new_str:
            raise ToolError("old_str and new_str are the same; nothing would change")
        text = read_text(p, a.path)
        hits = occurrences(text, a.old_str)
        if not hits:
            raise ToolError(no_match(text, a.old_str, a.path))
        if len(hits) > 1:
            nums = sorted({line_at(text, i) for i in hits})
            where = ", ".join(map(str, nums[:20])) + (", ..." if len(nums) > 20 else "")
            raise ToolError(f"old_str occurs {len(hits)} times in {a.path} (on lines {where}); "
                            "add surrounding lines to old_str so it matches exactly once")
        i = hits[0]
        new = text[:i] + a.new_str + text[i + len(a.old_str):]
        write_atomic(p, new)
        first = line_at(text, i)
        return _edited(f"replaced {span(first, line_at(text, i + len(a.old_str) - 1))} of {a.path}",
                       new, first, first + a.new_str.count("\n"), {"path": a.path, "line": first})

    def _insert(self, a: Args, p: Path) -> ToolResult:
        if not a.new_str:
            raise ToolError("new_str is empty; nothing to insert")
        text = read_text(p, a.path)
        total = len(lines_of(text))
        if a.insert_line > total:
            raise ToolError(f"insert_line {a.insert_line} is past the end: {a.path} has {total} lines "
                            f"(insert_line={total} appends)")
        offset, prefix = 0, ""
        for _ in range(a.insert_line):
            offset = text.find("\n", offset) + 1
            if offset == 0:  # the last line has no newline: give it one
                offset, prefix = len(text), "\n"
                break
        insert = prefix + a.new_str + ("" if a.new_str.endswith("\n") else "\n")
        new = text[:offset] + insert + text[offset:]
        write_atomic(p, new)
        first, added = a.insert_line + 1, insert.count("\n") - len(prefix)
        return _edited(f"inserted {added} line{'s' * (added != 1)} after line {a.insert_line} of {a.path}",
                       new, first, a.insert_line + added, {"path": a.path, "line": first})

    def _create(self, a: Args, p: Path) -> ToolResult:
        if p.is_dir():
            raise ToolError(f"{a.path} is a folder; give a file path")
        existed = p.exists() or p.is_symlink()
        if existed and not a.overwrite:
            raise ToolError(f"{a.path} already exists; use mode=replace to change part of it, "
                            "or overwrite=true to replace all of it")
        p.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(p, a.file_text)
        n = len(lines_of(a.file_text))
        verb = "overwrote" if existed else "created"
        return ToolResult(observation=f"{verb} {a.path} ({n} lines, {human(len(a.file_text.encode()))})",
                          data={"path": a.path, "lines": n, "overwrote": existed})


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
        sm = SequenceMatcher(None, "\n".join(s.strip() for s in lines[i:i + n]), target, autojunk=False)
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


def _edited(summary: str, text: str, first: int, last: int, data: dict[str, Any]) -> ToolResult:
    """The edit's summary and a few numbered lines around the change, to check it at a glance."""
    lines = lines_of(text)
    lo, hi = max(1, first - 3), min(len(lines), last + 3)
    body, shown = numbered(lines, lo, hi, 2500) if lines else ("", 0)
    more = f"\n[lines {shown + 1}-{hi} not shown; view_file to see them]" if shown < hi else ""
    return ToolResult(observation=f"{summary}. Now:\n{body}{more}", data=data)


# ---- list_files -----------------------------------------------------------------------------

class ListFiles(Tool):
    name = "list_files"
    description = ("List the workspace's files as a tree with their sizes (without .git, build "
                   "outputs and caches). Give path to list one folder.")

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        path: str = Field("", description="a folder relative to the workspace root; empty = the whole workspace")

    def execute(self, a: Args, ctx: ToolContext) -> ToolResult:
        where = a.path.strip().rstrip("/") or "."
        top = Path(ctx.workspace.root) if where == "." else resolve(ctx, where)
        if not top.is_dir():
            raise ToolError(f"{where} is a file; view_file shows it" if top.exists()
                            else f"{where} does not exist; list_files with no path shows the workspace")
        rows: list[str] = []
        try:
            files, size, hidden = _walk(top, 1, rows, "" if where == "." else f"{where}/")
        except OSError as e:
            raise ToolError(f"cannot list {where}: {e.strerror or e}") from None
        obs = [f"{where}/ ({files} files, {human(size)})", *rows[:LIST_LIMIT]]
        if any(BAD_NAME in row for row in rows):
            obs.append("Names marked 'not allowed' break builds and tools (only letters, digits, _ - . are "
                       "used): rename_file or delete_file them, giving the name as shown here.")
        if len(rows) > LIST_LIMIT:
            obs.append(f"[{len(rows) - LIST_LIMIT} more entries not shown; "
                       "list_files with path=<folder> lists one folder]")
        if hidden:
            obs.append(f"({hidden} entries hidden: .git, caches and build outputs)")
        return ToolResult(observation="\n".join(obs), data={"path": where, "files": files, "bytes": size})


def _walk(folder: Path, depth: int, rows: list[str], prefix: str = "") -> tuple[int, int, int]:
    """Append the tree under `folder` to rows (folders first); return (files, bytes, hidden). Names
    are shown escaped (cuda_agent.filenames.shown), and those the tools refuse are flagged."""
    files = size = hidden = 0
    entries = sorted(os.scandir(folder), key=lambda e: (not e.is_dir(follow_symlinks=False), e.name.lower()))
    pad = "  " * depth
    for e in entries:
        is_dir = e.is_dir(follow_symlinks=False)
        name, rel = display(e.name), f"{prefix}{e.name}"
        flag = BAD_NAME if name_problem(rel) is not None else ""
        if (is_dir and e.name in HIDDEN_DIRS) or (not is_dir and e.name.endswith(HIDDEN_SUFFIXES)):
            hidden += 1
        elif e.is_symlink():  # shown, never followed: it may point out of the workspace
            rows.append(f"{pad}{name} -> {display(os.readlink(e.path))}{flag}")
        elif is_dir:
            at = len(rows)
            rows.append("")
            f, s, h = _walk(Path(e.path), depth + 1, rows, f"{rel}/")
            rows[at] = f"{pad}{name}/ ({f} files, {human(s)}){flag}"
            files, size, hidden = files + f, size + s, hidden + h
        else:
            n = e.stat(follow_symlinks=False).st_size
            rows.append(f"{pad}{name}  {human(n)}{flag}")
            files, size = files + 1, size + n
    return files, size, hidden


# ---- delete_file, rename_file -----------------------------------------------------------------

def locate(ctx: ToolContext, given: str) -> tuple[Path, str]:
    """The entry `given` names and its real relative path. Each part matches an entry's real name or
    its name as list_files shows it (escaped), so a name the rule refuses can still be reached. A
    symlink at the end is the entry itself, never followed; folders on the way must be real ones."""
    text = given.strip().rstrip("/")
    if not text or text == ".":
        raise ToolError("give the path of a file or folder, as list_files shows it (e.g. kernels/old.cu)")
    if text.startswith("/"):
        raise ToolError(f"absolute path {display(text)} is not allowed: give it as list_files shows it (kernels/a.cu)")
    parts = text.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise ToolError(f"path {display(text)} has an empty, '.' or '..' part: give it as list_files shows it")
    folder = Path(ctx.workspace.root).resolve()
    real: list[str] = []
    for i, part in enumerate(parts):
        try:
            names = [e.name for e in os.scandir(folder)]
        except OSError as e:
            raise ToolError(f"cannot list {display('/'.join(real)) or '.'}: {e.strerror or e}") from None
        name = part if part in names else next((n for n in names if display(n) == part), None)
        if name is None:
            raise ToolError(f"{display(text)} does not exist; list_files shows the workspace's files")
        real.append(name)
        if i < len(parts) - 1:
            folder = folder / name
            if folder.is_symlink() or not folder.is_dir():
                raise ToolError(f"{display('/'.join(real))} is not a folder (a file or a symlink); "
                                "give the path as list_files shows it")
    return folder / real[-1], "/".join(real)


def check_removable(ctx: ToolContext, entry: Path, rel: str) -> None:
    """Refuse .git, protected files and the workspace's record, as writes to them are refused."""
    from cuda_agent.workspace.paths import META_DIR, PROTECTED

    first = rel.split("/", 1)[0]
    if first == ".git":
        raise ToolError(f"{display(rel)} is inside .git: the history is kept by the harness")
    if rel in PROTECTED or first == META_DIR:
        raise ToolError(f"{rel} is protected (read-only): it cannot be deleted or renamed")
    if name_problem(rel) is None and not entry.is_symlink():
        _workspace_resolve(ctx, rel, for_write=True)  # the workspace's own rules, where it can judge the name


class DeleteFile(Tool):
    name = "delete_file"
    description = ("Delete a file, symlink or folder (with everything in it) of the workspace. Give the path "
                   "exactly as list_files shows it: this also removes files whose names the tools refuse. "
                   "Protected files cannot be deleted.")

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        path: str = Field(description="the file or folder, relative to the workspace root, as list_files shows it")

    def execute(self, a: Args, ctx: ToolContext) -> ToolResult:
        entry, rel = locate(ctx, a.path)
        check_removable(ctx, entry, rel)
        folder = entry.is_dir() and not entry.is_symlink()
        try:
            if folder:
                count = sum(len(f) for _, _, f in os.walk(entry))
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError as e:
            raise ToolError(f"cannot delete {display(rel)}: {e.strerror or e}") from None
        what = f"folder {display(rel)}/ ({count} files)" if folder else display(rel)
        return ToolResult(observation=f"deleted {what}", data={"path": display(rel), "folder": folder})


class RenameFile(Tool):
    name = "rename_file"
    description = ("Rename or move a file, symlink or folder of the workspace. path: as list_files shows it "
                   "(a name the tools refuse works too); new_path: a new name made of letters, digits, _ - . "
                   "and / (e.g. kernels/matmul.cu), which must not exist yet. Protected files cannot be renamed.")

    class Args(BaseModel):
        model_config = ConfigDict(extra="forbid")
        path: str = Field(description="the file or folder to rename, as list_files shows it")
        new_path: str = Field(description="its new path relative to the workspace root, e.g. kernels/add.cu")

    def execute(self, a: Args, ctx: ToolContext) -> ToolResult:
        entry, rel = locate(ctx, a.path)
        check_removable(ctx, entry, rel)
        target = resolve(ctx, a.new_path, for_write=True)
        if os.path.lexists(target) or os.path.lexists(Path(ctx.workspace.root) / a.new_path):
            raise ToolError(f"{a.new_path} already exists; pick another name, or delete_file it first")
        if entry.is_dir() and not entry.is_symlink() and target.is_relative_to(entry.resolve()):
            raise ToolError(f"{a.new_path} is inside {display(rel)}: a folder cannot move into itself")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(entry, target)
        except OSError as e:
            raise ToolError(f"cannot rename {display(rel)} to {a.new_path}: {e.strerror or e}") from None
        return ToolResult(observation=f"renamed {display(rel)} to {a.new_path}",
                          data={"path": display(rel), "new_path": a.new_path})
