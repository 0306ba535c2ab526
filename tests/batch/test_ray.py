"""`cuda-agent batch --ray auto` on a local Ray instance (the one `auto` starts when no cluster
runs): the same task processes as a local batch, placed by Ray; the same rows, a crashed and a
hung task recorded while the batch goes on, and a re-run that skips what is finished."""

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

pytest.importorskip("ray")

from batch_helpers import HANG, SEGFAULT, TASK_SRC, batch_args, cache_dir, cli, make_tasks  # noqa: E402

from cuda_agent.batch.rows import TaskRow, read_rows  # noqa: E402
from cuda_agent.batch.summary import Summary  # noqa: E402
from cuda_agent.pool import PoolSpec, make_pool  # noqa: E402
from cuda_agent.pool.ray_cluster import RayError, capacity  # noqa: E402


@pytest.fixture(scope="module")
def ray_batch(tmp_path_factory):
    """Two tasks, one whose process segfaults, on `--ray auto`: (tasks, scripts, out, process)."""
    root = tmp_path_factory.mktemp("ray")
    tasks, scripts = make_tasks(root, {"level1/scale_add": TASK_SRC, "level2/segfault": SEGFAULT})
    out = root / "run"
    proc = cli(*batch_args(tasks, scripts, out, "--ray", "auto"), cache=cache_dir(tmp_path_factory))
    return tasks, scripts, out, proc


def test_a_ray_batch_writes_the_local_batchs_rows(ray_batch):
    tasks, scripts, out, proc = ray_batch
    assert proc.returncode == 0, proc.stderr
    assert "on Ray cluster auto (cpu)" in proc.stderr and "joined Ray cluster auto" in proc.stderr
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 2 and all(set(json.loads(line)) == set(TaskRow.model_fields) for line in lines)
    rows = read_rows(out)
    r = rows["level1/scale_add"]  # what test_batch_run.py checks of the same task run locally
    assert (r.outcome, r.stop_reason, r.correct, r.level, r.device) == ("done", "finished", True, "level1", "cpu")
    assert r.reward >= 1 and r.speedup_eager > 0 and r.steps == 4 and r.tokens == 440 and abs(r.cost - 0.04) < 1e-9
    assert (out / "tasks" / "level1" / "scale_add" / "report.md").is_file()
    log = (out / "logs" / "level1" / "scale_add.log").read_text()  # when and on which node it ran
    assert re.search(r"--ray\] started [0-9.]+ on \S+, device cpu", log) and "--ray] ended " in log
    crashed = rows["level2/segfault"]
    assert crashed.outcome == "crashed" and crashed.reward == -1 and "exited without a result" in crashed.error
    s = Summary.model_validate_json((out / "summary.json").read_text())
    assert (s.finished, s.pending, s.overall.correct, s.overall.failures) == (2, 0, 1, {"crashed": 1})


def test_the_ray_a_batch_starts_for_itself_runs_without_metrics(ray_batch):
    # Its raylet's OpenTelemetry exporter segfaulted right after start in CI; off, that thread never runs
    # (this test follows the fixture's batch: the newest Ray session is that batch's own)
    raylet_log = Path(tempfile.gettempdir()) / "ray" / "session_latest" / "logs" / "raylet.out"
    assert "Disabled stats." in raylet_log.read_text()


def test_running_a_ray_batch_again_skips_finished_tasks(ray_batch, tmp_path_factory):
    tasks, scripts, out, proc = ray_batch
    before = (out / "results.jsonl").read_text()
    again = cli(*batch_args(tasks, scripts, out, "--ray", "auto"), cache=cache_dir(tmp_path_factory))
    assert again.returncode == 0, again.stderr
    assert "2 tasks: 2 done already, 0 to run" in again.stderr
    assert "joined Ray cluster" not in again.stderr  # nothing to run: Ray is not started
    assert (out / "results.jsonl").read_text() == before


