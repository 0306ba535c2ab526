"""The tasks of a folder: every `*.py` below it, KernelBench style (class `Model`, get_inputs,
get_init_inputs), so a KernelBench checkout's level folders work as they are; and where a task's
candidate is in a folder of candidates (`batch --eval-only`).

Skipped: sidecars (`*.inputs.py`), `__init__.py`, names starting with `_` or `.` (files and
folders: `_rejected/` from `tasks import`, `__pycache__`), and candidate folders (any folder with a
`model_new.py`: a candidate is not a task). A task's id is its path below the folder without `.py`
(`level1/19_ReLU`), except a task folder's `model.py`, whose id is its folder (`examples/`' layout:
`layernorm/model.py` is the task `layernorm`, with its candidate in `layernorm/candidate/`). Its
level is its id's first folder (`level1`), or None at the top.
"""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

TASK_FILE = "model.py"  # in a folder of its own: that folder is the task (examples/layernorm/model.py)
CANDIDATE_FILE = "model_new.py"  # a folder holding it is a candidate, not tasks


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
        raise TaskDirError(
            f"task folder not found: {task_dir} (give a folder of task .py files, e.g. KernelBench/level1)"
        )
    try:
        regex = re.compile(pattern) if pattern else None
    except re.error as e:
        raise TaskDirError(
            f"--filter {pattern!r} is not a regular expression ({e}); e.g. --filter 'level1/.*ReLU'"
        ) from None
    found = []
    for path in task_dir.rglob("*.py"):
        rel = path.relative_to(task_dir)
        if (
            any(p.startswith(("_", ".")) for p in rel.parts)
            or path.name.endswith(".inputs.py")
            or _in_candidate_folder(task_dir, rel)
        ):
            continue
        task_id = _task_id(rel)
        if regex is None or regex.search(task_id):
            parts = task_id.split("/")
            found.append(TaskEntry(id=task_id, path=path.resolve(), level=parts[0] if len(parts) > 1 else None))
    _check_distinct(found, task_dir)
    found.sort(key=lambda t: [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", t.id)])  # 2_x before 10_x
    if not found:
        what = f" matching {pattern!r}" if pattern else ""
        raise TaskDirError(
            f"no task files{what} in {task_dir}: it needs *.py files with a Model class "
            "(a KernelBench level folder, or `cuda-agent tasks import` output)"
        )
    return found[:limit] if limit else found


def _task_id(rel: Path) -> str:
    """`level1/19_ReLU.py` -> level1/19_ReLU; a task folder's `layernorm/model.py` -> layernorm."""
    if rel.name == TASK_FILE and len(rel.parts) > 1:
        return rel.parent.as_posix()
    return rel.with_suffix("").as_posix()


def _in_candidate_folder(task_dir: Path, rel: Path) -> bool:
    """Whether a folder on the way to `rel` (below task_dir) is a candidate: it holds model_new.py."""
    folder = task_dir
    for part in rel.parts:
        if (folder / CANDIDATE_FILE).is_file():
            return True
        folder = folder / part
    return False


def _check_distinct(found: list[TaskEntry], task_dir: Path) -> None:
    """Every task gets a run folder of its own, RUN_DIR/tasks/<id>: no id may be another's folder
    (`a.py` beside `a/b.py`, or a task folder's model.py beside another task file in it)."""
    ids = {e.id for e in found}
    for e in found:
        parents = [p.as_posix() for p in Path(e.id).parents if p != Path(".")]
        if clash := next((p for p in parents if p in ids), None):
            raise TaskDirError(
                f"tasks {clash!r} and {e.id!r} in {task_dir}: one's run folder would lie inside the "
                "other's; rename one of them, or --filter one of them out"
            )


def candidate_folder(candidates: Path, entry: TaskEntry) -> Path | None:
    """The folder holding `entry`'s candidate below `candidates`: <id>/ (model_new.py + kernels/), or
    <id>/candidate/ (examples/' layout, whose candidates folder is the task folder itself); None: neither."""
    for folder in (candidates / entry.id, candidates / entry.id / "candidate"):
        if (folder / CANDIDATE_FILE).is_file():
            return folder
    return None


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
