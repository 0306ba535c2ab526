"""`train grpo`'s dataset: the tasks of a task folder (KernelBench's layout, examples/, host-only tasks),
one row each. A row holds no task text: it names the task (its file, class and content hash) and
the environment's reset() loads it, checked against that hash, and returns the task message the
agent loop starts from. The row's prompt is the agent's system message and an empty user message,
which TRL completes with what reset() returns."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from cuda_agent.batch.tasks import TaskDirError, TaskEntry, discover
from cuda_agent.task import TaskError, load_task, parse_task_ref, task_label


class NoTasks(ValueError):
    """No task to train on: says why."""


@dataclass
class TaskRows:
    rows: list[dict]
    skipped: dict[str, str] = field(default_factory=dict)  # task id -> why it cannot be loaded

    def lines(self) -> list[str]:
        out = [
            f"{len(self.rows)} task(s): "
            + ", ".join(r["task_id"] for r in self.rows[:8])
            + (", ..." if len(self.rows) > 8 else "")
        ]
        out += [f"left out {tid}: {why}" for tid, why in sorted(self.skipped.items())]
        return out


def task_rows(tasks: str, *, pattern: str | None = None, limit: int | None = None) -> TaskRows:
    """The rows for a task folder (every task below it, as `batch` finds them) or one task file
    (`file.py` or `file.py::Class`)."""
    from cuda_agent.agent.prompts import system_message

    folder = Path(tasks.split("::")[0])
    if folder.is_dir():
        if "::" in tasks:
            raise NoTasks(f"{tasks}: a folder takes no ::Class (give file.py::Class for one task)")
        path = folder
        try:
            entries = discover(path, pattern, limit)
        except TaskDirError as e:
            raise NoTasks(str(e)) from None
        refs = [(e, str(e.path)) for e in entries]
    else:
        try:
            path, cls = parse_task_ref(tasks)
        except TaskError as e:
            raise NoTasks(f"no such task folder or file: {e}") from None
        ref = f"{path.resolve()}" + (f"::{cls}" if cls else "")
        refs = [(TaskEntry(id=task_label(path, cls) if cls else task_label(path), path=path.resolve()), ref)]
    system = system_message(native_tools=True)  # what KernelEnv.reset starts every episode with
    out = TaskRows(rows=[])
    for entry, ref in refs:
        try:
            task = load_task(ref, module_name="cuda_agent_task_check")
        except TaskError as e:
            out.skipped[entry.id] = str(e)
            continue
        except Exception as e:  # the task's own code failing: its problem, the others still train
            out.skipped[entry.id] = f"{type(e).__name__}: {e}"
            continue
        out.rows.append(
            {
                "prompt": [{"role": "system", "content": system}, {"role": "user", "content": ""}],
                "task": ref,
                "task_hash": task.source_hash,
                "task_id": entry.id,
            }
        )
    if not out.rows:
        why = "; ".join(f"{tid}: {w}" for tid, w in out.skipped.items())
        raise NoTasks(f"{tasks}: no task loads ({why})")
    return out


def to_dataset(rows: list[dict]):
    import datasets

    return datasets.Dataset.from_list(rows)
