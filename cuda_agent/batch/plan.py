"""What to do with each task when a batch (re)starts: skip it, adopt a result its process wrote
but the batch never recorded, resume its run folder, or start it anew."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from cuda_agent.batch.rows import FINAL, TaskRow
from cuda_agent.batch.tasks import TaskEntry
from cuda_agent.run_folder import RunFolder

Action = Literal["skip", "adopt", "resume", "new"]


class Layout:
    """Where a batch keeps things: RUN_DIR/tasks/<id>/ (each a run folder as `optimize` writes it),
    RUN_DIR/logs/<id>.{job.json,result.json,log}, results.jsonl, summary.{md,json}, speedups.png."""

    def __init__(self, out: Path):
        self.out = Path(out)

    def run_dir(self, task_id: str) -> Path:
        return self.out / "tasks" / task_id

    def log(self, task_id: str, suffix: str) -> Path:
        return self.out / "logs" / f"{task_id}.{suffix}"


class Planned(BaseModel):
    entry: TaskEntry
    action: Action
    row: TaskRow | None = None  # skip: the recorded row; adopt: the row the task's process wrote


def plan(
    entries: list[TaskEntry],
    rows: dict[str, TaskRow],
    layout: Layout,
    *,
    redo: bool = False,
    retry_failed: bool = False,
    resumable: bool = True,
) -> list[Planned]:
    """`redo` starts every task anew (its old run folder is removed); `retry_failed` runs crashed
    and hung tasks again (resuming their folders); `resumable=False` (eval-only) never resumes."""
    return [_plan_one(e, rows.get(e.id), layout, redo, retry_failed, resumable) for e in entries]


def _plan_one(
    e: TaskEntry, row: TaskRow | None, layout: Layout, redo: bool, retry_failed: bool, resumable: bool
) -> Planned:
    run_dir, result = layout.run_dir(e.id), layout.log(e.id, "result.json")
    if redo:
        result.unlink(missing_ok=True)
    elif row is not None and row.outcome in FINAL and not (retry_failed and row.outcome in ("crashed", "hung")):
        return Planned(entry=e, action="skip", row=row)
    elif row is None and (written := _written_row(result)) is not None and written.outcome in FINAL:
        return Planned(entry=e, action="adopt", row=written)
    elif resumable and _has_header(RunFolder(run_dir).trajectory):
        return Planned(entry=e, action="resume")
    shutil.rmtree(run_dir, ignore_errors=True)  # redo, or nothing to continue from (killed before its first record)
    return Planned(entry=e, action="new")


def _written_row(path: Path) -> TaskRow | None:
    try:
        return TaskRow.model_validate_json(path.read_text())
    except (OSError, ValueError):
        return None


def _has_header(path: Path) -> bool:
    try:
        with open(path, encoding="utf-8") as f:
            return json.loads(f.readline()).get("type") == "header"
    except (OSError, ValueError, AttributeError):
        return False
