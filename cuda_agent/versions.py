"""The software that produced a run (cuda-agent, python, torch, nvcc), for the trajectory's header."""

from __future__ import annotations

import contextlib
import platform
import re
from importlib import metadata


def software_versions() -> dict[str, str]:
    """What produced the run; nvcc only when it answers (its version is cached per process)."""
    from cuda_agent import __version__

    out = {"cuda-agent": __version__, "python": platform.python_version()}
    with contextlib.suppress(metadata.PackageNotFoundError):
        out["torch"] = metadata.version("torch")
    with contextlib.suppress(Exception):  # no toolkit here: the header says nothing rather than failing the run
        from cuda_agent.kernels.toolkit import find_nvcc, nvcc_version

        if found := re.search(r"release ([\d.]+)", nvcc_version(find_nvcc())):
            out["nvcc"] = found.group(1)
    return out
