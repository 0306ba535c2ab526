"""Candidates of tests/harness/cpu_task made for a test: the honest one slowed down."""

from __future__ import annotations

import shutil
from pathlib import Path

TASK = Path(__file__).resolve().parents[1] / "harness" / "cpu_task"


def slow_honest(root: Path) -> Path:
    """The honest candidate made ~50x slower (still exact), in root/slow, so its reward is 1
    (correct, not faster than eager) whatever the CPU timing noise. Made once per root."""
    cand = Path(root) / "slow"
    if not cand.exists():
        shutil.copytree(TASK / "honest", cand, ignore=shutil.ignore_patterns("__pycache__"))
        cu = cand / "kernels" / "scale_add.cu"
        cu.write_text(
            cu.read_text().replace(
                "for (int64_t i = 0; i < n; ++i) out[i] = alpha * x[i] + y[i];",
                (
                    "for (volatile int r = 0; r < 50; ++r)\n"
                    "        for (int64_t i = 0; i < n; ++i) out[i] = alpha * x[i] + y[i];"
                ),
            )
        )
    return cand
