"""What a new user reads first: every command's --help shows its texts as written (Rich markup
must not eat `[...]`), and install hints name the command that works for this installation."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from typer.testing import CliRunner

import cuda_agent
from cuda_agent import install_hint
from cuda_agent.cli import app


def commands(cmd, path=()):
    """(the words that reach it, the command) for every command and group of the app."""
    yield list(path), cmd
    if hasattr(cmd, "list_commands"):
        for name in cmd.list_commands(None):
            yield from commands(cmd.get_command(None, name), (*path, name))


def test_every_help_shows_its_bracketed_words():
    squash = lambda s: re.sub(r"[\s│]+", "", s)  # noqa: E731  (Rich wraps and boxes the texts)
    for path, cmd in commands(typer.main.get_command(app)):
        r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert r.exit_code == 0, (path, r.output)
        shown = squash(r.output)
        for text in [cmd.help or "", *(getattr(p, "help", None) or "" for p in cmd.params)]:
            for bracketed in re.findall(r"\[[^\]\n]*\]", text):
                assert squash(bracketed) in shown, f"`cuda-agent {' '.join(path)} --help` lost {bracketed!r}"
    assert len(list(commands(typer.main.get_command(app)))) > 10  # every command was reached


def test_batch_help_names_the_distributed_extra():
    r = CliRunner().invoke(app, ["batch", "--help"], env={"COLUMNS": "200"})
    assert "distributed extra" in r.output and "needs cuda-agent." not in r.output


def test_install_hint_from_a_checkout_and_from_an_index(monkeypatch, tmp_path):
    checkout = Path(cuda_agent.__file__).resolve().parents[1]
    assert (checkout / "pyproject.toml").is_file()  # the tests run from the checkout they test
    assert install_hint("train") == f"pip install -e '{checkout}[train]'"
    installed = tmp_path / "site-packages" / "cuda_agent"
    installed.mkdir(parents=True)
    monkeypatch.setattr(cuda_agent, "__file__", str(installed / "__init__.py"))
    assert install_hint("tui") == "pip install 'cuda-agent[tui]'"


def test_flags_show_no_type_and_options_keep_theirs():
    """A flag takes no value: typer 0.29 would show `<bool>` beside each (--help too)."""
    for path, cmd in commands(typer.main.get_command(app)):
        r = CliRunner().invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
        assert "<bool>" not in r.output and "BOOLEAN" not in r.output, f"`cuda-agent {' '.join(path)} --help`"
    shown = CliRunner().invoke(app, ["eval", "--help"], env={"COLUMNS": "200"}).output
    json_row = next(line for line in shown.splitlines() if line.strip("│ ").startswith("--json "))
    assert json_row.split("--json")[1].split()[0] == "Print"  # the help text comes right after the flag
    assert "<path>" in shown and "<int range>" in shown  # options that take a value still say which


def test_limits_say_per_task_only_where_a_batch_runs_many():
    def row(command: str, flag: str) -> str:
        shown = CliRunner().invoke(app, [command, "--help"], env={"COLUMNS": "400"}).output
        return next(line for line in shown.splitlines() if line.strip("│ ").split(" ")[0] == flag)

    for flag in ("--max-steps", "--max-wall"):
        for single in ("optimize", "mcp"):
            assert "per task" not in row(single, flag).lower() and "batch" not in row(single, flag), (single, flag)
        assert "Per task:" in row("batch", flag)
    assert "Per task:" in row("batch", "--max-cost") and "per task" not in row("optimize", "--max-cost").lower()
