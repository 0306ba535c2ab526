"""The file tools: view_file, edit_file, list_files, delete_file, rename_file. Paths are checked by
file_paths.py (escapes, protected files; refusals come back to the model as observations). Names made
some other way (the shell) are listed escaped and flagged, so delete_file / rename_file can undo them."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from ..filenames import name_problem
from ..filenames import shown as display
from .base import MAX_OBSERVATION, StrictArgs, Tool, ToolContext, ToolError, ToolResult, os_errors
from .file_paths import locate, resolve
from .file_text import human, line_at, lines_of, no_match, numbered, occurrences, read_text, span, write_atomic

LIST_LIMIT = 300  # entries list_files shows before cutting
# .cuda-agent is the workspace's own record, not the model's work
HIDDEN_DIRS = {".git", ".cuda-agent", "__pycache__", "build", ".pytest_cache", ".mypy_cache", ".ruff_cache"}
HIDDEN_SUFFIXES = (".o", ".so", ".a", ".pyc", ".cubin", ".fatbin")
BAD_NAME = "  [name not allowed: rename_file or delete_file it]"


class ViewFile(Tool):
    name = "view_file"
    description = "Show a workspace text file with numbered lines; start_line/end_line pick a range."

    class Args(StrictArgs):
        path: str = Field(description="relative to the workspace, e.g. kernels/add.cu")
        start_line: int = Field(1, ge=1, description="first line (1-based)")
        end_line: int = Field(0, ge=0, description="last line, inclusive; 0 = as far as fits")

    def execute(self, a: Args, ctx: ToolContext) -> ToolResult:
        with os_errors(f"read {a.path}"):
            text = read_text(resolve(ctx, a.path), a.path)
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
        return ToolResult(
            observation=obs, data={"path": a.path, "start_line": a.start_line, "end_line": last, "total_lines": total}
        )


class EditFile(Tool):
    name = "edit_file"
    description = (
        "Change a workspace text file. replace: old_str (exactly once in the file) by new_str; "
        "insert: new_str after line insert_line; create: a new file of file_text."
    )

    class Args(StrictArgs):
        mode: Literal["replace", "insert", "create"]
        path: str = Field(description="relative to the workspace, e.g. kernels/add.cu")
        old_str: str = Field("", description="replace: exact text, with enough lines to be unique")
        new_str: str = Field("", description="replace, insert: the new text")
        insert_line: int = Field(0, ge=0, description="insert: after this line; 0 = at the top")
        file_text: str = Field("", description="create: the whole file")
        overwrite: bool = Field(False, description="create: replace an existing file")

    def execute(self, a: Args, ctx: ToolContext) -> ToolResult:
        needed = {"replace": ("old_str", "new_str"), "insert": ("insert_line", "new_str"), "create": ("file_text",)}[
            a.mode
        ]
        if missing := [f for f in needed if f not in a.model_fields_set]:
            raise ToolError(f"mode={a.mode} needs {' and '.join(missing)}")
        p = resolve(ctx, a.path, for_write=True)
        with os_errors(f"write {a.path}"):
            return getattr(self, f"_{a.mode}")(a, p)

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
            raise ToolError(
                f"old_str occurs {len(hits)} times in {a.path} (on lines {where}); "
                "add surrounding lines to old_str so it matches exactly once"
            )
        i = hits[0]
        new = text[:i] + a.new_str + text[i + len(a.old_str) :]
        write_atomic(p, new)
        first = line_at(text, i)
        return _edited(
            f"replaced {span(first, line_at(text, i + len(a.old_str) - 1))} of {a.path}",
            new,
            first,
            first + a.new_str.count("\n"),
            {"path": a.path, "line": first},
        )

    def _insert(self, a: Args, p: Path) -> ToolResult:
        if not a.new_str:
            raise ToolError("new_str is empty; nothing to insert")
        text = read_text(p, a.path)
        total = len(lines_of(text))
        if a.insert_line > total:
            raise ToolError(
                f"insert_line {a.insert_line} is past the end: {a.path} has {total} lines (insert_line={total} appends)"
            )
        offset = sum(len(line) + 1 for line in text.split("\n")[: a.insert_line])
        prefix = "\n" if offset > len(text) else ""  # the last line has no newline: give it one
        offset = min(offset, len(text))
        insert = prefix + a.new_str + ("" if a.new_str.endswith("\n") else "\n")
        new = text[:offset] + insert + text[offset:]
        write_atomic(p, new)
        first, added = a.insert_line + 1, insert.count("\n") - len(prefix)
        return _edited(
            f"inserted {added} line{'s' * (added != 1)} after line {a.insert_line} of {a.path}",
            new,
            first,
            a.insert_line + added,
            {"path": a.path, "line": first},
        )

    def _create(self, a: Args, p: Path) -> ToolResult:
        if p.is_dir():
            raise ToolError(f"{a.path} is a folder; give a file path")
        existed = p.exists() or p.is_symlink()
        if existed and not a.overwrite:
            raise ToolError(
                f"{a.path} already exists; use mode=replace to change part of it, "
                "or overwrite=true to replace all of it"
            )
        p.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(p, a.file_text)
        n = len(lines_of(a.file_text))
        verb = "overwrote" if existed else "created"
        return ToolResult(
            observation=f"{verb} {a.path} ({n} lines, {human(len(a.file_text.encode()))})",
            data={"path": a.path, "lines": n, "overwrote": existed},
        )


def _edited(summary: str, text: str, first: int, last: int, data: dict[str, Any]) -> ToolResult:
    """The edit's summary and a few numbered lines around the change, to check it at a glance."""
    lines = lines_of(text)
    lo, hi = max(1, first - 3), min(len(lines), last + 3)
    body, shown = numbered(lines, lo, hi, 2500) if lines else ("", 0)
    more = f"\n[lines {shown + 1}-{hi} not shown; view_file to see them]" if shown < hi else ""
    return ToolResult(observation=f"{summary}. Now:\n{body}{more}", data=data)


