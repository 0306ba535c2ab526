"""A real batch on CPU: two scale-add tasks with a scripted model, one task whose process
segfaults and one that cannot load, in level folders; then a re-run, --eval-only and compare."""

import json
from pathlib import Path

from batch_helpers import CPU_TASK, cache_dir, cli

from cuda_agent.batch.rows import read_rows
from cuda_agent.batch.summary import Summary, metrics
from cuda_agent.trajectory import read_trajectory


def test_every_task_gets_a_row_and_failures_do_not_stop_the_batch(level_batch):
    root, tasks, scripts, out, proc = level_batch
    assert proc.returncode == 0, proc.stderr
    rows = read_rows(out)
    assert set(rows) == {"level1/scale_add", "level1/scale_add_2", "level2/segfault", "level2/no_model"}
    for task_id in ("level1/scale_add", "level1/scale_add_2"):
        r = rows[task_id]
        assert (r.outcome, r.stop_reason, r.correct, r.level) == ("done", "finished", True, "level1")
        assert r.reward >= 1 and r.speedup_eager > 0 and r.steps == 4 and r.tokens == 440
        assert abs(r.cost - 0.04) < 1e-9 and r.device == "cpu"
    crashed = rows["level2/segfault"]
    assert crashed.outcome == "crashed" and not crashed.correct and crashed.reward == -1
    assert "exited without a result" in crashed.error
    bad = rows["level2/no_model"]
    assert bad.outcome == "load_error" and "no class Model" in bad.error


def test_each_task_run_folder_is_what_optimize_writes(level_batch):
    out = level_batch[3]
    run = out / "tasks" / "level1" / "scale_add"
    row = read_rows(out)["level1/scale_add"]
    assert Path(row.run_dir) == run and Path(row.report) == run / "report.md"
    assert (run / "workspace.git").is_dir() and (run / "dropin" / "layer.py").is_file()
    records = read_trajectory(run / "trajectory.jsonl")
    assert records[0].type == "header" and records[-1].type == "closing"
    assert records[-1].stop_reason == "finished" and records[0].model == "scripted"
    assert "re-verif" in (run / "report.md").read_text()
    # each task's process logs to the batch's logs/, not into the run folder
    assert (out / "logs" / "level1" / "scale_add.log").is_file()


def test_later_tasks_get_a_process_whose_start_up_was_done_ahead(level_batch):
    """Four tasks, two at a time: the third and fourth are handed to processes started while the
    first two started, which had imported torch and the harness before their job came."""
    import re

    out = level_batch[3]
    waited = []
    for log in (out / "logs").rglob("*.log"):
        m = re.search(
            r"started ([0-9.]+), imports done ([0-9.]+) \(ahead of its job\), job received ([0-9.]+)", log.read_text()
        )
        if m:
            started, ready, received = map(float, m.groups())
            waited.append(received - ready)
    assert len(waited) >= 2 and max(waited) > 0, waited  # at least one was ready before its job came


def test_summary_files_hold_the_metrics_of_the_rows(level_batch):
    out = level_batch[3]
    rows = read_rows(out)
    s = Summary.model_validate_json((out / "summary.json").read_text())
    assert s.overall == metrics(rows.values())
    assert (s.finished, s.pending, s.overall.correct, s.overall.correctness_rate) == (4, 0, 2, 0.5)
    assert s.overall.failures == {"crashed": 1, "load_error": 1}
    assert set(s.levels) == {"level1", "level2"} and s.levels["level1"].correctness_rate == 1.0
    # eager only (--no-compile-baseline): compile metrics are not applicable, not zero
    assert s.overall.geomean_speedup_compile is None
    md = (out / "summary.md").read_text()
    assert "| correct | 50.0% (2) | 100.0% (2) | 0.0% (0) |" in md and "counts as speedup 1.0" in md
    assert (out / "speedups.png").stat().st_size > 1000


