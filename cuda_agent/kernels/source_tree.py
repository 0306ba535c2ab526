"""What kernels/ may hold before nvcc reads it: regular files and folders, each file within the cap.

The jailed nvcc sees all of kernels/ (cwd, read-only), and a compile reads whatever a source names,
`#include "impl.h"` or a name a macro computes: a FIFO there (the shell makes one with mkfifo) held
nvcc until its 600 s timeout, and a huge sparse header is read to its end. So the build checks the
whole folder first, without following links (filenames.candidate_symlinks reports those), and each
entry that is neither is one line of the build's errors, naming it and what to do.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cuda_agent.filenames import shown as display
from cuda_agent.untrusted_files import SOURCE_CAP, kind_of

MAX_ENTRIES = 10_000  # files and folders of kernels/: a few dozen in any real candidate


def tree_problems(kernel_dir: Path, root: Path, cap: int = SOURCE_CAP) -> list[str]:
    """One line per entry below kernel_dir (shown relative to root, e.g. kernels/impl.h) that is not a
    regular file or a folder, or is a file over `cap` bytes; [] when kernels/ is fit to compile."""
    problems: list[str] = []
    stack, seen = [Path(kernel_dir)], 0
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError as e:
            problems.append(f"{_shown(folder, root)} cannot be listed ({e.strerror}): delete it with delete_file")
            continue
        for entry in entries:
            seen += 1
            if seen > MAX_ENTRIES:
                return [
                    *problems,
                    f"kernels/ holds over {MAX_ENTRIES} files and folders: delete what the build does not need",
                ]
            path = Path(entry.path)
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue  # gone since it was listed
            if stat.S_ISLNK(st.st_mode):
                continue  # candidate_symlinks' finding
            if stat.S_ISDIR(st.st_mode):
                stack.append(path)
            elif not stat.S_ISREG(st.st_mode):
                problems.append(
                    f"{_shown(path, root)} is not a regular file ({kind_of(st.st_mode)}): not read; nvcc "
                    "would wait on it: delete it with delete_file (kernels/ holds files and folders only)"
                )
            elif st.st_size > cap:
                problems.append(
                    f"{_shown(path, root)} is {st.st_size / (1 << 20):.1f} MiB, over the "
                    f"{cap / (1 << 20):.1f} MiB cap of a file in kernels/: delete it with delete_file"
                )
    return problems


def tree_names(kernel_dir: Path) -> list[str]:
    """Every file and folder below kernel_dir, as sorted relative paths (links not followed). A
    compile depends on these names as well as on the bytes of what it read: `__has_include`, or a
    header that a same-named one in a nearer folder would shadow, reads nothing when it finds
    nothing, so nvcc's dependency list cannot show that a file added later changes the build."""
    names: list[str] = []
    for folder, dirs, files in os.walk(kernel_dir):
        rel = Path(folder).relative_to(kernel_dir)
        names += [(rel / n).as_posix() + "/" for n in dirs] + [(rel / n).as_posix() for n in files]
    return sorted(names)


def _shown(path: Path, root: Path) -> str:
    try:
        return display(path.relative_to(root).as_posix())
    except ValueError:
        return str(path)
