"""Run one wrapped forward of a candidate: find the wrapping tool, build its kernels first (so the
tool never wraps nvcc), and run `tool ... python -m cuda_agent.eval.single_run` with a time limit,
in the jail (cuda_agent/jail.py): the GPU, read-only views of the task, the candidate and its
build, an environment from the allowlist, and everything it started killed when it ends."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from cuda_agent.jail import Jail, kill_group, sandbox_enabled
from cuda_agent.kernels.toolkit import find_cuda_tool
from cuda_agent.run_folder import RunFolder
from cuda_agent.untrusted_files import read_fd

MAX_CAPTURE = 64 << 20  # bytes of a wrapped run's stdout (or stderr) read back: ncu's CSV of one forward fits
# where each tool lives when it is not next to nvcc or on PATH (standalone installs)
EXTRA_PLACES = {
    "ncu": ["/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda/nsight-compute*/ncu"],
    "compute-sanitizer": ["/usr/local/cuda/compute-sanitizer/compute-sanitizer"],
}


def find_profiler(name: str, override: str | None = None) -> Path | None:
    """`override` (a setting), else CUDA_HOME/bin, PATH, /usr/local/cuda/bin, then install folders (newest first)."""
    if override:
        p = Path(override)
        return p if p.is_file() and os.access(p, os.X_OK) else None
    if (found := find_cuda_tool(name)) is not None:  # where the build finds nvcc
        return found[0]
    hits = (hit for pattern in EXTRA_PLACES.get(name, []) for hit in sorted(glob.glob(pattern), reverse=True))
    return next((Path(hit) for hit in hits if os.access(hit, os.X_OK)), None)


def tool_installs(tool: str) -> list[Path]:
    """The folders a profiler needs to read besides its own: CUDA's `bin/ncu` is a wrapper that runs
    the real tool from an install folder (/opt/nvidia/nsight-compute/<version>, or
    <cuda>/nsight-compute-<version>); the jail must show them or ncu says it is not installed."""
    p = Path(tool)
    found = [p.resolve().parent] if p.is_absolute() and p.exists() else []
    return found + [
        Path(d).resolve()
        for pattern in EXTRA_PLACES.get(p.name, [])
        for d in glob.glob(os.path.dirname(pattern))
        if os.path.isdir(d)
    ]


def single_run_argv(task_ref: str, candidate: Path, warmup: int = 1) -> list[str]:
    """The wrapped program: one forward of the candidate inside the `candidate_forward` NVTX range."""
    return [sys.executable, "-m", "cuda_agent.eval.single_run", task_ref, str(candidate), "--warmup", str(warmup)]


@dataclass
class Wrapped:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool
    seconds: float

    @property
    def text(self) -> str:
        return self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr


def run_wrapped(
    argv: list[str], *, cwd: Path, timeout: float, env: dict[str, str] | None = None, sandbox: bool | None = None
) -> Wrapped:
    """Run argv in the jail; stdout and stderr go to files (ncu's CSV can be large and must not be
    cut), the whole jail is killed on timeout and whatever it left behind is killed at the end.
    What the command may read: every existing path its arguments and `env` name (the task, the
    built kernels, the tool itself), read-only; it may write its working folder (the workspace)."""
    env = dict(env or {})
    cwd = Path(cwd).resolve()
    named = [*argv, *env.values(), *map(str, tool_installs(argv[0]))]
    readable = [p for p in _paths_named(named, cwd) if p != cwd and cwd not in p.parents]
    # the workspace (cwd) is the model's own folder, as in the shell; nothing else is writable
    jail = Jail(
        readable=readable,
        writable=[cwd],
        gpu=True,
        cwd=cwd,
        env=env,
        hidden=[RunFolder.around(cwd).path],
        enabled=sandbox_enabled() if sandbox is None else sandbox,
    )
    t0 = time.perf_counter()
    # files the parent opened before the run (untrusted_files): read back from the start, capped
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = jail.popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err)
        try:
            rc, timed_out = proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            rc, timed_out = -signal.SIGKILL, True
        kill_group(proc.pid)
        proc.wait()
        return Wrapped(rc, _captured(out), _captured(err), timed_out, time.perf_counter() - t0)


def _captured(f) -> str:
    """What the run wrote to `f`, at most MAX_CAPTURE bytes of it (a candidate can print gigabytes)."""
    os.lseek(f.fileno(), 0, os.SEEK_SET)
    data = read_fd(f.fileno(), MAX_CAPTURE + 1)
    cut = f"\n[output cut at {MAX_CAPTURE >> 20} MiB]" if len(data) > MAX_CAPTURE else ""
    text = data[:MAX_CAPTURE].decode("utf-8", "replace")
    return text.replace("\r\n", "\n").replace("\r", "\n") + cut  # newlines as a text-mode read gave them


def _paths_named(values: list[str], cwd: Path) -> list[Path]:
    """Existing absolute paths among `values` (files as their folder), plus cwd; none twice."""
    found: list[Path] = [cwd]
    for v in values:
        p = Path(str(v).split("::")[0])
        if p.is_absolute() and p.exists():
            p = p.resolve()
            found.append(p if p.is_dir() else p.parent)
    out: list[Path] = []
    for p in sorted(set(found), key=lambda q: len(q.parts)):
        if not any(q == p or q in p.parents for q in out):
            out.append(p)
    return out


def build_for_tools(candidate: Path, cache_dir: Path, arch: str | None):
    """Build kernels/*.cu with -lineinfo (so reports name source lines); the result's out_dir goes
    to the wrapped run as CUDA_AGENT_KERNELS. Returns the BuildResult (ok=False on errors)."""
    from cuda_agent.kernels.build import build_kernels

    return build_kernels(candidate / "kernels", cache_dir / "build", arch=arch, lineinfo=True)


def tail(text: str, lines: int = 12) -> str:
    kept = [line for line in text.strip().splitlines() if line.strip()]
    return "\n".join(kept[-lines:])


def short_name(kernel: str) -> str:
    """'void ln_rows_reg<(int)2>(const float *, int)' -> 'ln_rows_reg<(int)2>': the parameter list
    (the last balanced parenthesis group) and a leading return type go."""
    name = kernel.strip()
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i].rstrip() or name
                break
    return name[5:] if name.startswith("void ") else name
