"""Ctrl-C stops a batch cleanly and the same command resumes it; a hung task is killed and
recorded while the batch goes on; `baselines` times each task once and then finds it cached."""

import json
import os
import signal
import subprocess
import time

from batch_helpers import HANG, NO_MODEL, TASK_SRC, batch_args, cache_dir, cli, command, honest_script, make_tasks

from cuda_agent.batch.rows import read_rows
from cuda_agent.batch.summary import Summary
from cuda_agent.trajectory import read_trajectory


def _wait_for_evaluation(trajectory, proc, timeout=180):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the batch ended before it could be interrupted"
        if trajectory.is_file() and '"type": "evaluation"' in trajectory.read_text():
            return
        time.sleep(0.05)
    raise AssertionError("no evaluation was recorded in time")


def test_ctrl_c_stops_with_everything_written_and_the_same_command_resumes(tmp_path, tmp_path_factory):
    cache = cache_dir(tmp_path_factory)
    # a dozen benchmarks: the first evaluation is recorded well before the run could end (each takes
    # well under a second on the CPU)
    tasks, scripts = make_tasks(tmp_path, {"scale_add": TASK_SRC}, {"scale_add": honest_script(benchmarks=12)})
    out = tmp_path / "run"
    proc = subprocess.Popen(
        command(*batch_args(tasks, scripts, out)),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CUDA_AGENT_CACHE": str(cache)},
    )
    trajectory = out / "tasks" / "scale_add" / "trajectory.jsonl"
    _wait_for_evaluation(trajectory, proc)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    row = read_rows(out)["scale_add"]
    assert row.outcome == "interrupted"
    summary = Summary.model_validate_json((out / "summary.json").read_text())
    assert (summary.finished, summary.pending) == (0, 1)
    closing = read_trajectory(trajectory)[-1]
    assert closing.type == "closing" and closing.stop_reason == "interrupted"
    steps_before = closing.steps
    assert not (out / "tasks" / "scale_add" / "report.md").exists()  # not finalized: the resumed run is

    again = cli(*batch_args(tasks, scripts, out), cache=cache)
    assert again.returncode == 0, again.stderr
    assert "1 to run (1 resumed)" in again.stderr
    row = read_rows(out)["scale_add"]
    assert (row.outcome, row.stop_reason, row.correct) == ("done", "finished", True)
    records = read_trajectory(trajectory)
    assert sum(r.type == "header" for r in records) == 1 and any(r.type == "resume" for r in records)
    # the scripted model went on where it stopped: every scripted turn taken exactly once
    assert records[-1].steps == len(honest_script(benchmarks=12)) > steps_before
    assert row.steps == records[-1].steps and (out / "tasks" / "scale_add" / "report.md").is_file()


def test_a_hung_task_is_killed_and_recorded_and_the_batch_goes_on(tmp_path, tmp_path_factory):
    tasks, scripts = make_tasks(tmp_path, {"hang": HANG, "no_model": NO_MODEL})
    out = tmp_path / "run"
    t0 = time.monotonic()
    proc = cli(*batch_args(tasks, scripts, out, "--task-timeout", "8"), cache=cache_dir(tmp_path_factory))
    assert proc.returncode == 0, proc.stderr
    assert time.monotonic() - t0 < 60
    rows = read_rows(out)
    assert rows["hang"].outcome == "hung" and "--task-timeout 8" in rows["hang"].error
    assert rows["no_model"].outcome == "load_error"
    assert "hung 1" in (out / "summary.md").read_text()


def test_baselines_are_timed_once_then_cached(tmp_path, tmp_path_factory):
    tasks, _ = make_tasks(tmp_path, {"level1/a": TASK_SRC, "level1/b": TASK_SRC.replace("N = 1 << 15", "N = 1 << 14")})
    cache = tmp_path / "cache"  # a cache of its own: nothing timed before
    args = [
        "baselines",
        str(tasks),
        "--device",
        "cpu",
        "--no-compile-baseline",
        "--eval-config",
        str(tmp_path / "eval.json"),
    ]
    first = cli(*args, cache=cache)
    assert first.returncode == 0, first.stdout + first.stderr
    assert first.stdout.count("(timed)") == 2 and "eager n/a" not in first.stdout
    second = cli(*args, cache=cache)
    assert second.returncode == 0 and second.stdout.count("(cached)") == 2
    assert len(json.loads((cache / "baselines.json").read_text())) == 2
