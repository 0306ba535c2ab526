"""results.jsonl: one row per task, rewritten atomically whenever a task ends, so a killed batch
leaves a whole file and a resumed one replaces the rows of the tasks it runs again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

from cuda_agent.kernels.objects import write_atomic

RESULTS = "results.jsonl"

# done: the run ended by itself (finished, a limit, no correct version...); the other outcomes are
# failures of the task, not of a candidate: they count as incorrect in the summary
Outcome = Literal["done", "interrupted", "crashed", "hung", "load_error", "no_candidate"]
FINAL = ("done", "crashed", "hung", "load_error", "no_candidate")  # skipped when the batch runs again


class TaskRow(BaseModel):
    task_id: str
    level: str | None = None
    task_path: str
    outcome: Outcome
    correct: bool = False  # a version passed re-verification (eval-only: the candidate is correct)
    reward: int = -1  # the milestone reward of that verdict, -1 without one
    speedup_eager: float | None = None  # of the re-verified result
    speedup_compile: float | None = None
    time_ms: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    status: str | None = None  # eval-only: the verdict's status
    steps: int = 0
    tokens: int = 0
    cost: float | None = None  # dollars; None when no turn had a price
    stop_reason: str | None = None  # the loop's, or crashed / hung / load_error / interrupted
    error: str | None = None  # one line: why the task failed
    device: str | None = None
    wall_s: float = 0.0
    run_dir: str | None = None  # the task's run folder (what `optimize` writes)
    report: str | None = None
    dropin: str | None = None
    trajectory: str | None = None
    log: str | None = None  # the task process's output


def read_rows(run_dir: Path) -> dict[str, TaskRow]:
    path = Path(run_dir) / RESULTS
    if not path.is_file():
        return {}
    rows = {}
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.strip():
            try:
                row = TaskRow.model_validate_json(line)
            except ValueError as e:
                raise ValueError(f"{path}:{n}: not a results row ({e}); move the file away to start over") from None
            rows[row.task_id] = row
    return rows


def write_rows(run_dir: Path, rows: dict[str, TaskRow]) -> Path:
    path = Path(run_dir) / RESULTS
    write_atomic(
        path,
        "".join(json.dumps(row.model_dump(mode="json")) + "\n" for row in rows.values()),
        prefix=".results-",
        sync=True,
    )
    return path
