"""`cuda-agent tui RUN_DIR`: open a run folder in the app: follow a running agent (attach), or
browse a finished or stopped one and resume it from there."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from cuda_agent import install_hint
from cuda_agent.cli_flags import MODEL, SettingFlags, setting_flags
from cuda_agent.cli_settings import fail, keep_run_device, model_or_exit, resolve_or_exit
from cuda_agent.run_folder import TRAJECTORY, WORKSPACE, RunFolder


@setting_flags(*MODEL)
def tui_command(
    run_dir: Path = typer.Argument(..., help=f"A run folder (what optimize wrote: {WORKSPACE}/, {TRAJECTORY})."),
    flags: SettingFlags = SettingFlags(),  # the model for resuming (--model, --api-base, --tools...)
    script: Optional[Path] = typer.Option(
        None, "--script", help="Scripted model for resuming (optimize --script's file)."
    ),
) -> None:
    """Keys: p pause/resume, a approve mode, m message the model, s stop, r resume, f profile,
    x diff base, y copy the workspace path, q quit (detach or stop); ctrl+p lists them all."""
    if not RunFolder(run_dir).trajectory.is_file():
        fail(f"{run_dir} is not a run folder (no {TRAJECTORY}); give the folder `cuda-agent optimize` printed")
    if flags.get("model") and script:
        fail("give --model or --script for resuming, not both")
    try:
        from cuda_agent.tui.app import RunApp
    except ImportError:
        fail(f"the app needs Textual: {install_hint('tui')}")
    resume_with = None
    if flags.get("model") or script:  # the settings here, with the model given now
        resolved = resolve_or_exit(flags.layer())
        keep_run_device(resolved, run_dir)
        model_or_exit(resolved.settings, script)  # a bad script or no key: one line now, not a failed resume
        resume_with = (resolved.settings, str(script.resolve()) if script else None)
    RunApp(run_dir.resolve(), resume_with=resume_with).run()
