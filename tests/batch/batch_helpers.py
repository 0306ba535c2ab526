"""Helpers for the batch tests: tiny task folders on CPU (host-only kernels, real nvcc and workers,
a scripted model per task), laid out like a KernelBench checkout (level1/, level2/), with tasks
that crash their process (SEGFAULT), hang (HANG) or have no `Model` class (NO_MODEL)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

CPU_TASK = Path(__file__).resolve().parents[1] / "harness" / "cpu_task"
TASK_SRC = (CPU_TASK / "model.py").read_text()
SEGFAULT = "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n" + TASK_SRC
HANG = "import time\ntime.sleep(3600)\n" + TASK_SRC
NO_MODEL = "import torch\n\n\nclass Other(torch.nn.Module):\n    pass\n"
# small timing (few, short batches); 2 correctness sets
EVAL_CONFIG = {
    "n_sets": 2,
    "timeout_s": 60,
    "timing": {"warmup_ms": 5, "min_batches": 2, "max_batches": 3, "budget_ms": 30},
}


def call(name: str, **args) -> dict:
    return {
        "content": f"calling {name}",
        "cost": 0.01,
        "usage": {"prompt_tokens": 100, "completion_tokens": 10},
        "tool_calls": [{"name": name, "arguments": args}],
    }


def honest_script(benchmarks: int = 1) -> list[dict]:
    return [
        call(
            "edit_file",
            mode="create",
            path="kernels/scale_add.cu",
            file_text=(CPU_TASK / "honest" / "kernels" / "scale_add.cu").read_text(),
        ),
        call(
            "edit_file",
            mode="create",
            path="model_new.py",
            overwrite=True,
            file_text=(CPU_TASK / "honest" / "model_new.py").read_text(),
        ),
        *[call("benchmark") for _ in range(benchmarks)],
        call("finish", summary="host loop"),
    ]


def make_tasks(root: Path, files: dict[str, str], scripts: dict[str, list] | None = None) -> tuple[Path, Path]:
    """Task files {id: source} under root/tasks and scripts {id: responses} under root/scripts."""
    for task_id, src in files.items():
        path = root / "tasks" / f"{task_id}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(src)
        script = (scripts or {}).get(task_id, honest_script())
        spath = root / "scripts" / f"{task_id}.json"
        spath.parent.mkdir(parents=True, exist_ok=True)
        spath.write_text(json.dumps(script))
    (root / "eval.json").write_text(json.dumps(EVAL_CONFIG))
    return root / "tasks", root / "scripts"


def cache_dir(tmp_path_factory) -> Path:
    """The session's build and baseline cache (tests/conftest.py), so nvcc builds each kernel once."""
    return Path(os.environ.get("CUDA_AGENT_TEST_CACHE", tmp_path_factory.getbasetemp() / "cuda-agent-cache"))


def command(*args: str) -> list[str]:
    return [sys.executable, "-m", "cuda_agent.cli", *args]


def cli(*args: str, cache: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    """The real command in its own process, as a user runs it."""
    return subprocess.run(
        command(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "CUDA_AGENT_CACHE": str(cache)},
    )


def batch_args(tasks: Path, scripts: Path, out: Path, *extra: str) -> list[str]:
    return [
        "batch",
        str(tasks),
        "--out",
        str(out),
        "--script",
        str(scripts),
        "--device",
        "cpu",
        "--no-compile-baseline",
        "--eval-config",
        str(tasks.parent / "eval.json"),
        *extra,
    ]
