"""`cuda-agent batch`, `compare`, `baselines` and `tasks import`: thin commands over batch/ and
pool/ (docs/batch.md). Heavy imports (torch, litellm, matplotlib, pyarrow) happen inside them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from cuda_agent.cli_flags import JUDGE, MODEL, SettingFlags, setting_flags
from cuda_agent.cli_settings import (
    NO_GPU,
    fail,
    fail_on,
    model_or_exit,
    out_folder_problem,
    require_device,
    resolve_or_exit,
)

tasks_app = typer.Typer(no_args_is_help=True, help="Task folders: import CUDA-Agent-Ops-6K's parquet.")


def _devices(gpus: Optional[str], device: Optional[str]) -> list[str]:
    if gpus and device:
        fail("give --gpus (GPU indices) or --device, not both")
    if not gpus:
        require_device(device or "cuda:0")  # no GPU: one line, never a silent CPU batch
        return [device or "cuda:0"]
    try:
        ids = [int(g) for g in gpus.split(",") if g.strip()]
    except ValueError:
        fail(f"--gpus {gpus!r}: give GPU indices separated by commas, e.g. --gpus 0,1")
    import torch

    n = torch.cuda.device_count()
    if not n:
        fail(NO_GPU)
    if not ids or any(not 0 <= i < n for i in ids):
        fail(f"--gpus {gpus}: torch sees {n} GPU(s) (indices 0..{n - 1}); pick among them")
    return [f"cuda:{i}" for i in dict.fromkeys(ids)]


def _ray_devices(gpus: Optional[str], device: Optional[str]) -> list[str]:
    """[the device each task runs on]; the batch joins the cluster once it has a task to run, and runs
    as many at once as the cluster has room for unless -j says otherwise."""
    if gpus:
        fail("--gpus picks this machine's GPUs; with --ray the cluster's GPUs are Ray's to place: leave it out")
    if device not in (None, "cpu") and not device.startswith("cuda"):
        fail(f"--device {device}: with --ray give cpu (host-only kernels) or leave it out (a GPU per task)")
    return ["cpu" if device == "cpu" else "cuda:0"]  # Ray sets CUDA_VISIBLE_DEVICES to the task's GPU


CANDIDATE_LAYOUTS = (
    "<task id>/model_new.py (+ kernels/) per task, or <task id>/candidate/model_new.py as "
    "examples/ has them (--candidates examples/ with the task folder examples/)"
)


def _scripts_or_exit(script: Path, entries: list, settings) -> None:
    """--script: one file every task replays, or a folder with <task id>.json for each task; every
    file there and parsed, before the batch's folder is made."""
    if not script.exists():
        fail(f"script not found: {script}")
    if not script.is_dir():
        model_or_exit(settings, script)
        return
    if lacking := [e.id for e in entries if not (script / f"{e.id}.json").is_file()]:
        fail(f"{script} has no script for {len(lacking)} task(s), e.g. {script / (lacking[0] + '.json')}")
    for e in entries:
        model_or_exit(settings, script / f"{e.id}.json")


def _eval_config(path: Optional[Path]) -> dict:
    """--eval-config's JSON: EvalConfig fields, on the command line's layer (flags given win)."""
    from cuda_agent.eval.settings import EvalConfig

    data = {}
    if path is not None:
        try:
            data = json.loads(path.read_text())
            EvalConfig.model_validate(data)
        except (OSError, ValueError) as e:
            fail(
                f"--eval-config {path}: {str(e).splitlines()[0]}; give a JSON object of EvalConfig fields, "
                'e.g. {"n_sets": 5, "timing": {"budget_ms": 500}}'
            )
    return data


