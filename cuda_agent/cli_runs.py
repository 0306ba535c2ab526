"""What `optimize` and `mcp` share to open a run: its folder, one line for what cannot be opened, a crash."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Optional

from cuda_agent.cli_settings import fail, fail_on, out_folder_problem
from cuda_agent.run_folder import RunFolder

if TYPE_CHECKING:
    from cuda_agent.agent.resume import ResumeState
    from cuda_agent.environment import Environment
    from cuda_agent.run import RunSpec
    from cuda_agent.settings import Settings


def crashed(e: Exception, run_dir: Optional[Path]) -> NoReturn:
    """A failure no part of the run turned into a verdict: one line on stderr, the traceback in the run
    folder's error.log, exit code 4 (the run failed)."""
    import traceback

    where = ""
    if run_dir is not None and Path(run_dir).is_dir():
        log = RunFolder(run_dir).error_log
        with contextlib.suppress(OSError):
            log.write_text("".join(traceback.format_exception(e)))
            where = f" (traceback in {log})"
    first = (str(e).strip().splitlines() or [""])[0][:300]
    fail(f"the run failed: {type(e).__name__}: {first}{where}", code=4)


def new_run_folder(out: Path, task: str, inputs: Optional[Path]) -> Optional[Path]:
    """The workspace path of a new run when `out` lies in a folder a git repository ignores (a clone's
    `runs`): the run folder is made here, inside that ignored folder. None when `out` is outside any
    repository (the run makes its folder itself); a tracked folder is refused (out_folder_problem)."""
    from cuda_agent.task import TaskError, load_task
    from cuda_agent.workspace.paths import WorkspaceError, enclosing_git_root, new_run_dir

    if problem := out_folder_problem(out):
        fail(problem)
    if enclosing_git_root(out) is None:
        return None
    with fail_on(TaskError, WorkspaceError):
        return RunFolder(new_run_dir(out, load_task(task, inputs=inputs).name)).workspace


def open_or_exit(spec: RunSpec, settings: Settings) -> tuple[Environment, ResumeState | None]:
    """run.open_run, or one line and the exit: the run folder made for a new run is removed again
    (it is empty), and a fault that is not the user's is a crash (exit 4, error.log)."""
    from cuda_agent.run import RunError, open_run

    try:
        return open_run(spec, settings)
    except RunError as e:
        if spec.workspace is not None:  # the run folder made for it, left empty
            with contextlib.suppress(OSError):
                RunFolder.around(spec.workspace).path.rmdir()
        fail(str(e))
    except Exception as e:  # a bug or a broken run folder: one line, never a traceback and exit 1
        crashed(e, spec.resume)
