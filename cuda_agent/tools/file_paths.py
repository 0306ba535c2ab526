"""Which workspace entry a tool's path names. `resolve` is for the paths tools read and write:
the file-name rule (cuda_agent.filenames) first, then the workspace's own `resolve` (no escapes,
no writes to protected files). `locate` is for delete_file and rename_file, which must also reach
names the rule refuses (made by the shell), as list_files shows them. Refusals are ToolErrors:
the model's mistake, shown to it as an observation."""

from __future__ import annotations

import os
from pathlib import Path

from ..filenames import name_problem, path_error
from ..filenames import shown as display
from ..workspace.paths import META_DIR, PROTECTED
from .base import ToolContext, ToolError, os_errors


def resolve(ctx: ToolContext, path: str, *, for_write: bool = False) -> Path:
    """`path` checked against the file-name rule, then the workspace's answer for it; refusals
    become ToolErrors (the model's mistake)."""
    if (refused := path_error(path)) is not None:
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


def locate(ctx: ToolContext, given: str) -> tuple[Path, str]:
    """The entry `given` names and its real relative path. Each part matches an entry's real name or
    its name as list_files shows it (escaped), so a name the rule refuses can still be reached. A
    symlink at the end is the entry itself, never followed; folders on the way must be real ones.
    .git, protected files and the workspace's record are refused, as writes to them are."""
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
        with os_errors(f"list {display('/'.join(real)) or '.'}"):
            names = [e.name for e in os.scandir(folder)]
        name = part if part in names else next((n for n in names if display(n) == part), None)
        if name is None:
            raise ToolError(f"{display(text)} does not exist; list_files shows the workspace's files")
        real.append(name)
        if i < len(parts) - 1:
            folder = folder / name
            if folder.is_symlink() or not folder.is_dir():
                raise ToolError(
                    f"{display('/'.join(real))} is not a folder (a file or a symlink); "
                    "give the path as list_files shows it"
                )
    entry, rel = folder / real[-1], "/".join(real)
    first = rel.split("/", 1)[0]
    if first == ".git":
        raise ToolError(f"{display(rel)} is inside .git: the history is kept by the harness")
    if rel in PROTECTED or first == META_DIR:
        raise ToolError(f"{rel} is protected (read-only): it cannot be deleted or renamed")
    if name_problem(rel) is None and not entry.is_symlink():
        _workspace_resolve(ctx, rel, for_write=True)  # the workspace's own rules, where it can judge the name
    return entry, rel
