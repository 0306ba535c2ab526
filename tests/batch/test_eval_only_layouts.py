"""`batch --eval-only` over both candidate layouts (issue 27 item 3): `--candidates DIR` with
`<task id>/model_new.py`, and examples/' own, a task folder holding model.py and candidate/ (so the
task folder is the candidates folder too). A candidate is never counted as a task, a task without
one is counted apart from the tasks done already, and candidates for none of the tasks is bad usage."""

import json
import shutil
from pathlib import Path

import pytest
from batch_helpers import CPU_TASK, EVAL_CONFIG, TASK_SRC, cache_dir, cli

from cuda_agent.batch.rows import read_rows
from cuda_agent.batch.tasks import TaskDirError, candidate_folder, discover

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def honest_candidate(folder: Path) -> Path:
    shutil.copytree(CPU_TASK / "honest", folder)
    return folder


def test_examples_are_task_folders_and_their_candidates_are_not_tasks():
    entries = discover(EXAMPLES)
    assert {"layernorm", "scale_add_small", "gemm_bias_relu"} <= {e.id for e in entries}
    assert all(e.path == (EXAMPLES / e.id / "model.py").resolve() and e.level is None for e in entries)
    with_candidates = [e for e in entries if (EXAMPLES / e.id / "candidate").is_dir()]
    assert len(with_candidates) >= 5
    assert [candidate_folder(EXAMPLES, e) for e in with_candidates] == [
        EXAMPLES / e.id / "candidate" for e in with_candidates
    ]


def test_both_layouts_are_found_and_a_task_without_a_candidate_has_none(tmp_path):
    tasks = tmp_path / "tasks"
    for rel in ("level1/flat.py", "level1/folder/model.py", "lonely.py"):
        (tasks / rel).parent.mkdir(parents=True, exist_ok=True)
        (tasks / rel).write_text(TASK_SRC)
    honest_candidate(tasks / "level1" / "folder" / "candidate")
    cands = tmp_path / "cands"
    honest_candidate(cands / "level1" / "flat")
    entries = {e.id: e for e in discover(tasks)}
    assert set(entries) == {"level1/flat", "level1/folder", "lonely"} and entries["level1/folder"].level == "level1"
    assert candidate_folder(cands, entries["level1/flat"]) == cands / "level1" / "flat"
    assert candidate_folder(tasks, entries["level1/folder"]) == tasks / "level1" / "folder" / "candidate"
    assert candidate_folder(cands, entries["lonely"]) is None and candidate_folder(tasks, entries["lonely"]) is None
    # candidates kept inside the task folder, in the <task id>/ layout, are not tasks either
    honest_candidate(tasks / "lonely")
    assert {e.id for e in discover(tasks)} == set(entries)
    assert candidate_folder(tasks, entries["lonely"]) == tasks / "lonely"


@pytest.mark.parametrize("files", [["a.py", "a/b.py"], ["a/model.py", "a/b.py"]])
def test_ids_whose_run_folders_would_nest_are_refused(tmp_path, files):
    for rel in files:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(TASK_SRC)
    with pytest.raises(TaskDirError, match="one's run folder would lie inside the other's"):
        discover(tmp_path)


def test_a_task_folder_with_its_candidate_is_scored_and_the_opening_line_counts_right(tmp_path, tmp_path_factory):
    """The examples/ layout with the task folder as --candidates: the candidate is scored (correct),
    not taken for a task; a task without a candidate is counted as such, not as done already, and
    is scored by the next run once its candidate is there."""
    tasks = tmp_path / "tasks"
    for name in ("scale", "later"):
        (tasks / name).mkdir(parents=True)
        (tasks / name / "model.py").write_text(TASK_SRC)
    honest_candidate(tasks / "scale" / "candidate")
    (tmp_path / "eval.json").write_text(json.dumps(EVAL_CONFIG))
    out = tmp_path / "run"
    args = [
        "batch",
        "--eval-only",
        str(tasks),
        "--candidates",
        str(tasks),
        "--out",
        str(out),
        "--device",
        "cpu",
        "--no-compile-baseline",
        "--eval-config",
        str(tmp_path / "eval.json"),
    ]
    first = cli(*args, cache=cache_dir(tmp_path_factory))
    assert first.returncode == 0, first.stderr
    assert "2 tasks: 0 done already, 1 without a candidate, 1 to run" in first.stderr
    rows = read_rows(out)
    assert set(rows) == {"scale", "later"}
    assert rows["scale"].status == "correct" and rows["scale"].correct
    assert rows["later"].outcome == "no_candidate" and "candidate/" in rows["later"].error
    verdict = json.loads((out / "tasks" / "scale" / "verdict.json").read_text())
    assert verdict["candidate"] == str((tasks / "scale" / "candidate").resolve())

    honest_candidate(tasks / "later" / "candidate")  # the layout fixed: the next run scores it
    second = cli(*args, cache=cache_dir(tmp_path_factory))
    assert second.returncode == 0, second.stderr
    assert "2 tasks: 1 done already, 1 to run" in second.stderr
    assert read_rows(out)["later"].correct


def test_candidates_for_none_of_the_tasks_is_one_line_and_nothing_written(tmp_path, tmp_path_factory):
    empty = tmp_path / "cands"
    empty.mkdir()
    out = tmp_path / "run"
    r = cli(
        "batch",
        "--eval-only",
        str(EXAMPLES),
        "--candidates",
        str(empty),
        "--out",
        str(out),
        "--device",
        "cpu",
        cache=cache_dir(tmp_path_factory),
    )
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and r.stdout == "", r.stderr
    assert f"a candidate for none of the {len(discover(EXAMPLES))} task(s)" in r.stderr
    assert "<task id>/candidate/model_new.py" in r.stderr
    assert not out.exists()
