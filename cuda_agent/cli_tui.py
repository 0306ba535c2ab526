"""`cuda-agent tui RUN_DIR`: open a run folder in the app: follow a running agent (attach), or
browse a finished or stopped one and resume it from there."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer


def tui_command(
    run_dir: Path = typer.Argument(..., help="A run folder (what optimize wrote: workspace/, trajectory.jsonl)."),
    model: Optional[str] = typer.Option(None, "--model", "-m", help="Model for resuming, if the run was not started from the app."),
    api_base: Optional[str] = typer.Option(None, "--api-base", help="OpenAI-compatible server URL, for resuming."),
    script: Optional[Path] = typer.Option(None, "--script", help="Scripted model for resuming (JSON)."),
) -> None:
    """Keys: p pause/resume, a approve mode, m message the model, s stop, r resume, f profile,
    x diff base, y copy the workspace path, q quit (detach or stop); ctrl+p lists them all."""
    from rich.console import Console

    if not (run_dir / "trajectory.jsonl").is_file():
        Console(stderr=True).print(f"[red]error[/]: {run_dir} is not a run folder (no trajectory.jsonl); give the "
                                   "folder `cuda-agent optimize` printed", highlight=False)
        raise typer.Exit(2)
    if model and script:
        Console(stderr=True).print("[red]error[/]: give --model or --script for resuming, not both", highlight=False)
        raise typer.Exit(2)
    try:
        from cuda_agent.tui.app import RunApp
    except ImportError:
        Console(stderr=True).print("[red]error[/]: the app needs Textual: pip install 'cuda-agent[tui]'",
                                   highlight=False)
        raise typer.Exit(2)
    resume_with = None
    if model or script:  # the settings here, with the model given now
        from cuda_agent.cli_settings import resolve_or_exit

        settings = resolve_or_exit({"model": model, "api_base": api_base}, detect_device=False).settings
        resume_with = (settings, str(script.resolve()) if script else None)
    RunApp(run_dir.resolve(), resume_with=resume_with).run()
