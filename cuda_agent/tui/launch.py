"""`optimize --tui`: start the agent as its own process (agent_process.py) and attach the app to
it; closing the app can leave the agent running, and `cuda-agent tui RUN_DIR` attaches again."""

from __future__ import annotations

import time
from pathlib import Path

from cuda_agent.control import agent_activity, read_state
from cuda_agent.run import RunRequest
from cuda_agent.run_folder import RunFolder
from cuda_agent.tui.agent_process import start_agent
from cuda_agent.tui.launch_record import Launch, write_launch


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
        log.rename(RunFolder(run_dir).agent_log)
    choice = RunApp(run_dir, agent=agent).run()
    state = read_state(run_dir)
    ended = state is not None and not state.running  # its loop: the process may still re-verify
    console.print(
        closing_line(choice, agent.running(), run_dir, ended=ended, busy=agent_activity(state)),
        highlight=False,
        soft_wrap=True,
    )
    return 0


def closing_line(
    choice: str | None, running: bool, run_dir: Path, *, ended: bool = False, busy: str | None = None
) -> str:
    """What the terminal says once the app is closed: `choice` is the quit dialog's (stop, detach), None
    when the app quit at once (nothing was running); `ended`: the agent's loop ended, and its process,
    if still `running`, is finishing the run (`busy`: with what)."""
    if running and ended:
        now = f" ({busy})" if busy else ""
        report = RunFolder(run_dir).report.name
        return (
            f"the run has ended; its process finishes it in the background{now}: {report} and the drop-in "
            f"follow in {run_dir} (cuda-agent tui {run_dir} shows it)"
        )
    if choice == "stop" and running:
        return (
            f"the agent stops after its current step (everything is kept); resume with: cuda-agent tui {run_dir}, "
            "then r"
        )
    if running:
        return f"the agent goes on in the background; attach again with: cuda-agent tui {run_dir}"
    return f"run folder: {run_dir}"
