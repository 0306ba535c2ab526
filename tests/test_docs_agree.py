"""What README.md and docs/ say a command does, read from the files and checked against what it does
(issue 27 item 7): the `--script` file's forms, the exit code of bad usage, where `eval` puts its
errors and its verdict, `--out` in both batch modes, the TUI's `q`. And the test set-up's own
promise: pytest-textual-snapshot's failure report is not written into the checkout."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuda_agent.agent.scripted_model import ScriptedModel
from cuda_agent.cli import app

ROOT = Path(__file__).resolve().parents[1]
TASK = Path(__file__).parent / "harness" / "cpu_task"
DEMO = ROOT / "examples" / "scale_add_small" / "demo_session.json"


def doc(name: str) -> str:
    """A document with its line breaks and Markdown table pipes squashed to single spaces."""
    return " ".join((ROOT / name).read_text().split())


def test_the_script_file_loads_in_both_forms_the_readme_names(tmp_path):
    readme = doc("README.md")
    assert "a JSON list of responses, or an object with `responses` (and a `name`)" in readme
    assert "examples/scale_add_small/demo_session.json" in readme
    assert isinstance(json.loads(DEMO.read_text()), dict)  # the demo is the object form
    demo = ScriptedModel.from_json(DEMO)
    assert demo.name == json.loads(DEMO.read_text())["name"] and demo.remaining > 3
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps(["thinking", {"content": "done", "tool_calls": [{"name": "finish"}]}]))
    assert ScriptedModel.from_json(listed).remaining == 2
    shown = " ".join(CliRunner().invoke(app, ["optimize", "--help"], env={"COLUMNS": "200"}).output.split())
    assert "a JSON list of responses, or an object with" in shown.replace("│ ", "")


def test_every_bad_usage_exit_code_the_readme_gives_is_what_the_commands_return(tmp_path):
    readme = doc("README.md")
    codes = set(re.findall(r"(\d) bad usage", readme))
    assert codes == {"2"}, codes
    out = tmp_path / "runs"
    for args in (
        ["optimize", TASK / "model.py", "--script", tmp_path / "none.json", "--out", out],
        ["eval", TASK / "model.py", "--candidate", tmp_path],  # a folder without model_new.py
        ["export", tmp_path / "none", "--format", "sft", "--out", tmp_path / "x.jsonl"],
    ):
        r = CliRunner().invoke(app, [str(a) for a in args])
        assert str(r.exit_code) in codes and r.stderr.count("\n") == 1, (args, r.output)
    assert not out.exists()


def test_eval_puts_bad_usage_on_stderr_and_every_verdict_on_stdout(tmp_path):
    readme = doc("README.md")
    assert (
        "Bad usage is one line on stderr and nothing on stdout; every verdict goes to stdout (`--json`: one "
        "JSON object), with what went wrong in the candidate"
    ) in readme
    candidate = tmp_path / "raises"
    (candidate / "kernels").mkdir(parents=True)
    (candidate / "kernels" / "scale_add.cu").write_text((TASK / "honest" / "kernels" / "scale_add.cu").read_text())
    honest = (TASK / "honest" / "model_new.py").read_text()
    forward = honest.index("    def forward")
    (candidate / "model_new.py").write_text(
        honest[:forward] + "    def forward(self, x, y):\n        raise RuntimeError('the candidate gave up here')\n"
    )
    r = CliRunner().invoke(
        app,
        [
            "eval",
            str(TASK / "model.py"),
            "--candidate",
            str(candidate),
            "--device",
            "cpu",
            "--no-compile-baseline",
            "--sets",
            "2",
        ],
    )
    assert r.exit_code == 4, r.output
    assert "runtime_error" in r.stdout and "the candidate gave up here" in r.stdout
    assert "error" not in r.stderr.lower(), r.stderr
    usage = CliRunner().invoke(app, ["eval", str(TASK / "model.py"), "--candidate", str(tmp_path / "none")])
    assert usage.exit_code == 2 and usage.stdout == "" and usage.stderr.count("\n") == 1


def test_batch_out_is_checked_in_both_modes_as_docs_batch_md_says(tmp_path, monkeypatch):
    assert "a folder the repository ignores, in both modes" in doc("docs/batch.md")
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "t.py").write_text((TASK / "model.py").read_text())
    (tmp_path / "cands" / "t").mkdir(parents=True)
    (tmp_path / "cands" / "t" / "model_new.py").write_text((TASK / "honest" / "model_new.py").read_text())
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(app, ["batch", "--eval-only", "tasks", "--candidates", "cands", "--out", "results"])
    assert r.exit_code == 2 and "which does not ignore it" in r.stderr and not (tmp_path / "results").exists()
    (tmp_path / ".gitignore").write_text("/results/\n")  # a folder the repository ignores is fine
    from cuda_agent.cli_settings import out_folder_problem

    assert out_folder_problem(tmp_path / "results") is None


def test_the_quit_key_does_what_docs_tui_md_says(tmp_path, monkeypatch):
    """Its row names every choice the quit dialog offers, and what the terminal says after each is true."""
    pytest.importorskip("textual")
    import asyncio

    from fake_run import build
    from textual.widgets import Button

    from cuda_agent.tui.app import RunApp
    from cuda_agent.tui.launch import closing_line
    from cuda_agent.tui.screens import QuitScreen

    async def labels() -> list[str]:
        app = RunApp(build(tmp_path, monkeypatch), poll_s=60.0, gpu=False)
        async with app.run_test(size=(100, 30)) as pilot:
            app.push_screen(QuitScreen())
            await pilot.pause()
            return [str(b.label) for b in app.screen.query(Button)]

    row = next(line for line in (ROOT / "docs" / "tui.md").read_text().splitlines() if line.startswith("| `q` |"))
    shown = asyncio.run(labels())
    assert len(shown) == 3 and all(label in row for label in shown), (shown, row)
    run = Path("/runs/r1")
    stopping = closing_line("stop", True, run)
    assert "stops after its current step" in stopping and "resume" in stopping
    assert "goes on in the background" in closing_line("detach", True, run)
    assert closing_line(None, False, run) == closing_line("stop", False, run) == f"run folder: {run}"


def test_the_snapshot_report_is_not_written_into_the_checkout(pytestconfig):
    pytest.importorskip("pytest_textual_snapshot")
    report = Path(pytestconfig.getoption("--snapshot-report"))
    assert report.is_absolute() and ROOT not in report.resolve().parents, report
    assert "/snapshot_report.html" in (ROOT / ".gitignore").read_text().split()


def test_nothing_users_get_cites_a_design_file_they_do_not_have():
    """The package, docs/, README.md and pyproject.toml stand on their own: a reference to the design
    notes kept beside the repository (DESIGN.md, "DESIGN decision N") points a reader at nothing."""
    shipped = [
        ROOT / "README.md",
        ROOT / "pyproject.toml",
        *sorted((ROOT / "docs").glob("*.md")),
        *sorted((ROOT / "cuda_agent").rglob("*.py")),
    ]
    citing = [str(p.relative_to(ROOT)) for p in shipped if re.search(r"\bDESIGN\b", p.read_text())]
    assert not citing, citing
