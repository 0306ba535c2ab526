"""What `cuda-agent doctor` looks up about this machine: the driver and its GPUs (NVML), the CUDA
tools the build would use, torch's CUDA, and the model to check a key for. pynvml and torch are
imported when first asked for, so importing this module stays fast."""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

# The last place nvcc and friends are looked for; a module constant so tests can move it.
DEFAULT_CUDA_BIN = Path("/usr/local/cuda/bin")


@dataclass
class Gpu:
    name: str
    memory_gib: float
    cc: tuple[int, int]

    @property
    def arch(self) -> str:
        return f"sm_{self.cc[0]}{self.cc[1]}"


@dataclass
class Driver:
    version: str
    cuda: tuple[int, int]  # the newest CUDA this driver supports
    gpus: list[Gpu]


@dataclass
class Tool:
    path: Path
    source: str  # where it was found: "CUDA_HOME/bin", "CUDA_PATH/bin", "PATH" or DEFAULT_CUDA_BIN


def find_tool(name: str) -> Tool | None:
    """Where the build looks (kernels/toolkit.find_cuda_tool), so doctor reports the nvcc it uses."""
    from cuda_agent.kernels.toolkit import find_cuda_tool

    found = find_cuda_tool(name, DEFAULT_CUDA_BIN)
    return Tool(*found) if found else None


def run_tool(*cmd: str | Path) -> str:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=60)
    return done.stdout + done.stderr


def major_minor(text: str, pattern: str) -> tuple[int, int] | None:
    m = re.search(pattern, text)
    return (int(m.group(1)), int(m.group(2))) if m else None


class Facts:
    """What several checks need, looked up once per run (exceptions are not cached)."""

    def __init__(self, model: str | None, api_base: str | None):
        self.model = model or os.environ.get("CUDA_AGENT_MODEL") or None
        self.api_base = api_base or os.environ.get("CUDA_AGENT_API_BASE") or None

    @cached_property
    def driver(self) -> Driver | str:
        """The driver and its GPUs, or NVML's reason for having none."""
        import pynvml

        try:
            pynvml.nvmlInit()
        except Exception as e:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
            return str(e) or type(e).__name__
        try:
            cuda = pynvml.nvmlSystemGetCudaDriverVersion()  # e.g. 13000 for 13.0
            gpus = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                mem = pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**30
                cc = pynvml.nvmlDeviceGetCudaComputeCapability(h)
                gpus.append(Gpu(pynvml.nvmlDeviceGetName(h), mem, (cc[0], cc[1])))
            return Driver(pynvml.nvmlSystemGetDriverVersion(), (cuda // 1000, cuda % 1000 // 10), gpus)
        finally:
            pynvml.nvmlShutdown()

    @cached_property
    def nvcc(self) -> Tool | None:
        return find_tool("nvcc")

    @cached_property
    def nvcc_version(self) -> tuple[int, int] | None:
        return self.nvcc and major_minor(run_tool(self.nvcc.path, "--version"), r"release (\d+)\.(\d+)")

    @cached_property
    def torch_cuda(self) -> tuple[int, int] | None:
        import torch

        return major_minor(torch.version.cuda or "", r"(\d+)\.(\d+)")