def test_running_again_skips_finished_tasks(level_batch, tmp_path_factory):
    root, tasks, scripts, out, _ = level_batch
    trajectory = out / "tasks" / "level1" / "scale_add" / "trajectory.jsonl"
    before = trajectory.read_bytes()
    from batch_helpers import batch_args

    again = cli(*batch_args(tasks, scripts, out), cache=cache_dir(tmp_path_factory))
    assert again.returncode == 0 and "4 done already, 0 to run" in again.stderr
    assert trajectory.read_bytes() == before
    other = cli(
        "batch",
        str(CPU_TASK.parent),
        "--out",
        str(out),
        "--script",
        str(scripts / "level1" / "scale_add.json"),
        "--device",
        "cpu",
        cache=cache_dir(tmp_path_factory),
    )
    assert other.returncode == 2 and "same task folder" in other.stderr


def test_eval_only_scores_candidates_and_compare_puts_two_batches_side_by_side(level_batch, tmp_path_factory):
    root, tasks, _, out, _ = level_batch
    cands = root / "candidates"
    for task_id, which in (("level1/scale_add", "honest"), ("level1/scale_add_2", "wrong")):
        (cands / task_id / "kernels").mkdir(parents=True)
        (cands / task_id / "model_new.py").write_text((CPU_TASK / "honest" / "model_new.py").read_text())
        (cands / task_id / "kernels" / "scale_add.cu").write_text(
            (CPU_TASK / which / "kernels" / "scale_add.cu").read_text()
        )
    ev_out = root / "eval-run"
    proc = cli(
        "batch",
        "--eval-only",
        str(tasks),
        "--candidates",
        str(cands),
        "--out",
        str(ev_out),
        "--device",
        "cpu",
        "--no-compile-baseline",
        "--eval-config",
        str(root / "eval.json"),
        "--filter",
        "level1|no_model",
        cache=cache_dir(tmp_path_factory),
    )
    assert proc.returncode == 0, proc.stderr
    rows = read_rows(ev_out)
    assert set(rows) == {"level1/scale_add", "level1/scale_add_2", "level2/no_model"}
    assert rows["level1/scale_add"].correct and rows["level1/scale_add"].status == "correct"
    assert not rows["level1/scale_add_2"].correct and rows["level1/scale_add_2"].status == "incorrect"
    assert rows["level2/no_model"].outcome == "no_candidate"
    verdict = json.loads((ev_out / "tasks" / "level1" / "scale_add" / "verdict.json").read_text())
    assert verdict["verdict"]["status"] == "correct" and rows["level1/scale_add"].steps == 0

    cmp = cli("compare", str(out), str(ev_out), "--json", cache=cache_dir(tmp_path_factory))
    assert cmp.returncode == 0, cmp.stderr
    data = json.loads(cmp.stdout)
    assert (
        data["a"]["overall"]["correctness_rate"] == 0.5 and abs(data["b"]["overall"]["correctness_rate"] - 1 / 3) < 1e-9
    )
    h2h = data["head_to_head"]
    assert (h2h["shared"], h2h["both_correct"], h2h["only_a_correct"], h2h["only_b_correct"]) == (3, 1, 1, 0)
    table = cli("compare", str(out), str(ev_out), cache=cache_dir(tmp_path_factory))
    assert "geomean speedup vs eager" in table.stdout and "level1: A" in table.stdout
    assert "only A correct 1" in table.stdout


def test_bad_usage_is_one_clear_line(tmp_path, tmp_path_factory):
    cache = cache_dir(tmp_path_factory)
    r = cli("batch", str(tmp_path / "none"), "--out", str(tmp_path / "o"), "--script", "x.json", cache=cache)
    assert r.returncode == 2 and "task folder not found" in r.stderr
    r = cli("batch", str(CPU_TASK), "--out", str(tmp_path / "o"), cache=cache)
    assert r.returncode == 2 and "give --model" in r.stderr
    r = cli("batch", "--eval-only", str(CPU_TASK), "--out", str(tmp_path / "o"), cache=cache)
    assert r.returncode == 2 and "--candidates" in r.stderr
    r = cli("compare", str(tmp_path), str(tmp_path), cache=cache)
    assert r.returncode == 2 and "not a batch run folder" in r.stderr
