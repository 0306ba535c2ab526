"""The CUDA toolkit as the build sees it: where nvcc is, which version, which GPU arch.

No torch here: importing it costs seconds and the build must not.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from pathlib import Path


class ToolkitError(RuntimeError):
    """The CUDA toolkit cannot be used (nvcc missing or broken)."""


DEFAULT_CUDA_BIN = Path("/usr/local/cuda/bin")


def find_cuda_tool(name: str, default_bin: Path | None = None) -> tuple[Path, str] | None:
    """A CUDA toolkit program and where it was found: CUDA_HOME/bin (the user chose it), then
    CUDA_PATH/bin, then PATH, then `default_bin`. The build, doctor and the profilers all look here."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        home = os.environ.get(var)
        if home and (p := Path(home) / "bin" / name).is_file() and os.access(p, os.X_OK):
            return p, f"{var}/bin"
    if on_path := shutil.which(name):
        return Path(on_path), "PATH"
    default_bin = default_bin or DEFAULT_CUDA_BIN  # read now, so tests can point it elsewhere
    if (p := default_bin / name).is_file() and os.access(p, os.X_OK):
        return p, str(default_bin)
    return None


def find_nvcc() -> Path:
    """nvcc from CUDA_HOME/bin, CUDA_PATH/bin, PATH, then /usr/local/cuda/bin."""
    found = find_cuda_tool("nvcc")
    if found is not None:
        return found[0]
    raise ToolkitError("nvcc not found: install the CUDA toolkit, or set CUDA_HOME (or PATH) to include its bin/")


def nvcc_version(nvcc: Path) -> str:
    """nvcc's full version text; asked once per process per (path, mtime)."""
    stat = nvcc.stat()
    return _nvcc_version(str(nvcc), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _nvcc_version(nvcc: str, mtime_ns: int, size: int) -> str:
    try:
        proc = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolkitError(f"{nvcc} --version failed ({exc}); check the CUDA toolkit install") from exc
    if proc.returncode != 0:
        raise ToolkitError(f"{nvcc} --version exited {proc.returncode}; check the CUDA toolkit install")
    return proc.stdout.strip()


def system_include_dirs(nvcc: Path) -> tuple[Path, ...]:
    """The folders whose headers are the toolkit's or the system's, not the candidate's: nvcc's
    TOP (the toolkit it really runs, behind any wrapper script) and the `#include <...>` search
    list of the host compiler it calls; asked once per process per (path, mtime)."""
    stat = nvcc.stat()
    return _system_include_dirs(str(nvcc), stat.st_mtime_ns, stat.st_size)


@functools.lru_cache(maxsize=8)
def _system_include_dirs(nvcc: str, mtime_ns: int, size: int) -> tuple[Path, ...]:
    fix = "check the CUDA toolkit and host compiler install"
    dry = _run([nvcc, "--dryrun", "-x", "cu", "-c", "/dev/null", "-o", "/dev/null"], f"{nvcc} --dryrun", fix)
    top = next((line.split("=", 1)[1].strip() for line in dry.splitlines() if line.startswith("#$ TOP=")), None)
    host = next(
        (
            line.split()[1]
            for line in dry.splitlines()
            if line.startswith("#$ ") and " -E " in line and "-x c++" in line
        ),
        None,
    )
    if top is None or host is None:
        raise ToolkitError(f"{nvcc} --dryrun named no toolkit folder or host compiler; {fix}")
    listing = _run([host, "-x", "c++", "-E", "-v", "/dev/null", "-o", "/dev/null"], f"{host} -E -v", fix)
    lines = listing.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("#include <...> search starts here")), None)
    dirs = []
    for line in lines[start + 1 :] if start is not None else []:
        if not line.startswith(" "):
            break
        dirs.append(Path(line.split(" (framework directory)")[0].strip()))
    if not dirs:
        raise ToolkitError(f"{host} -E -v listed no system include folders; {fix}")
    return (Path(top).resolve(), *(d.resolve() for d in dirs))


def _run(cmd: list[str], what: str, fix: str) -> str:
    """stdout and stderr of a toolkit query, or a ToolkitError saying what failed."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolkitError(f"{what} failed ({exc}); {fix}") from exc
    if proc.returncode != 0:
        raise ToolkitError(f"{what} exited {proc.returncode}; {fix}")
    return proc.stdout + proc.stderr


# Arch-specific ("a") targets unlock wgmma/TMA on Hopper and tcgen05 on Blackwell.
_ARCH_BY_MAJOR_MINOR = {(10, 0): "sm_100a", (12, 0): "sm_120a"}
DEFAULT_ARCH = "sm_90a"


def arch_for_capability(major: int, minor: int) -> str:
    if major == 9:
        return "sm_90a"
    return _ARCH_BY_MAJOR_MINOR.get((major, minor), f"sm_{major}{minor}")


@functools.lru_cache(maxsize=1)
def detect_arch() -> str:
    """The arch of GPU 0 via NVML; sm_90a when there is no GPU or driver."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(0)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(handle)
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # no library, no driver, no device: all mean "build for the default"
        return DEFAULT_ARCH
    return arch_for_capability(int(major), int(minor))


def gencode_flags(arch: str) -> list[str]:
    """sm_90a -> ['-gencode', 'arch=compute_90a,code=sm_90a']; compute_XY embeds PTX only."""
    if arch.startswith("sm_"):
        number = arch[3:]
        return ["-gencode", f"arch=compute_{number},code={arch}"]
    if arch.startswith("compute_"):
        return ["-gencode", f"arch={arch},code={arch}"]
    raise ToolkitError(f"arch {arch!r} is not understood: use the form sm_90a or sm_80")


def demangle(names: list[str], *, params: bool = True) -> dict[str, str]:
    """Itanium C++ names -> readable ones (c++filt); a name that cannot be demangled maps to itself.

    params=False drops the parameter list: `_Z3redILi128EEvPKfPfi` -> `red<128>`.
    """
    mangled = sorted({n for n in names if n.startswith("_Z")})
    result = {n: n for n in names}
    tool = shutil.which("c++filt")
    if not mangled or tool is None:
        return result
    try:
        cmd = [tool] if params else [tool, "-p"]
        proc = subprocess.run(cmd, input="\n".join(mangled), capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return result
    readable = proc.stdout.splitlines()
    if proc.returncode == 0 and len(readable) == len(mangled):
        result.update(zip(mangled, readable))
    return result
