"""nvcc runs in the jail. It reads what the candidate's sources name: a `#include` whose path a
macro computes (no static guard sees it) or an assembler `.incbin` can name any file, and the
lines of what it read come back in the compile errors the model reads (a key file in the home
folder), or its bytes land in the library. Jailed, nvcc sees the candidate's kernels/ (read-only),
the toolkit, the system folders and one empty folder for its output, with the jail's environment
(no API keys). Without bubblewrap (or with CUDA_AGENT_NO_SANDBOX=1) it runs unjailed but
still with that environment; the evaluator refuses to judge there unless told --no-sandbox.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from cuda_agent.jail import Jail, jail_problem, kill_group, sandbox_enabled
from cuda_agent.kernels.depfile import TARGET
from cuda_agent.untrusted_files import UnreadableFile, open_regular


def run_nvcc(
    argv: list[str],
    *,
    target: Path,
    cwd: Path,
    timeout: float,
    what: str,
    mode: int | None = None,
    depfile: Path | None = None,
) -> tuple[str, bool]:
    """(stdout and stderr, succeeded) of `argv` (without -o): nvcc writes into an empty folder of its
    own beside `target` (the one folder it may write), and what it made replaces `target` on
    success (chmod `mode` first, when given). `depfile`: nvcc also lists every file it read there
    (a make rule whose target is depfile.TARGET)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    out = Path(tempfile.mkdtemp(dir=target.parent, prefix=".nvcc-"))
    made = out / target.name
    deps = ["-MD", "-MF", str(out / "deps.d"), "-MT", TARGET] if depfile is not None else []
    try:
        jail = Jail(
            readable=[*_flag_dirs(argv), cwd, Path(argv[0]).resolve().parent.parent],
            writable=[out],
            cwd=cwd,
            enabled=sandbox_enabled() and jail_problem() is None,
        )
        proc = jail.popen(
            [*argv, *deps, "-o", str(made)], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        try:
            output, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            kill_group(proc.pid)
            proc.wait()
            return f"nvcc error : {what} took over {timeout:.0f} s", False
        if proc.returncode != 0:
            return output, False
        if (odd := _not_regular(out, made.name)) is not None:  # moved into the cache, read by the parent later
            return f"nvcc error : {what}: {odd}", False
        if mode is not None:
            os.chmod(made, mode)
        if depfile is not None:
            if not (out / "deps.d").is_file():
                return f"nvcc error : {what} wrote no list of the files it read", False
            if (odd := _not_regular(out, "deps.d")) is not None:
                return f"nvcc error : {what}: {odd}", False
            os.replace(out / "deps.d", depfile)
        os.replace(made, target)
        return output, True
    finally:
        shutil.rmtree(out, ignore_errors=True)


def _not_regular(out: Path, name: str) -> str | None:
    """Why what the jailed nvcc left at out/name is not a regular file (untrusted_files), or None."""
    try:
        os.close(open_regular(out / name, root=out, shown=name))
    except UnreadableFile as e:
        return str(e)
    return None


def _flag_dirs(argv: list[str]) -> list[Path]:
    """The folders the harness's own flags name (-I, -isystem, -L: build_kernels' extra_flags, never
    the candidate's): the jailed nvcc sees those too."""
    dirs = [a[2:] for a in argv if a.startswith(("-I", "-L")) and len(a) > 2]
    dirs += [b for a, b in zip(argv, argv[1:]) if a in ("-I", "-L", "-isystem")]
    return [Path(d) for d in dirs if Path(d).is_absolute() and Path(d).is_dir()]