@setting_flags(*MODEL, "limits", *JUDGE, per_task=True)
def batch_command(
    task_dir: Path = typer.Argument(..., help="Folder of task files (KernelBench level folders work as they are)."),
    out: Path = typer.Option(..., "--out", help="The batch's run folder; run again with the same --out to resume."),
    flags: SettingFlags = SettingFlags(),  # --model, --tools..., --max-steps... (per task): the settings named above
    script: Optional[Path] = typer.Option(
        None,
        "--script",
        help=(
            "Scripted model instead of an LLM: one script file (optimize --script's) for every task, or a folder of "
            "<task id>.json."
        ),
    ),
    eval_only: bool = typer.Option(False, "--eval-only", help="No model: score existing candidates (--candidates)."),
    candidates: Optional[Path] = typer.Option(
        None,
        "--candidates",
        help=(
            "With --eval-only: a folder with <task id>/model_new.py (+ kernels/) per task, or "
            "<task id>/candidate/model_new.py (examples/'s layout: --candidates the task folder itself)."
        ),
    ),
    gpus: Optional[str] = typer.Option(
        None, "--gpus", help="GPU indices to spread tasks over, e.g. 0,1 (default: cuda:0)."
    ),
    device: Optional[str] = typer.Option(
        None,
        "--device",
        help="One device instead of --gpus (cpu: host-only test kernels, nothing a GPU does; setting: eval.device).",
    ),
    concurrency: Optional[int] = typer.Option(
        None, "--concurrency", "-j", min=1, help="Tasks at once (default: 2 per device)."
    ),
    slots: int = typer.Option(
        2, "--evals-per-gpu", min=1, help="Evaluations at once per device (timing is serialised per GPU anyway)."
    ),
    filter_: Optional[str] = typer.Option(
        None, "--filter", help="Only tasks whose id (path below TASK_DIR, no .py) matches this regex."
    ),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="At most this many tasks (after --filter)."),
    redo: bool = typer.Option(
        False, "--redo", help="Run every selected task anew (their old run folders are removed)."
    ),
    retry_failed: bool = typer.Option(
        False, "--retry-failed", help="Run crashed and hung tasks again (finished ones stay skipped)."
    ),
    task_timeout: Optional[float] = typer.Option(
        None,
        "--task-timeout",
        help=(
            "Seconds a task may take before it is killed and recorded as hung (default: --max-wall + 30 min, else "
            "none)."
        ),
    ),
    eval_config: Optional[Path] = typer.Option(
        None, "--eval-config", help="JSON of EvalConfig fields (n_sets, timing, tolerances...)."
    ),
    max_total_cost: Optional[float] = typer.Option(
        None,
        "--max-total-cost",
        help=(
            "Dollars at most over the whole batch (earlier runs of it included): no task starts once it is spent, "
            "and each task's own limit is at most what is left when it starts."
        ),
    ),
    ray: Optional[str] = typer.Option(
        None,
        "--ray",
        help=(
            "Run tasks on a Ray cluster: its head's HOST:PORT, or auto (a running cluster, else a local one); needs "
            "the distributed extra (ray)."
        ),
    ),
    quiet: bool = typer.Option(
        False,
        "--quiet",
        "-q",
        help="No progress on stderr (the bar, or a line per task started and finished); the summary line still.",
    ),
) -> None:
    """One agent run per task (or one evaluation per candidate with --eval-only); resumable; writes
    results.jsonl, summary.md/.json and speedups.png in --out. Exit codes: 0 done, 2 bad usage,
    130 stopped by Ctrl-C (run the same command again to resume)."""
    from rich.console import Console

    from cuda_agent.batch.render import headline
    from cuda_agent.batch.session import BatchError, BatchSettings, run_batch
    from cuda_agent.batch.tasks import TaskDirError, candidate_folder, discover

    if eval_only:
        if candidates is None or flags.get("model") or script:
            fail("--eval-only scores existing candidates: give --candidates DIR, and no --model or --script")
        if not candidates.is_dir():
            fail(f"candidates folder not found: {candidates} (it needs {CANDIDATE_LAYOUTS})")
        if max_total_cost is not None:
            fail("--max-total-cost caps model spending: --eval-only runs no model, leave it out")
    elif candidates is not None:
        fail("--candidates goes with --eval-only")
    elif flags.get("model") and script:
        fail("give --model (an LLM through litellm) or --script (a scripted model), not both; or --eval-only")
    given = flags.layer()  # the device: the pool's
    given["eval"] = {**_eval_config(eval_config), **given.get("eval", {})}
    resolved = resolve_or_exit(given)
    if not eval_only and script is None and not resolved.settings.model:
        fail("give --model (or set CUDA_AGENT_MODEL, or model in cuda-agent.toml) or --script; or --eval-only")
    if not device and not gpus and "eval.device" in resolved.origins:  # a settings file or CUDA_AGENT_EVAL__DEVICE
        device = resolved.settings.eval.device
    # before any work: no GPU here is one line now (with --ray the cluster's GPUs count, not this machine's)
    devices = _ray_devices(gpus, device) if ray else _devices(gpus, device)
    with fail_on(TaskDirError):
        entries = discover(task_dir, filter_, limit)
    if eval_only and not any(candidate_folder(candidates, e) for e in entries):
        fail(
            f"{candidates} has a candidate for none of the {len(entries)} task(s) in {task_dir} (e.g. "
            f"{entries[0].id}): it needs {CANDIDATE_LAYOUTS}"
        )
    if script is not None:
        _scripts_or_exit(script, entries, resolved.settings)
    elif not eval_only:  # the key the tasks' model needs; on a Ray cluster its nodes' environment has it, not ours
        model_or_exit(resolved.settings, None, key=not ray)
    if problem := (
        out_folder_problem(out, "a batch's run folder is output (results, verdicts, logs), not source")
        if eval_only
        else out_folder_problem(out)
    ):
        fail(problem)
    if ray:
        from cuda_agent.pool.ray_cluster import RayError, check_address, disconnect, import_ray

        with fail_on(RayError):  # before any work: ray missing or the address unreachable is one line now
            import_ray()
            check_address(ray)
        # paths the task processes get must not depend on this process's folder: they run elsewhere
        entries = [e.model_copy(update={"path": e.path.resolve()}) for e in entries]
    wall = resolved.settings.limits.max_wall_s
    timeout = task_timeout if task_timeout is not None else (wall + 1800 if wall else None)
    settings = BatchSettings(
        mode="eval" if eval_only else "agent",
        task_dir=task_dir,
        out=out.resolve(),
        devices=devices,
        concurrency=concurrency,
        slots_per_device=slots,
        task_timeout=timeout,
        redo=redo,
        retry_failed=retry_failed,
        run=resolved.settings,
        script=script.resolve() if script else None,
        candidates=candidates.resolve() if candidates else None,
        ray=ray,
        max_total_cost=max_total_cost,
    )
    console = Console(stderr=True)
    try:
        with fail_on(BatchError):
            summary, stopped = run_batch(settings, entries, console, quiet=quiet)
    finally:
        if ray:
            disconnect()
    Console().print(f"{headline(summary)}; {out / 'summary.md'}", highlight=False)
    if stopped:
        console.print("stopped: run the same command again to resume", highlight=False)
        raise typer.Exit(130)


