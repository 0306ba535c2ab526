"""The run folder's layout has one owner, cuda_agent/run_folder.py (RunFolder). No other module of the
package spells a name of it (a file such as trajectory.jsonl, a folder such as workspace/ joined onto
a path) or finds the run folder as a workspace's `.root.parent`: each asks a RunFolder.

Read with `ast`, without importing the modules: string literals in code count, f-string parts and
help texts included; docstrings and comments, which describe the layout, do not. A folder name
counts where it is joined onto a path (`x / "workspace"`, `Path(x, "control")`); elsewhere it is a
word ("the workspace", a dict key).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from cuda_agent import run_folder
from cuda_agent.run_folder import RunFolder
from cuda_agent.workspace.git_dir import git_dir_of

PACKAGE = Path(__file__).resolve().parents[1] / "cuda_agent"
OWNER = PACKAGE / "run_folder.py"
PATH_CALLS = {"Path", "PurePath", "joinpath", "with_name", "join", "glob", "rglob", "open"}


def layout_names() -> tuple[set[str], set[str]]:
    """(file names, folder names) of the layout, as run_folder.py declares them."""
    names = {v for k, v in vars(run_folder).items() if k.isupper() and not k.startswith("_") and isinstance(v, str)}
    names.add(RunFolder(Path("run")).history.name)  # workspace.git, made from the workspace's name
    return {n for n in names if "." in n}, {n for n in names if "." not in n}


def _docstrings(tree: ast.AST) -> set[int]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def _in_a_path(node: ast.AST, parents: dict[int, ast.AST]) -> bool:
    """Whether the string `node` (or the f-string it is part of) is joined onto a path."""
    up = parents.get(id(node))
    if isinstance(up, ast.JoinedStr):
        node, up = up, parents.get(id(up))
    if isinstance(up, ast.BinOp) and isinstance(up.op, ast.Div):
        return True
    if isinstance(up, ast.Call) and node in up.args:
        f = up.func
        return (f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", None)) in PATH_CALLS
    return False


def spelled(source: str, files: set[str], folders: set[str]) -> list[str]:
    """Where `source` spells a layout name or takes `.root.parent`, one line each."""
    tree = ast.parse(source)
    parents = {id(child): node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    skipped = _docstrings(tree)
    found = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and node.attr == "parent"
            and isinstance(node.value, ast.Attribute)
            and node.value.attr == "root"
        ):
            found.append(f"line {node.lineno}: {ast.unparse(node)} (ask the workspace's run_folder)")
        if not isinstance(node, ast.Constant) or not isinstance(node.value, str) or id(node) in skipped:
            continue
        # a whole name: `trainer_state.json` (a trainer's checkpoint) is not the layout's state.json
        named = [f for f in files if re.search(rf"(?<![\w.-]){re.escape(f)}(?![\w-])", node.value)]
        if _in_a_path(node, parents):
            named += [d for d in folders if d in node.value.strip("/").split("/")]
        if named:
            found.append(f"line {node.lineno}: {node.value!r} names {', '.join(sorted(named))}")
    return found


def test_the_layout_names_are_those_on_disk():
    """Run folders already on disk must still resume and export: the names never change."""
    run = RunFolder(Path("/r"))
    assert [
        p.relative_to("/r").as_posix()
        for p in (
            run.workspace,
            run.history,
            run.trajectory,
            run.ledger,
            run.outcome,
            run.report,
            run.plot,
            run.dropin,
            run.error_log,
            run.agent_log,
            run.control,
            run.commands,
            run.state,
            run.launch,
            run.verdict,
        )
    ] == [
        "workspace",
        "workspace.git",
        "trajectory.jsonl",
        "ledger.jsonl",
        "outcome.json",
        "report.md",
        "speedup.png",
        "dropin",
        "error.log",
        "agent.log",
        "control",
        "control/commands.jsonl",
        "control/state.json",
        "control/launch.json",
        "verdict.json",
    ]


def test_a_workspace_made_anywhere_has_the_folder_around_it_as_its_run_folder(tmp_path):
    run = RunFolder.around(tmp_path / "runs" / "ws")
    assert run.path == tmp_path / "runs" and run.workspace == tmp_path / "runs" / "ws"
    assert run.history == git_dir_of(tmp_path / "runs" / "ws") == tmp_path / "runs" / "ws.git"
    assert RunFolder.around(RunFolder(tmp_path).workspace) == RunFolder(tmp_path)


def test_all_under_finds_every_run_folder_holding_a_trajectory(tmp_path):
    for name in ("a", "batch/tasks/b"):
        (tmp_path / name).mkdir(parents=True)
        RunFolder(tmp_path / name).trajectory.write_text("")
    (tmp_path / "not-a-run").mkdir()
    assert sorted(r.path for r in RunFolder.all_under(tmp_path)) == [tmp_path / "a", tmp_path / "batch/tasks/b"]


def test_the_check_sees_a_layout_name_spelled_in_code():
    """A check of the checker: each way of spelling the layout is found, each description is not."""
    files, folders = layout_names()
    assert {"trajectory.jsonl", "ledger.jsonl", "report.md", "workspace.git"} <= files
    assert {"workspace", "control", "dropin"} <= folders
    bad = """
def f(run_dir, ws, env):
    a = run_dir / "trajectory.jsonl"
    b = Path(run_dir, "workspace")
    c = env.workspace.root.parent
    d = f"{run_dir}/ledger.jsonl"
    e = run_dir / "control" / "state.json"
    g = typer.Argument(..., help="a folder holding report.md")
"""
    assert len(spelled(bad, files, folders)) == 7, spelled(bad, files, folders)
    good = '''
"""A run writes trajectory.jsonl and report.md."""
def f(run):
    """The workspace/ and ledger.jsonl."""
    # trajectory.jsonl
    row = {"workspace": 1, "dropin": None}
    ckpt = run / "checkpoint-3" / "trainer_state.json"  # another tool's file, not the layout's state.json
    return run.trajectory, "the workspace is the model's own folder", f"{run.trajectory.name}"
'''
    assert spelled(good, files, folders) == []


def test_no_module_but_run_folder_spells_the_layout():
    files, folders = layout_names()
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path != OWNER:
            found += [
                f"{path.relative_to(PACKAGE.parent)} {line}" for line in spelled(path.read_text(), files, folders)
            ]
    assert not found, "the run folder's layout spelled outside run_folder.py (ask a RunFolder):\n" + "\n".join(found)
