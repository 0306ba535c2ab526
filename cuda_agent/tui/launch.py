"""`optimize --tui`: start the agent as its own process (agent_process.py) and attach the app to
it; closing the app can leave the agent running, and `cuda-agent tui RUN_DIR` attaches again."""

from __future__ import annotations

import time
from pathlib import Path

from cuda_agent.control import Launch, write_launch
from cuda_agent.run import RunRequest
from cuda_agent.tui.agent_process import start_agent


def launch_with_tui(request: RunRequest, runs_dir: Path) -> int:
    """The agent in its own process, the app in this one. Returns the exit code."""
    from rich.console import Console

    from cuda_agent.tui.app import RunApp

    log = Path(runs_dir) / f".agent-{time.strftime('%Y%m%d-%H%M%S')}.log"
    console = Console(stderr=True)
    console.print("starting the agent...", highlight=False)
    try:
        agent, run_dir = start_agent(request, log)
    except RuntimeError as e:
        console.print(f"[red]error[/]: {e}", highlight=False)
        return 4
    script = request.spec.script
    write_launch(run_dir, Launch(settings=request.settings, script=str(Path(script).resolve()) if script else None))
    if log.exists():  # the agent keeps writing to it: a rename follows the open file
        log.rename(run_dir / "agent.log")
    RunApp(run_dir, agent=agent).run()
    console.print(f"the agent goes on in the background; attach again with: cuda-agent tui {run_dir}"
                  if agent.running() else f"run folder: {run_dir}", highlight=False)
    return 0