def compare_command(
    run_a: Path = typer.Argument(..., help="A batch run folder."),
    run_b: Path = typer.Argument(..., help="Another batch run folder (e.g. another model on the same tasks)."),
    json_out: bool = typer.Option(False, "--json", help="Print both summaries and the head-to-head as JSON."),
) -> None:
    """Two batches side by side: every metric (per level where both have levels) and, on the tasks
    both finished, which one alone is correct and whose result is faster."""
    from rich.console import Console

    from cuda_agent.batch.render import compare_tables, head_to_head
    from cuda_agent.batch.session import BatchError, load_run

    with fail_on(BatchError, ValueError):
        (a, rows_a), (b, rows_b) = load_run(run_a), load_run(run_b)
    h2h = head_to_head(rows_a, rows_b)
    if json_out:
        print(
            json.dumps({"a": a.model_dump(mode="json"), "b": b.model_dump(mode="json"), "head_to_head": h2h}, indent=1)
        )
        return
    console = Console()
    for table in compare_tables(a, b, f"{run_a} ({a.model or a.mode})", f"{run_b} ({b.model or b.mode})"):
        console.print(table)
    console.print(
        f"on {h2h['shared']} shared tasks: both correct {h2h['both_correct']} (A faster {h2h['a_faster']}, "
        f"B faster {h2h['b_faster']}); only A correct {h2h['only_a_correct']}, only B correct "
        f"{h2h['only_b_correct']}",
        highlight=False,
    )


