"""What the batch process hands a task's process (JSON in the logs folder), and the row it gets
back. One process per task: a crash, a hang or a fault of one task cannot take the batch down, a
hung task can be killed with its process group, and tasks never share torch's global RNG or
`sys.modules` (the harness draws inputs by re-seeding it)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from cuda_agent.batch.rows import TaskRow
from cuda_agent.kernels.objects import write_atomic
from cuda_agent.pool import PoolSpec
from cuda_agent.settings import Settings


class TaskJob(BaseModel):
    mode: Literal["agent", "eval"]
    task_id: str
    task_path: Path
    level: str | None = None
    run_dir: Path  # the task's run folder: RUN_DIR/tasks/<task id>
    result_path: Path  # where the task's process writes its TaskRow
    log_path: Path
    device: str = ""  # filled in by the runner from the pool
    pool: PoolSpec
    settings: Settings = Field(default_factory=Settings)  # the run's settings (eval.device is replaced by `device`)
    resume: bool = False  # continue the run in run_dir (agent mode)
    script: Path | None = None  # agent mode: a scripted model instead of settings.model
    # eval mode
    candidate: Path | None = None

    def row(self, outcome: str, **fields) -> TaskRow:
        """A row for this task with what is known without a result."""
        return TaskRow(
            task_id=self.task_id,
            level=self.level,
            task_path=str(self.task_path),
            outcome=outcome,
            device=self.device,
            run_dir=str(self.run_dir),
            log=str(self.log_path),
            **{"stop_reason": outcome, **fields},
        )


def write_json_atomic(path: Path, data: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(data, indent=1))
