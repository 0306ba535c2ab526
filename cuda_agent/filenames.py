"""The file names the workspace accepts, and how any name found on disk is shown.

A name reaches nvcc, fatbinary, git and the model's context: a ',' in a .cu name broke every
later link ("fatbinary: 'b.cubin' is not in 'keyword=value' format"), a newline split listings,
and a name that is not UTF-8 (a lone surrogate in Python) crashed the writers. So the file tools
and the kernel build accept only plain names: letters, digits, `_ - .`, folders split by `/`.
Anything else already on disk (the shell can make it) is shown escaped, and can be deleted or
renamed by the name it is shown under.

No imports beyond the standard library: the build (which runs in evaluation workers) uses it.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Iterable
from fnmatch import fnmatch
from pathlib import Path

MAX_PART = 100  # characters in one file or folder name
MAX_PATH = 240  # characters in a whole relative path
# names with a leading dot the model may still name: at the workspace root only
DOT_NAMES = frozenset({".gitignore", ".cuda-agent"})
# build outputs: never part of a version (the template's .gitignore; commits and content hashes leave
# them out), so the build refuses to read one (kernels/build/impl.h compiled, but its version could not be)
BUILD_OUTPUTS = (
    "build",
    ".cache",
    "__pycache__",
    "*.so",
    "*.o",
    "*.a",
    "*.cubin",
    "*.fatbin",
    "*.ptx",
    "*.ncu-rep",
    "*.pyc",
)
RULE = "use letters, digits, '_', '-' and '.' (folders split by '/'), e.g. kernels/my_kernel.cu"
_PLAIN = re.compile(r"[A-Za-z0-9_.\-]+")
_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t", "\\": "\\\\"}
_REFUSED_PARTS = {
    "": "it has an empty folder name ('//' or a '/' at the end)",
    "..": "'..' leaves the folder; name the file from the workspace root",
    ".": "'.' is not needed; name the file from the workspace root",
    ".git": ".git is the workspace history, kept by the harness",
}


def build_output(rel: str) -> bool:
    """Whether a relative path names a build output, or lies in a folder that is one."""
    return any(fnmatch(part, pattern) for part in rel.split("/") for pattern in BUILD_OUTPUTS)


def shown(name: str) -> str:
    """A name (or a path) as it can be printed and written anywhere: bytes that are not UTF-8
    (surrogateescape's U+DC80-U+DCFF) as \\xNN, other lone surrogates as \\uXXXX, control characters
    escaped, a backslash doubled, and a space at either end of a name as \\x20 (so it can't be lost
    to a strip). Plain names come back unchanged."""
    if _PLAIN.fullmatch(name.replace("/", "_")):
        return name
    return "/".join(_shown_part(part) for part in name.split("/"))


def _shown_part(part: str) -> str:
    out = []
    for i, ch in enumerate(part):
        o = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif 0xDC80 <= o <= 0xDCFF:
            out.append(f"\\x{o - 0xDC00:02x}")
        elif (
            0xD800 <= o <= 0xDFFF
            or not ch.isprintable()
            or unicodedata.category(ch) in ("Zl", "Zp")
            or (ch.isspace() and i in (0, len(part) - 1))
        ):
            out.append(f"\\x{o:02x}" if o < 0x100 else f"\\u{o:04x}" if o < 0x10000 else f"\\U{o:08x}")
        else:
            out.append(ch)
    return "".join(out)


def name_problem(rel: str) -> str | None:
    """Why `rel` (relative to the workspace) is not a path the tools accept, in a few words; None
    when it is one."""
    if not rel:
        return "it is empty"
    if rel.startswith("/"):
        return "it is absolute; give a path relative to the workspace"
    if len(rel) > MAX_PATH:
        return f"it is {len(rel)} characters long (at most {MAX_PATH})"
    for i, part in enumerate(rel.split("/")):
        if part in _REFUSED_PARTS:
            return _REFUSED_PARTS[part]
        if len(part) > MAX_PART:
            return f"the name {part[:20]}... is {len(part)} characters long (at most {MAX_PART})"
        if (bad := next((ch for ch in part if not _PLAIN.fullmatch(ch)), None)) is not None:
            what = "a space" if bad == " " else repr(bad) if bad.isprintable() and bad.isascii() else shown(bad)
            return f"it contains {what}"
        if part.startswith(".") and not (i == 0 and part in DOT_NAMES):
            return f"{part} starts with '.' (hidden names are not used here)"
        if part.startswith("-"):
            return f"{part} starts with '-' (tools would read it as an option)"
    return None


def path_error(rel: str) -> str | None:
    """The one-line refusal for a path that breaks the rule, or None when it is fine."""
    why = name_problem(rel)
    return None if why is None else f"path {shown(rel)!s} is not allowed: {why}; {RULE}"


def bad_sources(sources: Iterable[Path], root: Path) -> list[str]:
    """One line per source (under root, e.g. kernels/a,b.cu) whose name the rule refuses: the build
    stops there, before nvcc or the object cache ever sees it."""
    lines = []
    for src in sources:
        rel = src.relative_to(root).as_posix()
        if (why := name_problem(rel)) is not None:
            lines.append(
                f"{shown(rel)}: file name not allowed ({why}): delete it with delete_file or rename it "
                f"with rename_file (letters, digits, _ - . only), then compile again"
            )
    return lines


def candidate_symlinks(candidate_dir: Path) -> list[str]:
    """The candidate's files that are symlinks (model_new.py, kernels/ itself or anything in it),
    as shown names. The harness reads those files unjailed (the static guards, the source it hands
    the recorder, nvcc's working folder): through a symlink the shell can make, a key file's first
    word came back in a NameError the model read. A candidate holds its files themselves."""
    root = Path(candidate_dir)
    found = [name for name in ("model_new.py", "kernels") if (root / name).is_symlink()]
    kernels = root / "kernels"
    if "kernels" not in found and kernels.is_dir():
        for folder, dirs, files in os.walk(kernels):  # followlinks=False: a linked folder is listed, not entered
            for name in sorted(dirs + files):
                if (path := Path(folder) / name).is_symlink():
                    found.append(shown(path.relative_to(root).as_posix()))
    return found
