"""Task discovery (a KernelBench-like layout), the plan on re-run, and the local pool's placement
and cross-process evaluation slots."""

import json
import multiprocessing
import time

import pytest
from batch_helpers import NO_MODEL, TASK_SRC

from cuda_agent.batch.plan import Layout, plan
from cuda_agent.batch.rows import TaskRow, read_rows, write_rows
from cuda_agent.batch.tasks import TaskDirError, check_loads, discover
from cuda_agent.pool import PoolSpec, make_pool
from cuda_agent.pool.slots import hold_slot


def touch(path, text="x = 1\n"):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_discover_a_kernelbench_checkout(tmp_path):
    for name in [
        "level1/10_Conv.py",
        "level1/2_ReLU.py",
        "level2/1_Fused.py",
        "level1/2_ReLU.inputs.py",
        "level1/__init__.py",
        "_rejected/bad.py",
        "level1/__pycache__/x.py",
        "top.py",
    ]:
        touch(tmp_path / name)
    entries = discover(tmp_path)
    # natural order (2 before 10), sidecars, __init__, _private and cache folders skipped
    assert [e.id for e in entries] == ["level1/2_ReLU", "level1/10_Conv", "level2/1_Fused", "top"]
    assert [e.level for e in entries] == ["level1", "level1", "level2", None]
    assert [e.id for e in discover(tmp_path, "ReLU|Fused", limit=1)] == ["level1/2_ReLU"]
    with pytest.raises(TaskDirError, match="no task files matching"):
        discover(tmp_path, "nothing")
    with pytest.raises(TaskDirError, match="not a regular expression"):
        discover(tmp_path, "(")
    with pytest.raises(TaskDirError, match="task folder not found"):
        discover(tmp_path / "missing")


def test_check_loads_gives_the_reason(tmp_path):
    touch(tmp_path / "ok.py", TASK_SRC)
    touch(tmp_path / "no_model.py", NO_MODEL)
    touch(tmp_path / "syntax.py", "def (:\n")
    ok, no_model, syntax = (
        e for e in sorted(discover(tmp_path), key=lambda e: ["ok", "no_model", "syntax"].index(e.id))
    )
    assert check_loads(ok) is None
    assert "no class Model" in check_loads(no_model) and "Other" in check_loads(no_model)
    assert "SyntaxError" in check_loads(syntax)


def _row(task_id, outcome, **kw):
    return TaskRow(task_id=task_id, task_path=f"/t/{task_id}.py", outcome=outcome, **kw)


def test_plan_skips_finished_adopts_unrecorded_resumes_started_and_restarts_the_rest(tmp_path):
    for name in ["done", "crashed", "adopt", "started", "empty", "fresh"]:
        touch(tmp_path / "tasks" / f"{name}.py")
    entries = discover(tmp_path / "tasks")
    layout = Layout(tmp_path / "run")
    rows = {
        "done": _row("done", "done", correct=True),
        "crashed": _row("crashed", "crashed"),
        "started": _row("started", "interrupted"),
    }
    layout.out.mkdir()
    write_rows(layout.out, rows)
    assert read_rows(layout.out) == rows
    # adopt: the task's process wrote its row, the batch was killed before recording it
    touch(layout.log("adopt", "result.json"), _row("adopt", "done").model_dump_json())
    touch(layout.run_dir("started") / "trajectory.jsonl", json.dumps({"type": "header"}) + "\n")
    touch(layout.run_dir("empty") / "trajectory.jsonl", "")  # killed before its first record
    actions = {p.entry.id: p.action for p in plan(entries, rows, layout)}
    assert actions == {
        "done": "skip",
        "crashed": "skip",
        "adopt": "adopt",
        "started": "resume",
        "empty": "new",
        "fresh": "new",
    }
    assert not layout.run_dir("empty").exists()  # nothing to continue from: removed, started anew
    retry = {p.entry.id: p.action for p in plan(entries, rows, layout, retry_failed=True)}
    assert retry["crashed"] == "new" and retry["done"] == "skip"
    assert {p.action for p in plan(entries, rows, layout, resumable=False) if p.entry.id == "started"} == {"new"}
    redo = plan(entries, rows, layout, redo=True)
    assert {p.action for p in redo} == {"new"} and not layout.run_dir("started").exists()


def test_local_pool_places_on_the_least_loaded_device(tmp_path):
    pool = make_pool(PoolSpec(devices=["cuda:0", "cuda:1"], lock_dir=tmp_path))
    assert [pool.place() for _ in range(3)] == ["cuda:0", "cuda:1", "cuda:0"]
    pool.release("cuda:0")
    pool.release("cuda:0")
    assert pool.place() == "cuda:0"
    assert pool.place() == "cuda:0"  # a tie (1 and 1) goes to the first device listed


def _hold(lock_dir, started, seconds):
    with hold_slot(lock_dir, "cuda:0", 1):
        started.set()
        time.sleep(seconds)


def test_a_slot_held_by_another_process_makes_the_next_wait(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    started = ctx.Event()
    other = ctx.Process(target=_hold, args=(tmp_path, started, 1.0))
    other.start()
    assert started.wait(60)
    t0 = time.monotonic()
    with hold_slot(tmp_path, "cuda:0", 1):
        waited = time.monotonic() - t0
    other.join()
    assert waited > 0.5  # it waited for the other process's slot
    t0 = time.monotonic()
    with hold_slot(tmp_path, "cuda:0", 2), hold_slot(tmp_path, "cuda:0", 2):  # two slots: no waiting
        assert time.monotonic() - t0 < 0.5