def test_a_hung_task_is_killed_on_its_node_and_recorded(tmp_path, tmp_path_factory):
    tasks, scripts = make_tasks(tmp_path, {"hang": HANG})
    out = tmp_path / "run"
    proc = cli(
        *batch_args(tasks, scripts, out, "--ray", "auto", "--task-timeout", "5"), cache=cache_dir(tmp_path_factory)
    )
    assert proc.returncode == 0, proc.stderr
    row = read_rows(out)["hang"]
    assert row.outcome == "hung" and "--task-timeout 5" in row.error and 5 <= row.wall_s < 30


def test_an_unreachable_cluster_is_one_clear_error(tmp_path, tmp_path_factory):
    tasks, scripts = make_tasks(tmp_path, {"scale_add": TASK_SRC})
    t0 = time.monotonic()
    proc = cli(*batch_args(tasks, scripts, tmp_path / "run", "--ray", "127.0.0.1:9"), cache=cache_dir(tmp_path_factory))
    assert proc.returncode == 2 and time.monotonic() - t0 < 30
    assert "no Ray cluster answers at 127.0.0.1:9" in proc.stderr and "ray start --head" in proc.stderr
    assert not (tmp_path / "run" / "results.jsonl").exists()


def test_a_dead_head_this_machine_recorded_is_one_clear_error(tmp_path, monkeypatch):
    """`ray start` writes its head's address to <tmp>/ray/ray_current_cluster and a head killed
    without `ray stop` leaves it behind; `auto` joins it, and ray.init waited on it for minutes (a
    batch hung that way). Now: one line saying what to do."""
    from cuda_agent.pool.ray_cluster import check_address

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("127.0.0.1:9")
    t0 = time.monotonic()
    with pytest.raises(RayError, match="does not answer .*ray stop"):
        check_address("auto")
    assert time.monotonic() - t0 < 10
    (tmp_path / "ray" / "ray_current_cluster").unlink()
    check_address("auto")  # nothing recorded: auto starts a Ray of its own, nothing to check


def test_each_task_asks_ray_for_its_share_of_a_gpu(tmp_path):
    """The scheduling arithmetic without a GPU: what a task asks for and how many run at once."""
    gpu = make_pool(PoolSpec(kind="ray", devices=["cuda:0"], slots_per_device=2, lock_dir=tmp_path))
    assert gpu.task_resources() == {"num_cpus": 1, "num_gpus": 0.5} and gpu.place() == "cuda:0"
    one = make_pool(PoolSpec(kind="ray", devices=["cuda:0"], slots_per_device=1, lock_dir=tmp_path))
    assert one.task_resources()["num_gpus"] == 1
    cpu = make_pool(PoolSpec(kind="ray", devices=["cpu"], slots_per_device=2, lock_dir=tmp_path))
    assert cpu.task_resources() == {"num_cpus": 1, "num_gpus": 0}
    assert capacity({"CPU": 64.0, "GPU": 8.0}, "cuda:0", 2) == 16
    assert capacity({"CPU": 4.0, "GPU": 8.0}, "cuda:0", 2) == 4  # a CPU per task too
    assert capacity({"CPU": 2.0}, "cpu", 2) == 2
    with pytest.raises(RayError, match="no GPUs.*--num-gpus"):
        capacity({"CPU": 8.0}, "cuda:0", 2)


