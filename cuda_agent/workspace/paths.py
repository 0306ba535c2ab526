"""Where workspaces go and what paths they allow: every path a tool touches goes through `resolve_in`.
Nothing the model names may leave the workspace (by `..`, an absolute path or a symlink), reach into
`.git` (the history is the record of its work), or, for writes, replace a protected file."""

from __future__ import annotations

import hashlib
import os
import time
from contextlib import suppress
from pathlib import Path, PurePosixPath

from ..untrusted_files import SOURCE_CAP, UnreadableFile, read_bytes

# files the model reads but never writes; their hashes at creation are kept in workspace.json.
# .gitignore too: a model-written `*` in it once kept every kernel out of the history
PROTECTED = ("model.py", "model.inputs.py", "SKILL.md", "kernel_runtime.py", ".gitignore")
META_DIR = ".cuda-agent"  # the workspace's own record; read-only to the model as well
RECORD = f"{META_DIR}/workspace.json"


class WorkspaceError(ValueError):
    """A workspace that cannot be made or opened, or a path a tool may not use; says what to do."""


def resolve_in(root: Path, rel: str, *, for_write: bool = False) -> Path:
    """The absolute path of `rel` inside `root` (itself resolved), or WorkspaceError saying why not."""
    if "\0" in rel:
        raise WorkspaceError(f"path {rel!r} contains a NUL byte: give a plain relative path such as kernels/foo.cu")
    if rel.startswith(("/", "\\")) or PurePosixPath(rel).is_absolute() or Path(rel).is_absolute():
        raise WorkspaceError(f"absolute path {rel} is not allowed: give one relative to the workspace (kernels/a.cu)")
    # lexical check first, so `..` gets its own message before symlinks are followed
    lexical = os.path.normpath(rel.replace("\\", "/")) if rel else "."
    if lexical == ".." or lexical.startswith("../"):
        raise WorkspaceError(f"path {rel} leaves the workspace through '..': only files inside it are allowed")
    target = (root / lexical).resolve()
    try:
        inside = target.relative_to(root)
    except ValueError:
        raise WorkspaceError(
            f"path {rel} resolves outside the workspace (a symlink points to {target}): only files inside are allowed"
        ) from None
    if ".git" in inside.parts:
        raise WorkspaceError(f"path {rel} is inside .git: the history is kept by the harness, use the workspace files")
    if for_write:
        if inside.as_posix() in PROTECTED:
            raise WorkspaceError(
                f"{inside.as_posix()} is protected (read-only): write model_new.py and files under kernels/ instead"
            )
        if inside.parts and inside.parts[0] == META_DIR:
            raise WorkspaceError(f"{META_DIR}/ is the workspace's record (read-only): write model_new.py or kernels/")
        if target == root:
            raise WorkspaceError("the workspace folder itself cannot be written: name a file such as kernels/foo.cu")
    return target


def sha256_file(path: Path, root: Path | None = None) -> str | None:
    """The sha256 of a protected file, read as untrusted_files says below `root` (default: its own
    folder), or None when it is missing, not a regular file (a symlink, a FIFO: counts as changed),
    reached through a linked folder or over SOURCE_CAP (a sparse 100 GB model.py is not hashed)."""
    try:
        data = read_bytes(path, root=root or path.parent, limit=SOURCE_CAP)
    except UnreadableFile:
        return None
    return hashlib.sha256(data).hexdigest()


def enclosing_git_root(start: Path) -> Path | None:
    """The work tree holding `start` (which may not exist yet), or None; `.git` may be a file (worktrees)."""
    here = start.resolve()
    return next((folder for folder in (here, *here.parents) if (folder / ".git").exists()), None)


def new_run_dir(runs_dir: Path, name: str) -> Path:
    """`runs/<name>-<YYYYmmdd-HHMMSS>`, with -2, -3... when two runs start in the same second."""
    base = runs_dir / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    for n in range(1, 1000):
        run = base if n == 1 else base.with_name(f"{base.name}-{n}")
        with suppress(FileExistsError):
            run.mkdir(parents=True)
            return run
    raise WorkspaceError(f"could not make a new run folder under {runs_dir}: clear old runs or pick another --out")
