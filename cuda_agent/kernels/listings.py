"""PTX and SASS of one kernel, for a model that wants to see what the compiler made of its code
(are the loads 16 bytes wide, did an array go to local memory, are the FMAs there)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from cuda_agent.kernels.source_tree import tree_problems
from cuda_agent.kernels.toolkit import find_nvcc

_MAX_LINES = 400


def _pick(sections: dict[str, str], kernel: str | None) -> str:
    if not sections:
        return "no kernels found in the output"
    names = list(sections)
    chosen = [n for n in names if kernel and kernel in n] if kernel else names[:1]
    if not chosen:
        return f"no kernel matching {kernel!r}; kernels: {', '.join(names)}"
    lines = sections[chosen[0]].splitlines()
    more = f"\n[... {len(lines) - _MAX_LINES} more lines]" if len(lines) > _MAX_LINES else ""
    others = f" (other kernels: {', '.join(n for n in names if n != chosen[0])})" if len(names) > 1 else ""
    return f"{chosen[0]}{others}\n" + "\n".join(lines[:_MAX_LINES]) + more


def ptx_of(build, kernel_dir: Path, kernel: str | None, arch: str = "sm_90a") -> str:
    """PTX of the kernel whose (mangled) name contains `kernel`, by nvcc -ptx of each source, jailed
    as the build's nvcc is (nvcc_run.py), over a kernels/ that holds only what the build may read."""
    from cuda_agent.kernels.nvcc_run import run_nvcc

    kernel_dir = Path(kernel_dir).resolve()
    if odd := tree_problems(kernel_dir, kernel_dir.parent):  # a FIFO put there since the build: never waited on
        return "\n".join(odd)
    nvcc = find_nvcc()
    sections: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for src in sorted(p for p in kernel_dir.glob("*.cu") if p.is_file() and not p.is_symlink()):
            out = Path(tmp) / (src.stem + ".ptx")
            _, ok = run_nvcc(
                [
                    str(nvcc),
                    "-ptx",
                    "-O3",
                    "-std=c++17",
                    f"-arch={arch.replace('sm_', 'compute_')}",
                    "-I",
                    str(kernel_dir),
                    str(src),
                ],
                target=out,
                cwd=kernel_dir,
                timeout=120,
                what=f"nvcc -ptx of {src.name}",
            )
            if not ok:
                return f"nvcc -ptx failed for {src.name}: compile first and fix its errors"
            for m in re.finditer(r"^\.(?:visible )?\.entry (\S+)\((.*?)^}", out.read_text(), re.S | re.M):
                sections[m.group(1)] = m.group(0)
    return _pick(sections, kernel)


def sass_of(build, kernel_dir: Path, kernel: str | None) -> str:
    """SASS of a kernel in the built library, by cuobjdump (part of the CUDA toolkit)."""
    cuobjdump = shutil.which("cuobjdump") or str(find_nvcc().parent / "cuobjdump")
    if not Path(cuobjdump).exists() and not shutil.which(cuobjdump):
        return "cuobjdump is not installed here (it comes with the full CUDA toolkit); ask for show=ptx instead"
    proc = subprocess.run([cuobjdump, "--dump-sass", str(build.lib_path)], capture_output=True, text=True, timeout=120)
    if proc.returncode != 0:
        return f"cuobjdump failed: {proc.stderr.strip()[:300]}"
    sections = {
        m.group(1): m.group(0)
        for m in re.finditer(r"Function : (\S+)\n(.*?)(?=\n\s*Function : |\Z)", proc.stdout, re.S)
    }
    return _pick(sections, kernel)