class ListFiles(Tool):
    name = "list_files"
    description = "List the workspace's files with their sizes (no .git, build outputs or caches)."

    class Args(StrictArgs):
        path: str = Field("", description="one folder; empty = the whole workspace")

    def execute(self, a: Args, ctx: ToolContext) -> ToolResult:
        where = a.path.strip().rstrip("/") or "."
        top = Path(ctx.workspace.root) if where == "." else resolve(ctx, where)
        if not top.is_dir():
            raise ToolError(
                f"{where} is a file; view_file shows it"
                if top.exists()
                else f"{where} does not exist; list_files with no path shows the workspace"
            )
        rows: list[str] = []
        with os_errors(f"list {where}"):
            files, size, hidden = _walk(top, 1, rows, "" if where == "." else f"{where}/")
        obs = [f"{where}/ ({files} files, {human(size)})", *rows[:LIST_LIMIT]]
        if any(BAD_NAME in row for row in rows):
            obs.append(
                "Names marked 'not allowed' break builds and tools (only letters, digits, _ - . are "
                "used): rename_file or delete_file them, giving the name as shown here."
            )
        if len(rows) > LIST_LIMIT:
            obs.append(
                f"[{len(rows) - LIST_LIMIT} more entries not shown; list_files with path=<folder> lists one folder]"
            )
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


class DeleteFile(Tool):
    name = "delete_file"
    description = "Delete a workspace file or folder (path as list_files shows it). Not the protected files."

    class Args(StrictArgs):
        path: str = Field(description="as list_files shows it")

    def execute(self, a: Args, ctx: ToolContext) -> ToolResult:
        entry, rel = locate(ctx, a.path)
        folder = entry.is_dir() and not entry.is_symlink()
        with os_errors(f"delete {display(rel)}"):
            if folder:
                count = sum(len(f) for _, _, f in os.walk(entry))
                shutil.rmtree(entry)
            else:
                entry.unlink()
        what = f"folder {display(rel)}/ ({count} files)" if folder else display(rel)
        return ToolResult(observation=f"deleted {what}", data={"path": display(rel), "folder": folder})


class RenameFile(Tool):
    name = "rename_file"
    description = "Rename or move a workspace file or folder. Not the protected files."

    class Args(StrictArgs):
        path: str = Field(description="as list_files shows it")
        new_path: str = Field(description="a new path of letters, digits, _ - . and /, e.g. kernels/mm.cu")

    def execute(self, a: Args, ctx: ToolContext) -> ToolResult:
        entry, rel = locate(ctx, a.path)
        target = resolve(ctx, a.new_path, for_write=True)
        if os.path.lexists(target) or os.path.lexists(Path(ctx.workspace.root) / a.new_path):
            raise ToolError(f"{a.new_path} already exists; pick another name, or delete_file it first")
        if entry.is_dir() and not entry.is_symlink() and target.is_relative_to(entry.resolve()):
            raise ToolError(f"{a.new_path} is inside {display(rel)}: a folder cannot move into itself")
        with os_errors(f"rename {display(rel)} to {a.new_path}"):
            target.parent.mkdir(parents=True, exist_ok=True)
            os.rename(entry, target)
        return ToolResult(
            observation=f"renamed {display(rel)} to {a.new_path}", data={"path": display(rel), "new_path": a.new_path}
        )
