"""Where the harness's repository of a workspace is, and the workspace's `.git`, which only points
at it. The repository is kept beside the workspace (`git_dir_of`: `<run>/workspace.git`), out
of the model's reach; the workspace's `.git` is a file the harness writes, `gitdir: ../workspace.git`,
so that a person's `git -C workspace log` reads the harness's repository. The model's shell can
replace that file (with a folder of its own holding hooks and a config, a symlink, a pointer to
another run), so the harness never follows it: it writes it again (`point_work_tree`) at every
commit and when the run ends. No git calls here: the file system only.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from ..eval.scratch import remove_tree
from ..run_folder import RunFolder
from ..untrusted_files import kind_of, read_bytes
from .paths import WorkspaceError

LEGACY = ".git"  # where runs made before the repository moved out kept it: inside the workspace


def git_dir_of(work_tree: Path) -> Path:
    """Where a workspace's repository is kept: beside it (`<run>/workspace.git`), in the run folder that the jail
    of the shell, profile and sanitize shows empty and the file tools cannot name; never inside the workspace,
    where the model's shell writes. The workspace's own `.git` is only a pointer the harness writes (history.py)."""
    return RunFolder.around(work_tree).history


def find_git_dir(work_tree: Path) -> Path:
    """The repository of the workspace at `work_tree`: the folder beside it (a real folder, not a symlink), or
    for a run made before it moved there the workspace's own `.git` folder. WorkspaceError when neither is."""
    work_tree = Path(work_tree)
    for git_dir in (git_dir_of(work_tree), work_tree / LEGACY):
        if git_dir.is_dir() and not git_dir.is_symlink():
            return git_dir.resolve()
    raise WorkspaceError(
        f"{work_tree} has no cuda-agent history ({git_dir_of(work_tree).name} beside it is "
        "missing): give a run's workspace/ folder, or its run folder"
    )


def is_legacy(git_dir: Path) -> bool:
    """A repository inside its workspace, where the model's shell could write it (a run of an older release)."""
    return Path(git_dir).name == LEGACY


def pointer_text(git_dir: Path) -> bytes:
    return f"gitdir: ../{Path(git_dir).name}\n".encode()


def point_work_tree(work_tree: Path, git_dir: Path) -> str | None:
    """Make `<work_tree>/.git` the harness's pointer to `git_dir`, whatever was there; what was replaced
    ("a folder", "a symlink", "another pointer"...) or None when it already was the pointer."""
    if is_legacy(git_dir):
        return None
    dotgit, want = Path(work_tree) / LEGACY, pointer_text(git_dir)
    try:
        st = os.lstat(dotgit)
    except FileNotFoundError:
        st = None
    if st is not None and stat.S_ISREG(st.st_mode) and st.st_size == len(want) and _read(dotgit, work_tree) == want:
        return None
    was = None if st is None else _kind(st.st_mode)
    if st is not None:
        remove_entry(dotgit)
    fd = os.open(dotgit, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    try:
        os.write(fd, want)
    finally:
        os.close(fd)
    return was


def remove_entry(path: Path) -> None:
    """Remove a file, a symlink (never its target) or a whole folder (symlinks in it are not followed),
    however deep the shell nested it (eval/scratch.py's remove_tree); OSError when it is still there."""
    if os.path.isdir(path) and not os.path.islink(path):
        remove_tree(Path(path))
        if os.path.lexists(path):
            raise OSError(errno.ENOTEMPTY, os.strerror(errno.ENOTEMPTY), str(path))
    else:
        os.unlink(path)


def _read(path: Path, root: Path) -> bytes | None:
    try:
        return read_bytes(path, root=root, limit=4096)
    except OSError:  # UnreadableFile: whatever it is, it is not the pointer
        return None


def _kind(mode: int) -> str:
    """What stood where the pointer file belongs: a regular file there is a pointer of someone else's."""
    return "another pointer" if stat.S_ISREG(mode) else kind_of(mode)
