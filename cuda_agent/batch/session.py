"""One `cuda-agent batch` invocation: the manifest (batch.json), the plan, the jobs, the runner,
results.jsonl after every task, and the summary at the end (after Ctrl-C too)."""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field
from rich.console import Console

from cuda_agent.batch.job import TaskJob
from cuda_agent.batch.plan import Layout, Planned, plan
from cuda_agent.batch.progress import BatchProgress
from cuda_agent.batch.render import write_summary
from cuda_agent.batch.rows import TaskRow, read_rows, write_rows
from cuda_agent.batch.summary import Summary, summarize
from cuda_agent.batch.tasks import CANDIDATE_FILE, TaskEntry, candidate_folder
from cuda_agent.pool import PoolSpec, make_pool
from cuda_agent.settings import Settings

MANIFEST = "batch.json"


class BatchError(ValueError):
    """A batch that cannot start as asked; says what to do."""


class BatchSettings(BaseModel):
    mode: Literal["agent", "eval"]
    task_dir: Path
    out: Path
    devices: list[str]
    concurrency: int | None = None  # None: 2 per device, or what the Ray cluster has room for
    slots_per_device: int = 2
    task_timeout: float | None = None
    redo: bool = False
    retry_failed: bool = False
    run: Settings = Field(
        default_factory=Settings
    )  # every task's run settings (model, limits, eval, tools); the device is the pool's
    script: Path | None = None  # one file for every task, or a folder of <task id>.json
    candidates: Path | None = None  # eval mode: <candidates>/<task id>/[candidate/]model_new.py
    ray: str | None = None  # a Ray cluster's address, or auto; joined only when there is a task to run
    max_total_cost: float | None = None  # dollars over the whole batch (every row in results.jsonl)


def check_manifest(s: BatchSettings) -> None:
    """A run folder holds one batch: the same task folder and mode when it is run again."""
    path = s.out / MANIFEST
    if path.is_file():
        old = json.loads(path.read_text())
        if old.get("task_dir") != str(s.task_dir.resolve()) or old.get("mode") != s.mode:
            raise BatchError(
                f"{s.out} holds a {old.get('mode')} batch over {old.get('task_dir')}: re-run it with the "
                "same task folder and mode, or give another --out"
            )
        return
    s.out.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "mode": s.mode,
                "task_dir": str(s.task_dir.resolve()),
                "model": s.run.model,
                "script": str(s.script) if s.script else None,
                "limits": s.run.limits.model_dump(mode="json"),
                "eval_config": s.run.eval.model_dump(mode="json"),
                "devices": s.devices,
            },
            indent=1,
            default=str,
        )
        + "\n"
    )


def run_batch(
    s: BatchSettings, entries: list[TaskEntry], console: Console, *, quiet: bool = False
) -> tuple[Summary, bool]:
    """Run what is left of the batch; (the summary, whether it was stopped by Ctrl-C). `quiet`: no
    progress (the bar, or a line per task started and finished)."""
    check_manifest(s)
    layout = Layout(s.out)
    rows = read_rows(s.out)
    pool = make_pool(
        PoolSpec(
            kind="ray" if s.ray else "local",
            devices=s.devices,
            slots_per_device=s.slots_per_device,
            lock_dir=s.out / "logs" / "slots",
        )
    )
    jobs: deque[TaskJob] = deque()
    skipped: list[TaskRow] = []  # finished in an earlier invocation: recorded, or adopted from its process
    lacking: list[TaskRow] = []  # eval mode: no candidate for the task, recorded now with nothing to run
    for p in plan(entries, rows, layout, redo=s.redo, retry_failed=s.retry_failed, resumable=s.mode == "agent"):
        if _candidate_came(s, p):
            p = p.model_copy(update={"action": "new"})
        if p.action in ("skip", "adopt"):
            rows[p.entry.id] = p.row
            skipped.append(p.row)
            continue
        job = _job(s, layout, p.entry, pool.spec, resume=p.action == "resume")
        if s.mode == "eval" and job.candidate is None:
            rows[p.entry.id] = job.row(
                "no_candidate", error=f"no {CANDIDATE_FILE} in {s.candidates / p.entry.id} nor in its candidate/ folder"
            )
            lacking.append(rows[p.entry.id])
        else:
            jobs.append(job)
    write_rows(s.out, rows)
    ids = [e.id for e in entries]
    where = f"Ray cluster {s.ray} ({s.devices[0]})" if s.ray else ", ".join(s.devices)
    without = f", {len(lacking)} without a candidate" if lacking else ""
    console.print(
        f"{len(entries)} tasks: {len(skipped)} done already{without}, {len(jobs)} to run "
        f"({sum(j.resume for j in jobs)} resumed) on {where}; run folder {s.out}",
        highlight=False,
    )
    stopped = False
    concurrency = s.concurrency
    if s.ray and jobs:  # a re-run with nothing left to do does not start Ray
        from cuda_agent.batch.ray_runner import RayRunner as Runner
        from cuda_agent.pool.ray_cluster import RayError, capacity, connect

        try:
            resources = connect(s.ray)
            room = capacity(resources, s.devices[0], s.slots_per_device)
        except RayError as e:
            raise BatchError(str(e)) from None
        concurrency = concurrency or room
        console.print(
            f"joined Ray cluster {s.ray}: {resources.get('CPU', 0):g} CPUs, {resources.get('GPU', 0):g} GPUs; "
            f"{concurrency} tasks at once",
            highlight=False,
        )
    else:
        from cuda_agent.batch.runner import Runner
    budget = CostCap(s.max_total_cost, rows, len(jobs))

    with BatchProgress(console, len(entries), skipped + lacking, quiet=quiet) as bar:

        def ended(row: TaskRow) -> None:
            rows[row.task_id] = row
            write_rows(s.out, rows)
            bar.ended(row)

        runner = Runner(
            pool,
            concurrency or 2 * len(s.devices),
            s.task_timeout,
            on_start=lambda j: bar.started(j.task_id),
            on_end=ended,
            admit=budget.admit,
        )
        try:
            runner.run(jobs)
        except KeyboardInterrupt:
            stopped = True
    if budget.refused:
        console.print(
            f"the batch's cost cap (--max-total-cost {s.max_total_cost:g}) is reached: ${budget.spent():.2f} "
            f"spent, {budget.refused} task(s) not started; run again with a higher cap to go on",
            highlight=False,
        )
    summary = summary_of(s.out, rows, entries, s.mode, s.run.model, s.task_dir)
    write_summary(s.out, summary, [rows[i] for i in ids if i in rows])
    return summary, stopped


