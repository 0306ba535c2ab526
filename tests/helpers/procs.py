"""Looking for processes from outside a jail: pids inside it are its own, so tests look for a
marker in command lines (e.g. `sleep 100.101`) across the whole machine."""

from __future__ import annotations

from pathlib import Path


def running(marker: str) -> bool:
    """Whether a live (not zombie) process on this machine has `marker` in its command line."""
    for p in Path("/proc").iterdir():
        try:
            if (
                p.name.isdigit()
                and marker in (p / "cmdline").read_bytes().decode(errors="replace")
                and (p / "stat").read_text().split(")")[-1].split()[0] != "Z"
            ):
                return True
        except OSError:
            continue
    return False


def kill_agent_mid_evaluation(
    task: Path, candidate: Path, config: str, marker: Path, into_s: float = 3.0
) -> tuple[list[int], set[str]]:
    """Start an agent process that holds a warm Evaluator of `task` (EvalConfig(`config`), spares
    started) and evaluates `candidate`; kill it with -9 `into_s` seconds into that evaluation.
    Returns the evaluation processes still alive 15 s later and what it left in /dev/shm."""
    import os
    import signal
    import subprocess
    import sys
    import time

    from cuda_agent.jail import descendants

    shm_before = set(os.listdir("/dev/shm"))
    agent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            f"""
import sys
from pathlib import Path
from cuda_agent.eval.evaluator import Evaluator
from cuda_agent.eval.settings import EvalConfig
from cuda_agent.task import load_task
ev = Evaluator(load_task({str(task)!r}), EvalConfig({config}))
Path({str(marker)!r}).write_text("x")
ev.evaluate(Path({str(candidate)!r}))
""",
        ],
        start_new_session=True,
    )
    deadline = time.time() + 180
    while not marker.exists() and time.time() < deadline and agent.poll() is None:
        time.sleep(0.2)
    time.sleep(into_s)  # into the evaluation: recorder and judge at work, spares starting
    tree = [p for p in descendants(agent.pid) if p != agent.pid]
    assert tree, "the agent had started no evaluation process"
    os.kill(agent.pid, signal.SIGKILL)
    agent.wait(10)
    deadline = time.time() + 15
    alive = tree
    while time.time() < deadline and alive:
        alive = [
            p
            for p in tree
            if Path(f"/proc/{p}").exists() and Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
        ]
        time.sleep(0.3)
    return alive, set(os.listdir("/dev/shm")) - shm_before
