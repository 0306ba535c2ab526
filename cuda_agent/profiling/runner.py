"""Run one wrapped forward of a candidate: find the wrapping tool, build its kernels first (so the
tool never wraps nvcc), and run `tool ... python -m cuda_agent.eval.single_run` with a time limit,
in its own process group, with no credentials in its environment."""

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

from cuda_agent.eval.sandbox import scrubbed_env

# where each tool lives when it is not next to nvcc or on PATH (standalone installs)
EXTRA_PLACES = {
    "ncu": ["/opt/nvidia/nsight-compute/*/ncu", "/usr/local/cuda/nsight-compute*/ncu"],
    "compute-sanitizer": ["/usr/local/cuda/compute-sanitizer/compute-sanitizer"],
}


def find_profiler(name: str, override: str | None = None) -> Path | None:
    """`override` (a setting) if given, else CUDA_HOME/bin, PATH, /usr/local/cuda/bin, then the
    tool's own install folders (newest version first)."""
    from cuda_agent.doctor import find_tool

    if override:
        p = Path(override)
        return p if p.is_file() and os.access(p, os.X_OK) else None
    found = find_tool(name)
    if found is not None:
        return found.path
    for pattern in EXTRA_PLACES.get(name, []):
        for hit in sorted(glob.glob(pattern), reverse=True):
            if os.access(hit, os.X_OK):
                return Path(hit)
    return None


def single_run_argv(task_ref: str, candidate: Path, warmup: int = 1) -> list[str]:
    """The wrapped program: one forward of the candidate inside the `candidate_forward` NVTX range."""
    return [sys.executable, "-m", "cuda_agent.eval.single_run", task_ref, str(candidate),
            "--warmup", str(warmup)]


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


def run_wrapped(argv: list[str], *, cwd: Path, timeout: float, env: dict[str, str] | None = None) -> Wrapped:
    """Run argv; stdout and stderr go to files (ncu's CSV can be large and must not be cut), the
    whole process group is killed on timeout and whatever it left behind is killed at the end."""
    full_env = scrubbed_env(os.environ)
    full_env.update(env or {})
    t0 = time.perf_counter()
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out, \
            tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as err:
        proc = subprocess.Popen(argv, cwd=cwd, env=full_env, stdin=subprocess.DEVNULL, stdout=out,
                                stderr=err, start_new_session=True)
        try:
            rc, timed_out = proc.wait(timeout=timeout), False
        except subprocess.TimeoutExpired:
            rc, timed_out = -signal.SIGKILL, True
        _kill_group(proc.pid)
        proc.wait()
        out.seek(0)
        err.seek(0)
        return Wrapped(rc, out.read(), err.read(), timed_out, time.perf_counter() - t0)


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


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
