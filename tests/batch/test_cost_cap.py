"""`--max-total-cost`: a cap over the whole batch. Each scripted turn costs $0.01, a task's session
4 turns ($0.04): with a $0.05 cap and one task at a time, the first task runs whole, the second
starts with $0.01 left as its own limit and stops after one turn, the third does not start; a
re-run with a higher cap runs only what is left."""

from batch_helpers import TASK_SRC, batch_args, cache_dir, cli, make_tasks

from cuda_agent.batch.rows import read_rows
from cuda_agent.batch.summary import Summary


def test_the_batch_stops_starting_tasks_once_its_cost_cap_is_spent(tmp_path, tmp_path_factory):
    tasks, scripts = make_tasks(tmp_path, {"a": TASK_SRC, "b": TASK_SRC, "c": TASK_SRC})
    out = tmp_path / "run"
    cache = cache_dir(tmp_path_factory)
    proc = cli(*batch_args(tasks, scripts, out, "-j", "1", "--max-total-cost", "0.05"), cache=cache)
    assert proc.returncode == 0, proc.stderr
    rows = read_rows(out)
    assert set(rows) == {"a", "b"}
    assert (rows["a"].stop_reason, rows["a"].steps) == ("finished", 4) and abs(rows["a"].cost - 0.04) < 1e-9
    assert (rows["b"].stop_reason, rows["b"].steps) == ("max_cost", 1) and abs(rows["b"].cost - 0.01) < 1e-9
    said = " ".join(proc.stderr.split())  # rich wraps lines at the terminal's width
    assert "cost cap (--max-total-cost 0.05) is reached: $0.05 spent, 1 task(s) not started" in said
    s = Summary.model_validate_json((out / "summary.json").read_text())
    assert (s.tasks_selected, s.finished, s.pending) == (3, 2, 1)

    again = cli(*batch_args(tasks, scripts, out, "-j", "1", "--max-total-cost", "1"), cache=cache)
    assert again.returncode == 0, again.stderr
    said = " ".join(again.stderr.split())
    assert "3 tasks: 2 done already, 1 to run" in said and "cost cap" not in said
    rows = read_rows(out)
    assert rows["c"].stop_reason == "finished" and abs(rows["c"].cost - 0.04) < 1e-9


def test_a_cost_cap_with_eval_only_is_a_usage_error(tmp_path, tmp_path_factory):
    tasks, _ = make_tasks(tmp_path, {"a": TASK_SRC})
    proc = cli(
        "batch",
        str(tasks),
        "--out",
        str(tmp_path / "run"),
        "--eval-only",
        "--candidates",
        str(tmp_path),
        "--max-total-cost",
        "1",
        cache=cache_dir(tmp_path_factory),
    )
    assert proc.returncode == 2 and "--eval-only runs no model" in proc.stderr