@pytest.fixture
def gpu_cluster(tmp_path):
    """A one-node Ray cluster that declares 2 GPUs it does not have (`ray start --num-gpus 2`), so
    Ray's GPU placement runs without a GPU; the address, and the environment a client needs (Ray
    >= 2.59 turns token authentication on for `ray start --head`)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ray_cli = [sys.executable, "-c", "from ray.scripts.scripts import main; main()"]
    started = subprocess.run(
        [
            *ray_cli,
            "start",
            "--head",
            f"--port={port}",
            "--num-cpus=4",
            "--num-gpus=2",
            "--disable-usage-stats",
            "--include-dashboard=false",
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 0, started.stderr[-2000:]
    try:
        yield f"127.0.0.1:{port}", {"RAY_AUTH_MODE": "token"}
    finally:
        subprocess.run([*ray_cli, "stop", "--force"], capture_output=True, timeout=120)


def _barrier(folder, task_id: str, n: int) -> str:
    """Task source that marks `task_id` started and waits (60 s at most) until `n` tasks have;
    a load that cannot reach the folder (a jailed worker) goes on at once."""
    return (
        f"import pathlib as _p, time as _t\n_d = _p.Path({str(folder)!r})\n"
        f"try:\n    _d.mkdir(exist_ok=True)\n    (_d / {task_id!r}).touch()\n"
        f"    _end = _t.monotonic() + 60\n"
        f"    while len(list(_d.iterdir())) < {n} and _t.monotonic() < _end:\n        _t.sleep(0.05)\n"
        f"except OSError:\n    pass\n"
    )


def _placements(out, ids):
    """(start, end, CUDA_VISIBLE_DEVICES) of each task, from the lines its Ray actor logged."""
    spans = []
    for task_id in ids:
        log = (out / "logs" / f"{task_id}.log").read_text()
        start = re.search(r"started ([0-9.]+) on .*CUDA_VISIBLE_DEVICES=(\S+)", log)
        end = re.search(r"ended ([0-9.]+)", log)
        assert start and end, log[-1000:]
        spans.append((float(start.group(1)), float(end.group(1)), start.group(2)))
    return spans


def _overlapping(spans):
    """For each moment a task starts: the tasks running then (it included)."""
    return [[s for s in spans if s[0] <= t < s[1]] for t, _, _ in spans]


def test_ray_places_tasks_on_declared_gpus_by_their_share(tmp_path, tmp_path_factory, gpu_cluster, monkeypatch):
    """No GPU here, so each task's evaluation fails; what is tested is where and when Ray ran it.
    One task per GPU (--evals-per-gpu 1): 2 at once, on different GPUs; two per GPU: 4 at once,
    each GPU shared by two."""
    address, env = gpu_cluster
    monkeypatch.delenv("CUDA_AGENT_EVAL__DEVICE", raising=False)  # a GPU per task (tests/conftest.py sets cpu)
    ids = ["t0", "t1", "t2", "t3"]
    cache = cache_dir(tmp_path_factory)
    for share, at_once in ((1, 2), (2, 4)):
        root = tmp_path / f"share{share}"
        # each task waits at its first load until `at_once` tasks have started: without a GPU a
        # task lasts about a second, and on a loaded 2-core machine the four did not always overlap
        tasks, scripts = make_tasks(root, {i: _barrier(root / "started", i, at_once) + TASK_SRC for i in ids})
        args = [
            "batch",
            str(tasks),
            "--script",
            str(scripts),
            "--no-compile-baseline",
            "--eval-config",
            str(root / "eval.json"),
            "--ray",
            address,
        ]
        out = root / "run"
        os.environ.update(env)
        try:
            proc = cli(*args, "--out", str(out), "--evals-per-gpu", str(share), cache=cache)
        finally:
            for k in env:
                os.environ.pop(k)
        said = " ".join(proc.stderr.split())
        assert proc.returncode == 0, proc.stderr
        assert f"joined Ray cluster {address}: 4 CPUs, 2 GPUs; {at_once} tasks at once" in said
        rows = read_rows(out)
        assert set(rows) == set(ids) and all(r.device == "cuda:0" for r in rows.values())
        assert sorted(p.name for p in (root / "started").iterdir()) == ids
        spans = _placements(out, ids)
        assert {gpu for _, _, gpu in spans} == {"0", "1"}
        for running in _overlapping(spans):
            assert len(running) <= at_once
            per_gpu = [gpu for _, _, gpu in running]
            assert all(per_gpu.count(g) <= share for g in per_gpu)  # a GPU holds at most `share` tasks
        if share == 2:
            assert max(len(r) for r in _overlapping(spans)) == 4  # all four ran together
