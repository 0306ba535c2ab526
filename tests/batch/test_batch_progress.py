"""The batch's progress off a terminal (batch/progress.py): a line per task started and per task
finished, each with how many of the batch are done; quiet (`batch --quiet`): none. The bar on a
terminal is rich's; the real batch's lines are in tests/batch/test_batch_run.py's run."""

import io

from rich.console import Console

from cuda_agent.batch.progress import BatchProgress
from cuda_agent.batch.rows import TaskRow


def row(task_id, **fields) -> TaskRow:
    return TaskRow(task_id=task_id, task_path=f"/tasks/{task_id}.py", **fields)


def run(quiet: bool = False) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=False, width=300)
    with BatchProgress(console, 3, [row("a", outcome="done", correct=True)], quiet=quiet) as bar:
        bar.started("b")
        bar.started("c")
        bar.ended(row("b", outcome="done", stop_reason="finished", correct=True, speedup_eager=1.5))
        bar.ended(row("c", outcome="crashed", stop_reason="crashed", error="exited without a result"))
    return out.getvalue()


def test_off_a_terminal_each_task_started_and_finished_is_a_line_with_the_count_done():
    assert run().splitlines() == [
        "b: started (1 of 3 done, 1 running)",
        "c: started (1 of 3 done, 2 running)",
        "b: done, finished, correct, 1.50x vs eager (2 of 3 done)",
        "c: crashed, crashed, no correct result (exited without a result) (3 of 3 done)",
    ]


def test_quiet_prints_no_progress():
    assert run(quiet=True) == ""


def test_the_batch_command_prints_them_on_stderr_and_quiet_silences_them(tmp_path, tmp_path_factory):
    """A task that cannot load: its process starts and ends within seconds."""
    from batch_helpers import NO_MODEL, batch_args, cache_dir, cli, make_tasks

    tasks, scripts = make_tasks(tmp_path, {"no_model": NO_MODEL})
    loud = cli(*batch_args(tasks, scripts, tmp_path / "loud"), cache=cache_dir(tmp_path_factory))
    assert loud.returncode == 0, loud.stderr
    assert "no_model: started (0 of 1 done, 1 running)" in loud.stderr
    assert "no_model: load_error, load_error, no correct result (" in loud.stderr and "(1 of 1 done)" in loud.stderr
    quiet = cli(*batch_args(tasks, scripts, tmp_path / "quiet"), "--quiet", cache=cache_dir(tmp_path_factory))
    assert quiet.returncode == 0, quiet.stderr
    assert "no_model:" not in quiet.stderr and "1 tasks: 0 done already" in quiet.stderr
    assert "1/1 tasks finished" in quiet.stdout  # the summary line still
