"""`cuda-agent tasks import PARQUET --out DIR`: CUDA-Agent-Ops-6K's parquet (columns `ops`,
`data_source`, `code`, ...) -> one task file per row, `DIR/<row>_<ops>.py`, a folder `batch` takes
as it is. Each file is checked the way a batch loads it (it imports, defines `Model`, get_inputs and
get_init_inputs); one that fails goes to `DIR/_rejected/` (a folder `batch` skips), and
`DIR/import.json` lists it with the reason, next to each imported task's row, ops and data_source."""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel

from cuda_agent import install_hint
from cuda_agent.batch.tasks import TaskEntry, check_loads

REJECTED = "_rejected"


class ImportedTask(BaseModel):
    row: int
    file: str
    ops: str | None = None
    data_source: str | None = None
    error: str | None = None  # why it was rejected


class ImportReport(BaseModel):
    source: str
    imported: list[ImportedTask] = []
    rejected: list[ImportedTask] = []


def import_parquet(parquet: Path, out: Path, *, check=None) -> ImportReport:
    """Write the tasks and import.json; `check(path) -> reason or None` (default: batch's load check)."""
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ImportError(f"reading parquet needs pyarrow: {install_hint('batch')}") from None
    table = pq.read_table(parquet)
    if "code" not in table.column_names:
        raise ValueError(
            f"{parquet} has no column code (it has {', '.join(table.column_names)}): "
            "give CUDA-Agent-Ops-6K's parquet, whose rows hold the task source in `code`"
        )
    check = check or (lambda path: check_loads(TaskEntry(id=path.stem, path=path)))
    out.mkdir(parents=True, exist_ok=True)
    report = ImportReport(source=str(parquet))
    width = len(str(max(table.num_rows - 1, 0)))
    for i, row in enumerate(table.to_pylist()):
        ops = _text(row.get("ops"))
        name = f"{i:0{width}d}_{_slug(ops) or 'task'}.py"
        code = row.get("code")
        item = ImportedTask(row=i, file=name, ops=ops, data_source=_text(row.get("data_source")))
        path = out / name
        if not isinstance(code, str) or not code.strip():
            item.error = "empty `code`"
        else:
            path.write_text(code if code.endswith("\n") else code + "\n")
            item.error = check(path)
        if item.error:
            (out / REJECTED).mkdir(exist_ok=True)
            if path.exists():
                path.replace(out / REJECTED / name)
            item.file = f"{REJECTED}/{name}"
            report.rejected.append(item)
        else:
            report.imported.append(item)
    (out / "import.json").write_text(json.dumps(report.model_dump(mode="json"), indent=1) + "\n")
    return report


def _text(v) -> str | None:
    """ops may be a list of op names or a string; data_source a string."""
    if v is None:
        return None
    if isinstance(v, (list, tuple)):
        return ",".join(map(str, v))
    return str(v)


def _slug(ops: str | None, limit: int = 60) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", ops or "").strip("_")[:limit]
