"""How the unjailed side reads a file that a jailed process or the model could have written (in a
scratch folder, the workspace, a run folder, a build's output folder): one rule for every such read.

A recorder once replaced its own log with a symlink to ~/.aws/credentials and exited: the parent
read "the last lines of the log" through it into the verify observation, the trajectory and the
export. The same log made a FIFO hung the agent. So such a file is read only

- as a regular file (fstat of the open descriptor says S_ISREG: no FIFO, folder, socket or device);
- opened without following a link, neither at its last component (O_NOFOLLOW) nor on the way to it:
  each folder below `root` is opened with O_DIRECTORY | O_NOFOLLOW relative to the one above, so no
  name is resolved twice and nothing can be swapped between a check and the read;
- non-blocking (O_NONBLOCK: a FIFO opens at once, and is then refused for what it is);
- within a size cap (the whole file of at most `limit` bytes, or the last `limit` bytes of it).

`root` is the caller's own folder (the scratch folder it made, the workspace root, the run folder),
opened as named; what lies below it is the untrusted part. Anything else is an UnreadableFile (an
OSError) whose message is one line saying what the file is and that it was not read: the caller puts
it where the content would have gone. A descriptor the parent opened before the child ran (a log)
is read with `tail_of_fd`, under the same type check and cap.

Standard library only: the build (which runs in evaluation workers) uses it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_CHUNK = 1 << 20
SOURCE_CAP = 8 << 20  # bytes of one source file of a candidate (model_new.py, kernels/): far above any real one


class UnreadableFile(OSError):
    """A file that is not read: not a regular file, reached through a link, over its cap, missing.
    str() is the one-line finding; `missing` tells a file that is not there from a refused one."""

    def __init__(self, code: int, message: str):
        super().__init__(code, message)

    def __str__(self) -> str:
        return self.strerror

    @property
    def missing(self) -> bool:
        return self.errno == errno.ENOENT


def kind_of(mode: int) -> str:
    """What a file of this st_mode is, in a few words."""
    for test, name in (
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISDIR, "a folder"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISREG, "a regular file"),
    ):
        if test(mode):
            return name
    return "of an unknown type"


def open_regular(path: Path | str, *, root: Path | str, shown: str | None = None) -> int:
    """A read-only descriptor of the regular file `path`, which lies below `root`, reached without
    following any link below `root`; the caller closes it. UnreadableFile otherwise."""
    path, root = Path(path), Path(root)
    shown = shown or str(path)
    parts = path.relative_to(root).parts  # ValueError: a caller's mistake, not the file's
    if not parts or any(p in (".", "..") for p in parts):
        raise ValueError(f"{path} does not name a file below {root}")
    try:
        dir_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as e:
        raise UnreadableFile(
            e.errno or errno.EIO, f"{shown} cannot be read: its folder {root} cannot be opened ({e.strerror})"
        ) from None
    try:
        for i, part in enumerate(parts[:-1]):
            try:
                fd = os.open(part, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError as e:
                raise _refused(e, part, dir_fd, shown, folder="/".join(parts[: i + 1])) from None
            os.close(dir_fd)
            dir_fd = fd
        try:
            fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dir_fd)
        except OSError as e:
            raise _refused(e, parts[-1], dir_fd, shown) from None
    finally:
        os.close(dir_fd)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise UnreadableFile(errno.EINVAL, f"{shown} is not a regular file ({kind_of(mode)}): not read")
    return fd


def _refused(e: OSError, name: str, dir_fd: int, shown: str, folder: str | None = None) -> UnreadableFile:
    """The finding for an open that failed: say what is there when it is not what was wanted."""
    if e.errno == errno.ENOENT:
        return UnreadableFile(errno.ENOENT, f"{shown} does not exist" + (f" (no folder {folder})" if folder else ""))
    try:
        what = kind_of(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        what = None
    code = errno.ELOOP if what == "a symlink" else e.errno or errno.EIO
    if folder is not None and what is not None and what != "a folder":
        return UnreadableFile(code, f"{shown} is not read: {folder} on the way to it is {what}, not a folder")
    if folder is None and what is not None and what != "a regular file":
        return UnreadableFile(code, f"{shown} is not a regular file ({what}): not read")
    return UnreadableFile(e.errno or errno.EIO, f"{shown} cannot be read: {e.strerror}")


def read_fd(fd: int, limit: int) -> bytes:
    """Up to `limit` bytes from the descriptor's offset on (fewer at its end)."""
    chunks, left = [], limit
    while left > 0 and (chunk := os.read(fd, min(left, _CHUNK))):
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_bytes(path: Path | str, *, root: Path | str, limit: int, shown: str | None = None) -> bytes:
    """The whole regular file `path` (below `root`), when it holds at most `limit` bytes."""
    shown = shown or str(path)
    fd = open_regular(path, root=root, shown=shown)
    try:
        size = os.fstat(fd).st_size
        data = read_fd(fd, limit + 1) if size <= limit else b""
    finally:
        os.close(fd)
    if size > limit or len(data) > limit:  # over the cap, or it grew past it while read
        raise UnreadableFile(
            errno.EFBIG, f"{shown} is {_size(max(size, len(data)))}, over the {_size(limit)} cap: not read"
        )
    return data


def read_text(
    path: Path | str, *, root: Path | str, limit: int, shown: str | None = None, errors: str = "replace"
) -> str:
    """read_bytes as UTF-8 text (bytes that are not UTF-8 as `errors` says)."""
    return read_bytes(path, root=root, limit=limit, shown=shown).decode("utf-8", errors)


def read_tail(path: Path | str, *, root: Path | str, limit: int, shown: str | None = None) -> bytes:
    """The last `limit` bytes (or all, when fewer) of the regular file `path` below `root`."""
    fd = open_regular(path, root=root, shown=shown)
    try:
        return tail_of_fd(fd, limit, shown=shown or str(path))
    finally:
        os.close(fd)


def tail_of_fd(fd: int, limit: int, *, shown: str = "the file") -> bytes:
    """The last `limit` bytes of the regular file open as `fd` (one the parent opened before the
    child ran, or open_regular's), read by position: its offset is left alone."""
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        raise UnreadableFile(errno.EINVAL, f"{shown} is not a regular file ({kind_of(st.st_mode)}): not read")
    start = max(0, st.st_size - limit)
    chunks, at = [], start
    while at < start + limit and (chunk := os.pread(fd, min(start + limit - at, _CHUNK), at)):
        chunks.append(chunk)
        at += len(chunk)
    return b"".join(chunks)


def _size(n: int) -> str:
    return f"{n} bytes" if n < 1 << 20 else f"{n / (1 << 20):.1f} MiB"
