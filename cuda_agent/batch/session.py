"""One `cuda-agent batch` invocation: the manifest (batch.json), the plan, the jobs, the runner,
results.jsonl after every task, and the summary at the end (after Ctrl-C too)."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel
from rich.console import Console

from cuda_agent.batch.job import TaskJob
from cuda_agent.batch.plan import Layout, plan
from cuda_agent.batch.progress import BatchProgress
from cuda_agent.batch.render import write_summary
from cuda_agent.batch.rows import TaskRow, read_rows, write_rows
from cuda_agent.batch.summary import Summary, summarize
from cuda_agent.batch.tasks import TaskEntry
from cuda_agent.pool import PoolSpec, make_pool

MANIFEST = "batch.json"


class BatchError(ValueError):
    """A batch that cannot start as asked; says what to do."""


class BatchSettings(BaseModel):
    mode: Literal["agent", "eval"]
    task_dir: Path
    out: Path
    devices: list[str]
    concurrency: int = 1
    slots_per_device: int = 2
    task_timeout: float | None = None
    redo: bool = False
    retry_failed: bool = False
    eval_config: dict[str, Any] = {}
    model: str | None = None
    api_base: str | None = None
    script: Path | None = None  # one file for every task, or a folder of <task id>.json
    limits: dict[str, Any] = {}
    allow_shell: bool = False
    candidates: Path | None = None  # eval mode: <candidates>/<task id>/model_new.py
    ray: str | None = None  # a Ray cluster's address, or auto (the batch has joined it: cli_batch)


def check_manifest(s: BatchSettings) -> None:
    """A run folder holds one batch: the same task folder and mode when it is run again."""
    path = s.out / MANIFEST
    if path.is_file():
        old = json.loads(path.read_text())
        if old.get("task_dir") != str(s.task_dir.resolve()) or old.get("mode") != s.mode:
            raise BatchError(f"{s.out} holds a {old.get('mode')} batch over {old.get('task_dir')}: re-run it with the "
                             "same task folder and mode, or give another --out")
        return
    s.out.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"mode": s.mode, "task_dir": str(s.task_dir.resolve()), "model": s.model,
                                "script": str(s.script) if s.script else None, "limits": s.limits,
                                "eval_config": s.eval_config, "devices": s.devices}, indent=1, default=str) + "\n")


def run_batch(s: BatchSettings, entries: list[TaskEntry], console: Console) -> tuple[Summary, bool]:
    """Run what is left of the batch; (the summary, whether it was stopped by Ctrl-C)."""
    check_manifest(s)
    layout = Layout(s.out)
    rows = read_rows(s.out)
    planned = plan(entries, rows, layout, redo=s.redo, retry_failed=s.retry_failed, resumable=s.mode == "agent")
    pool = make_pool(PoolSpec(kind="ray" if s.ray else "local", devices=s.devices, slots_per_device=s.slots_per_device,
                              lock_dir=s.out / "logs" / "slots"))
    jobs: deque[TaskJob] = deque()
    for p in planned:
        if p.action == "adopt":
            rows[p.entry.id] = p.row
        elif p.action in ("new", "resume"):
            job = _job(s, layout, p.entry, pool.spec, resume=p.action == "resume")
            if s.mode == "eval" and not (job.candidate / "model_new.py").is_file():
                rows[p.entry.id] = job.row("no_candidate", error=f"no {job.candidate}/model_new.py")
            else:
                jobs.append(job)
    write_rows(s.out, rows)
    ids = [e.id for e in entries]
    skipped = [rows[i] for i in ids if i in rows and rows[i].outcome != "interrupted"]
    where = f"Ray cluster {s.ray} ({s.devices[0]})" if s.ray else ", ".join(s.devices)
    console.print(f"{len(entries)} tasks: {len(skipped)} done already, {len(jobs)} to run "
                  f"({sum(j.resume for j in jobs)} resumed) on {where}; run folder {s.out}", highlight=False)
    stopped = False
    if s.ray:
        from cuda_agent.batch.ray_runner import RayRunner as Runner
    else:
        from cuda_agent.batch.runner import Runner

    with BatchProgress(console, len(entries), skipped) as bar:
        def ended(row: TaskRow) -> None:
            rows[row.task_id] = row
            write_rows(s.out, rows)
            bar.ended(row)

        runner = Runner(pool, s.concurrency, s.task_timeout, on_start=lambda j: bar.started(j.task_id), on_end=ended)
        try:
            runner.run(jobs)
        except KeyboardInterrupt:
            stopped = True
    summary = summary_of(s.out, rows, entries, s.mode, s.model, s.task_dir)
    write_summary(s.out, summary, [rows[i] for i in ids if i in rows])
    return summary, stopped


def summary_of(out: Path, rows: dict[str, TaskRow], entries: list[TaskEntry] | None, mode: str, model: str | None,
               task_dir: Path | str) -> Summary:
    """Over the tasks selected now and every task the folder has a row for."""
    levels = {t: r.level for t, r in rows.items()}
    levels.update({e.id: e.level for e in entries or []})
    return summarize(rows, list(levels), levels, run_dir=str(out), mode=mode, model=model, task_dir=str(task_dir))


def load_run(out: Path) -> tuple[Summary, dict[str, TaskRow]]:
    """A finished (or stopped) batch's summary, recomputed from its results.jsonl (`compare`)."""
    path = Path(out) / MANIFEST
    if not path.is_file():
        raise BatchError(f"{out} is not a batch run folder (no {MANIFEST}): give a folder `cuda-agent batch --out` made")
    m = json.loads(path.read_text())
    rows = read_rows(out)
    return summary_of(Path(out), rows, None, m.get("mode", "agent"), m.get("model") or m.get("script"),
                      m.get("task_dir", "")), rows


def _job(s: BatchSettings, layout: Layout, e: TaskEntry, pool: PoolSpec, resume: bool) -> TaskJob:
    script = s.script
    if script is not None and script.is_dir():
        script = script / f"{e.id}.json"
    return TaskJob(mode=s.mode, task_id=e.id, task_path=e.path, level=e.level, run_dir=layout.run_dir(e.id),
                   result_path=layout.log(e.id, "result.json"), log_path=layout.log(e.id, "log"), pool=pool,
                   eval_config=s.eval_config, resume=resume, model=s.model, api_base=s.api_base, script=script,
                   limits=s.limits, allow_shell=s.allow_shell,
                   candidate=(s.candidates / e.id).resolve() if s.candidates else None)
