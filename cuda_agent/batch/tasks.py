"""The tasks of a folder: every `*.py` below it, KernelBench style (class `Model`, get_inputs,
get_init_inputs), so a KernelBench checkout's level folders work as they are.

Skipped: sidecars (`*.inputs.py`), `__init__.py`, and names starting with `_` or `.` (files and
folders: `_rejected/` from `tasks import`, `__pycache__`). A task's id is its path below the folder
without `.py` (`level1/19_ReLU`); its level is its first folder (`level1`), or None at the top.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel


class TaskEntry(BaseModel):
    id: str
    path: Path
    level: str | None = None


class TaskDirError(ValueError):
    """A task folder or selection that cannot be used; says what to do."""


def discover(task_dir: Path, pattern: str | None = None, limit: int | None = None) -> list[TaskEntry]:
    """The tasks below `task_dir`, sorted naturally (2_x before 10_x), filtered by a regex searched
    in the task id, at most `limit` of them."""
    task_dir = Path(task_dir)
    if not task_dir.is_dir():
        raise TaskDirError(f"task folder not found: {task_dir} (give a folder of task .py files, e.g. KernelBench/level1)")
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error as e:
        raise TaskDirError(f"--filter {pattern!r} is not a regular expression ({e}); e.g. --filter 'level1/.*ReLU'") from None
    found = []
    for path in task_dir.rglob("*.py"):
        rel = path.relative_to(task_dir)
        if any(p.startswith(("_", ".")) for p in rel.parts) or path.name.endswith(".inputs.py"):
            continue
        task_id = rel.with_suffix("").as_posix()
        if regex is None or regex.search(task_id):
            found.append(TaskEntry(id=task_id, path=path.resolve(), level=rel.parts[0] if len(rel.parts) > 1 else None))
    found.sort(key=lambda t: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", t.id)])  # 2_x before 10_x
    if not found:
        what = f" matching {pattern!r}" if pattern else ""
        raise TaskDirError(f"no task files{what} in {task_dir}: it needs *.py files with a Model class "
                           "(a KernelBench level folder, or `cuda-agent tasks import` output)")
    return found[:limit] if limit else found


def check_loads(entry: TaskEntry) -> str | None:
    """Why the task cannot be loaded (import error, no Model class, no get_inputs), or None."""
    from cuda_agent.task import TaskError, load_task

    try:
        load_task(str(entry.path), module_name="cuda_agent_task_check")
    except TaskError as e:
        return str(e)
    except Exception as e:  # a task's own code failing in an unexpected way is still its problem
        return f"{type(e).__name__}: {e}"
    return None
