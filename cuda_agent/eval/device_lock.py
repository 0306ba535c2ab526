"""One timing at a time per GPU, across processes: an fcntl lock file per device.

Builds and correctness checks may overlap on a GPU; measurements may not, or each would slow
the other down and both numbers would be wrong.
"""

from __future__ import annotations

import fcntl
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def nvml_index(device: str) -> int:
    """torch's `cuda:N` -> NVML's index, through CUDA_VISIBLE_DEVICES when it renumbers GPUs."""
    n = int(device.split(":", 1)[1]) if ":" in device else 0
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if n < len(visible) and visible[n].isdigit():
        return int(visible[n])
    return n


@contextmanager
def device_lock(lock_dir: Path, device: str) -> Iterator[None]:
    lock_dir.mkdir(parents=True, exist_ok=True)
    name = f"gpu{nvml_index(device)}" if device.startswith("cuda") else "cpu"
    with open(lock_dir / f"{name}.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