def baselines_command(
    task_dir: Path = typer.Argument(..., help="Folder of task files."),
    gpus: Optional[str] = typer.Option(None, "--gpus", help="GPU indices; one of each GPU type is used."),
    device: Optional[str] = typer.Option(None, "--device", help="One device instead of --gpus (cpu for tests)."),
    filter_: Optional[str] = typer.Option(None, "--filter", help="Only tasks whose id matches this regex."),
    limit: Optional[int] = typer.Option(None, "--limit", min=1, help="At most this many tasks."),
    eval_config: Optional[Path] = typer.Option(
        None, "--eval-config", help="JSON of EvalConfig fields (timing, compile_mode...)."
    ),
    no_compile: bool = typer.Option(False, "--no-compile-baseline", help="Time eager only."),
    quiet: bool = typer.Option(
        False, "--quiet", "-q", help="No progress on stderr (which task, what it does now): the result lines only."
    ),
) -> None:
    """Time eager and torch.compile for every task once per GPU type, into the baseline cache that
    evaluations read: a line per task on stdout; while each is timed, progress on stderr (a live display on a
    terminal). Exit codes: 0 all timed, 1 some failed, 2 bad usage."""
    from rich.console import Console

    from cuda_agent.batch.baselines import cache_path, one_device_per_type, time_baselines
    from cuda_agent.batch.tasks import TaskDirError, discover
    from cuda_agent.eval.settings import EvalConfig
    from cuda_agent.progress import Progress

    with fail_on(TaskDirError):
        entries = discover(task_dir, filter_, limit)
    cfg = EvalConfig.model_validate({**_eval_config(eval_config), **({"baselines": ["eager"]} if no_compile else {})})
    console, failed = Console(), 0
    ms = lambda v: "n/a" if v is None else f"{v:.4f} ms"  # noqa: E731
    todo = [(name, dev, e) for name, dev in one_device_per_type(_devices(gpus, device)).items() for e in entries]
    with Progress(quiet=quiet).job("baselines", total=len(todo)) as job:
        for name, dev, e in todo:
            job.step(f"baselines of {e.id} on {name}")
            r = time_baselines(e, dev, cfg, say=job.phase)
            job.advance()
            failed += r.error is not None
            state = "cached" if r.cached else "timed"
            console.print(
                f"{name} {e.id}: eager {ms(r.eager_ms)}, compile {ms(r.compile_ms)} ({state})"
                + (f"; {r.error}" if r.error else ""),
                highlight=False,
                markup=False,
            )
    console.print(f"{len(entries)} tasks; cache {cache_path(cfg)}", highlight=False)
    raise typer.Exit(1 if failed else 0)


@tasks_app.command("import")
def tasks_import(
    parquet: Path = typer.Argument(..., help="CUDA-Agent-Ops-6K parquet (columns ops, data_source, code)."),
    out: Path = typer.Option(..., "--out", help="The task folder to write (one .py per row)."),
) -> None:
    """One task file per row; rows that fail to load go to OUT/_rejected/ and are listed with the
    reason (OUT/import.json). Exit codes: 0 all imported, 1 some rejected, 2 bad usage."""
    from rich.console import Console

    from cuda_agent.batch.importer import import_parquet

    if not parquet.is_file():
        fail(f"parquet file not found: {parquet}")
    with fail_on(ImportError, ValueError):
        report = import_parquet(parquet, out)
    console = Console()
    for r in report.rejected:
        console.print(f"rejected row {r.row} ({r.ops}): {r.error}", highlight=False, markup=False)
    console.print(
        f"{len(report.imported)} tasks written to {out}, {len(report.rejected)} rejected "
        f"(listed in {out / 'import.json'})",
        highlight=False,
    )
    raise typer.Exit(1 if report.rejected else 0)