class CostCap:
    """`--max-total-cost`: dollars over the whole batch, earlier invocations' rows included. A task
    starts only while money is left, and its own cost limit becomes at most what is left then, so
    the batch spends at most the cap plus what the tasks already running spend up to their own
    limits (they are not stopped). Rows without a price (None) count as $0."""

    def __init__(self, cap: float | None, rows: dict[str, TaskRow], queued: int):
        self.cap, self.rows, self.queued = cap, rows, queued
        self.refused = 0  # tasks left unstarted because the cap was reached

    def spent(self) -> float:
        return sum(r.cost or 0.0 for r in self.rows.values())

    def admit(self, job: TaskJob) -> bool:
        if self.cap is None:
            return True
        left = round(self.cap - self.spent(), 9)  # $0.05 - $0.04 is 0.010000000000000002 in floats
        if left <= 0:
            self.refused = self.queued  # this job and every one after it
            return False
        self.queued -= 1
        own = job.settings.limits.max_cost
        job.settings.limits.max_cost = left if own is None else min(own, left)
        return True


def summary_of(
    out: Path,
    rows: dict[str, TaskRow],
    entries: list[TaskEntry] | None,
    mode: str,
    model: str | None,
    task_dir: Path | str,
) -> Summary:
    """Over the tasks selected now and every task the folder has a row for."""
    levels = {t: r.level for t, r in rows.items()}
    levels.update({e.id: e.level for e in entries or []})
    return summarize(rows, list(levels), levels, run_dir=str(out), mode=mode, model=model, task_dir=str(task_dir))


def load_run(out: Path) -> tuple[Summary, dict[str, TaskRow]]:
    """A finished (or stopped) batch's summary, recomputed from its results.jsonl (`compare`)."""
    path = Path(out) / MANIFEST
    if not path.is_file():
        raise BatchError(
            f"{out} is not a batch run folder (no {MANIFEST}): give a folder `cuda-agent batch --out` made"
        )
    m = json.loads(path.read_text())
    rows = read_rows(out)
    return summary_of(
        Path(out), rows, None, m.get("mode", "agent"), m.get("model") or m.get("script"), m.get("task_dir", "")
    ), rows


def _candidate_came(s: BatchSettings, p: Planned) -> bool:
    """A task recorded as no_candidate whose candidate is there now (a layout fixed): it is scored."""
    return (
        p.action == "skip"
        and p.row is not None
        and p.row.outcome == "no_candidate"
        and s.candidates is not None
        and candidate_folder(s.candidates, p.entry) is not None
    )


def _candidate(s: BatchSettings, e: TaskEntry) -> Path | None:
    folder = candidate_folder(s.candidates, e) if s.candidates else None
    return folder.resolve() if folder else None


def _job(s: BatchSettings, layout: Layout, e: TaskEntry, pool: PoolSpec, resume: bool) -> TaskJob:
    script = s.script
    if script is not None and script.is_dir():
        script = script / f"{e.id}.json"
    return TaskJob(
        mode=s.mode,
        task_id=e.id,
        task_path=e.path,
        level=e.level,
        run_dir=layout.run_dir(e.id),
        result_path=layout.log(e.id, "result.json"),
        log_path=layout.log(e.id, "log"),
        pool=pool,
        settings=s.run.model_copy(deep=True),
        resume=resume,
        script=script,
        candidate=_candidate(s, e),
    )
