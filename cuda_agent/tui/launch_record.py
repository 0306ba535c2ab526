"""`launch.json` in the run folder's control/ (run_folder.py names it): how the TUI started the
agent, so that it can start it again the same way to resume the run. Apart from control.py, the
channel the agent itself reads and writes, which needs no settings."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel

from cuda_agent.run_folder import RunFolder
from cuda_agent.settings import Settings


class Launch(BaseModel):
    """What the agent was started with, for resuming it the same way (settings hold no key)."""

    settings: Settings
    script: str | None = None  # a scripted model instead of settings.model


def read_launch(run_dir: Path) -> Launch | None:
    try:
        return Launch.model_validate_json(RunFolder(run_dir).launch.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_launch(run_dir: Path, launch: Launch) -> None:
    path = RunFolder(run_dir).launch
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(launch.model_dump_json(indent=1), encoding="utf-8")
