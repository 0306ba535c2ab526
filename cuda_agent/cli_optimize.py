"""`cuda-agent optimize TASK`: run the agent on one task, headless or in the terminal app, into a
run folder (`workspace/`: git history of every evaluated version, `best` branch; `trajectory.jsonl`:
every turn, tool result and evaluation, flushed as it happens). The run is cuda_agent/run.py's;
this turns flags into settings (cuda_agent/settings.py) and prints the outcome.

`--resume RUN_DIR` continues a stopped or killed run in the same workspace and trajectory
(agent/resume.py): the task, the evaluation settings and the tools come from the run (--device may
move it), the model and the limits (counting the whole run) from the settings given now.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from cuda_agent.cli_flags import JUDGE, MODEL, SettingFlags, setting_flags
from cuda_agent.cli_runs import crashed, new_run_folder, open_or_exit
from cuda_agent.cli_settings import fail, keep_run_device, model_or_exit, require_device, resolve_or_exit


@setting_flags(*MODEL, "out", "eval.device", "limits", *JUDGE)
def optimize_command(
    task: Optional[str] = typer.Argument(
        None, help="The task: path/to/file.py or path/to/file.py::ClassName (not with --resume)."
    ),
    flags: SettingFlags = SettingFlags(),  # --model, --tools..., --max-steps...: the settings named above
    script: Optional[Path] = typer.Option(
        None,
        "--script",
        help=(
            "Replay a scripted model instead of calling an LLM: a JSON list of responses, or an object with "
            '"responses" (and "name"), as examples/scale_add_small/demo_session.json; on --resume the turns already '
            "taken are skipped."
        ),
    ),
    resume: Optional[Path] = typer.Option(
        None,
        "--resume",
        metavar="RUN_DIR",
        help=(
            "Continue a stopped or killed run (same workspace and trajectory); model and limits from the settings "
            "now, limits counting the whole run. A finished run is left as it is: one line, and its exit code."
        ),
    ),
    inputs: Optional[Path] = typer.Option(
        None, "--inputs", help="File defining get_inputs()/get_init_inputs() when the task lacks them."
    ),
    json_out: bool = typer.Option(False, "--json", help="Print the result as JSON."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="Print nothing but the result line."),
    confirm: bool = typer.Option(
        False, "--confirm", help="Ask before each tool call: approve, reject with a reason, or edit its arguments."
    ),
    tui: bool = typer.Option(
        False,
        "--tui",
        help=(
            "Run it in the terminal app: watch, pause, approve, message, stop (the agent runs in its own process; "
            "closing the app can detach)."
        ),
    ),
) -> None:
    """Exit codes: 0 improved (more than 5% faster than torch.compile), 1 correct but not faster,
    2 bad usage (one line on stderr, nothing made: a missing or malformed --script, no API key...),
    3 no correct version, 4 the run failed (a model error or a fault: one line on stderr, the
    traceback in RUN_DIR/error.log), 5 the task cannot be scored. Settings: `cuda-agent config show`."""
    from rich.console import Console
    from rich.markup import escape

    from cuda_agent.agent.script_device import cpu_refusal as script_cpu_refusal
    from cuda_agent.run import RunHooks, RunRequest, RunSpec, finished_line, finished_run, run_task

    console = Console(stderr=json_out, quiet=quiet and not json_out)
    if (task is None) == (resume is None):
        fail("give a TASK to start a run, or --resume RUN_DIR to continue one, not both")
    if resume is not None and (inputs is not None or "tools.allow_shell" in flags or "eval.baselines" in flags):
        fail("--inputs, --allow-shell and --no-compile-baseline come from the run being resumed; leave them out")
    if flags.get("model") and script:
        fail("give --model (an LLM through litellm) or --script (a scripted model), not both")
    if resume is not None and (saved := finished_run(resume)) is not None:  # nothing runs, nothing changes
        Console(stderr=json_out).print(escape(finished_line(saved)), highlight=False, soft_wrap=True)
        if json_out:
            print(json.dumps(saved.summary(), indent=1))
        raise typer.Exit(saved.exit_code)
    resolved = resolve_or_exit(flags.layer())
    settings = resolved.settings
    if script is None and not settings.model:
        fail("give --model (or set CUDA_AGENT_MODEL, or model in cuda-agent.toml) or --script")
    keep_run_device(resolved, resume)
    require_device(settings.eval.device)  # before the task loads or the model is called
    model_or_exit(settings, script)  # a bad script or no key: one line now, not a failed run in a new folder
    if script is not None and settings.eval.device == "cpu" and (refusal := script_cpu_refusal(script, task)):
        fail(refusal)  # its kernels need a GPU: every version would be a runtime error
    spec = RunSpec(
        task=task,
        inputs=inputs,
        resume=resume,
        script=script.resolve() if script else None,
        workspace=None if resume is not None else new_run_folder(settings.out, task, inputs),
    )
    if tui:
        from cuda_agent.tui.launch import launch_with_tui

        request = RunRequest(
            spec=spec, settings=settings, control=True, approve=confirm, settings_record=resolved.record()
        )
        raise typer.Exit(launch_with_tui(request, settings.out if resume is None else resume.parent))
    from cuda_agent.agent.console import ConsoleApproval, LiveWriter
    from cuda_agent.progress import Progress

    opened = open_or_exit(spec, settings)
    run_dir = opened[0].workspace.run_folder.path
    for lock in opened[0].workspace.removed_locks:
        Console(stderr=True).print(
            f"removed {escape(str(lock))}: a stale git lock left by a process that is no longer running",
            highlight=False,
            soft_wrap=True,
        )
    console.print(f"run folder: {run_dir}", highlight=False, soft_wrap=True)  # a path to copy: never wrapped
    live = not (quiet or json_out or confirm) and console.is_terminal
    writer = (lambda path, llm: LiveWriter(path, console, llm.name)) if live else None  # None: run_task's plain writer
    # the first evaluation and the re-verification, shown as they go: below the status line on a
    # terminal (the same console, so rich nests the two), else as lines on stderr
    progress = Progress(console if live else Console(stderr=True), quiet=quiet)
    try:
        hooks = RunHooks(writer=writer, approval=ConsoleApproval(Console()) if confirm else None, progress=progress)
        done = run_task(spec, settings, hooks, opened=opened, settings_record=resolved.record())
    except Exception as e:
        crashed(e, run_dir)
    if json_out:
        print(json.dumps(done.summary(), indent=1))
    else:
        v = done.verified
        # no compile baseline (--no-compile-baseline): no ratio to it, rather than "0.00x"
        vs_compile = (
            "no torch.compile baseline"
            if v is None or v.speedup_vs_compile is None
            else f"{v.speedup_vs_compile:.2f}x vs torch.compile"
        )
        line = (
            f"best: version {done.best.version}, re-verified, reward {v.reward}, "
            f"{v.timing.median_ms if v.timing else 0:.4f} ms, {vs_compile}"
            if v
            else "no correct version passed re-verification"
        )
        Console().print(
            f"{done.stop_reason} after {done.steps} steps; {line}; {run_dir}", highlight=False, soft_wrap=True
        )
        if done.dropin:
            Console().print(f"drop-in: {done.dropin} (see its README.md); report: {done.report}", highlight=False)
        if done.error:
            Console(stderr=True).print(f"[red]error[/]: {escape(done.error)}", highlight=False, soft_wrap=True)
    raise typer.Exit(done.exit_code)
