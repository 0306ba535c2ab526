"""`cuda-agent eval TASK --candidate DIR`: build, check, time and score one candidate; no LLM."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path
from typing import NoReturn, Optional

import typer

from cuda_agent.cli_flags import SettingFlags, setting_flags
from cuda_agent.cli_settings import fail, fail_on, require_device, resolve_or_exit


@setting_flags("eval")
def eval_command(
    task: str = typer.Argument(..., help="The task: path/to/file.py or path/to/file.py::ClassName."),
    candidate: Path = typer.Option(..., "--candidate", "-c", help="Folder with model_new.py and kernels/*.cu."),
    inputs: Optional[Path] = typer.Option(
        None,
        "--inputs",
        help="File defining get_inputs()/get_init_inputs() when the task lacks them (default: <task>.inputs.py).",
    ),
    flags: SettingFlags = SettingFlags(),  # --device, --sets, --no-server...: the [eval] settings that have flags
    tolerance: Optional[str] = typer.Option(
        None,
        "--tolerance",
        help=(
            "Tolerance preset: kernelbench (fp32 1e-4, fp16/bf16 1e-2; the default) or cuda-agent (1e-2 for all) "
            "(setting: eval.tolerances)."
        ),
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the verdict as JSON."),
) -> None:
    """Exit codes: 0 correct, 1 incorrect or a guard fired, 2 bad usage, 3 compile error,
    4 runtime error or timeout, 5 task unscorable or harness error. Bad usage is one line on stderr;
    the verdict goes to stdout (with --json, one JSON object), with what went wrong in the candidate
    (a compile log, a runtime error's traceback). The first eval starts a warm server in the background
    (stderr says so); later evals of the same task and settings skip the start-up (the same judge,
    jail and checks; a fresh recorder and judge for each candidate)."""
    from rich.console import Console

    from cuda_agent.eval.tolerance import Tolerances
    from cuda_agent.task import TaskError, load_task, parse_task_ref

    cfg = resolve_or_exit(flags.layer()).settings.eval
    with fail_on(TaskError):  # the path only (torch is not loaded yet): a missing task is said first
        parse_task_ref(task)
    if not candidate.is_dir():
        fail(f"candidate folder not found: {candidate}")
    if not (candidate / "model_new.py").is_file():  # nothing to evaluate: bad usage, not a verdict
        fail(
            f"{candidate} has no model_new.py: a candidate folder holds model_new.py (class ModelNew) and kernels/*.cu"
        )
    if (rejected := _static_rejection(candidate, cfg.allow_precision)) is not None:
        _report(rejected, {"path": task}, f"{task} <- {candidate}", candidate, cfg.device, json_out)
    if tolerance is not None:
        try:
            cfg.tolerances = Tolerances.preset(tolerance)
        except (KeyError, ValueError):
            fail(f"unknown tolerance preset {tolerance!r}; use kernelbench or cuda-agent")
    if cfg.server_idle_s > 0:
        _on_server(task, inputs, cfg, candidate, json_out)  # reports and exits, unless it had no answer
    require_device(cfg.device)  # before the task loads: no GPU is one line, not a CPU run that says "incorrect"
    with fail_on(TaskError):
        t = load_task(task, inputs=inputs)
    from cuda_agent.eval.evaluator import Evaluator
    from cuda_agent.eval.verdict import harness_error

    try:
        with Console(stderr=json_out).status("evaluating..."), Evaluator(t, cfg, ahead="first") as ev:
            verdict = ev.evaluate(candidate)
            task_info = ev.describe_task()
    except Exception as e:  # a fault of the harness itself: still one verdict (exit 5), never a traceback
        verdict = harness_error(e)
        task_info = {"path": str(t.path), "class": t.class_name, "hash": t.source_hash}
    _report(verdict, task_info, f"{t.name} <- {candidate}", candidate, cfg.device, json_out)


def _on_server(task: str, inputs: Path | None, cfg, candidate: Path, json_out: bool) -> None:
    """Evaluate on the warm server (eval/server.py), started here if none answers; report and exit.
    Returns only when the server gave no answer: the caller evaluates in this process."""
    from rich.console import Console

    from cuda_agent.eval import server_client
    from cuda_agent.eval.verdict import Verdict
    from cuda_agent.task import TaskError, parse_task_ref

    with fail_on(TaskError):  # the path only: loading the task imports torch, which the server has done already
        path, cls = parse_task_ref(task)
    if inputs is not None and not inputs.is_file():
        fail(f"inputs file not found: {inputs}")
    say = partial(Console(stderr=True).print, highlight=False, markup=False, soft_wrap=True)
    cfg = cfg.model_copy(update={"cache_dir": cfg.cache_root().resolve()})  # the server runs in /: no relative paths
    request = {
        "op": "evaluate",
        "task": str(path.resolve()) + (f"::{cls}" if cls else ""),
        "inputs": str(inputs.resolve()) if inputs else None,
        "cfg": cfg.model_dump(mode="json"),
        "candidate": str(candidate.resolve()),
    }
    with Console(stderr=json_out).status("evaluating..."):
        # no server for this task yet: the device is checked first (one line, not a server that cannot use it)
        answer = server_client.evaluate(cfg, request, say, before_start=lambda: require_device(cfg.device))
    if answer is None:
        return
    if "usage" in answer:
        fail(answer["usage"])
    _report(
        Verdict.model_validate(answer["verdict"]),
        answer["task"],
        f"{answer['name']} <- {candidate}",
        candidate,
        cfg.device,
        json_out,
        server=answer["server"],
    )


def _report(
    verdict, task_info: dict, title: str, candidate: Path, device: str, json_out: bool, server: dict | None = None
) -> NoReturn:
    """The verdict on stdout (a table, or one JSON object), and its exit code. `server`: which warm
    server evaluated it (pid, its evaluations of this task, whether its evaluator was reused)."""
    from rich.console import Console

    from cuda_agent.eval.render import EXIT_CODES, render_verdict

    if json_out:
        print(
            json.dumps(
                {
                    "task": task_info,
                    "candidate": str(candidate),
                    "device": device,
                    "server": server,
                    "verdict": verdict.model_dump(),
                },
                indent=1,
            )
        )
    else:
        render_verdict(verdict, Console(), title=title)
    raise typer.Exit(EXIT_CODES[verdict.status])


def _static_rejection(candidate: Path, allow_precision: bool):
    """The static guards before torch, CUDA or the task start (under a second): the verdict of a
    candidate they reject, else None. Rules that depend on the task's dtypes wait for the evaluator."""
    from cuda_agent.eval.guards.static import check_candidate_static
    from cuda_agent.eval.verdict import Verdict

    findings = check_candidate_static(candidate, task_fp32=False, allow_precision=allow_precision)
    if not any(f.severity == "fail" for f in findings):
        return None
    return Verdict(
        status="guard_violation",
        findings=findings,
        notes=["rejected by the static guards before the task was loaded or anything was built"],
    )
