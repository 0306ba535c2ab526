"""Each option is declared once, on its settings field (cuda_agent/flags.py, issue 28 item 2): the flags
of optimize, batch, mcp, eval and tui (cli_flags.py), `config show` and the model client all read that
declaration. The proof: a model option added in that one place, in a process of its own, is a flag of
every command that calls a model, a setting `config show` lists with its flag, and part of what the
litellm client is configured with, with nothing else edited."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Literal

import pytest
import typer
from fake_openai_server import FakeOpenAIServer
from pydantic import BaseModel, Field
from typer.testing import CliRunner

from cuda_agent.agent.litellm_model import LitellmModelConfig
from cuda_agent.agent.model_options import ModelOptions
from cuda_agent.cli import app
from cuda_agent.cli_flags import SettingFlags, setting_flags
from cuda_agent.flags import Flag, SectionFlags, flagged
from cuda_agent.model_kinds import make_model
from cuda_agent.settings import Settings, resolve

ROOT = Path(__file__).resolve().parents[1]
TASK = Path(__file__).parent / "harness" / "cpu_task"
FINISH = 'Done.\n```action\n{"tool": "finish", "arguments": {"summary": "nothing"}}\n```'
needs_litellm = pytest.mark.skipif(importlib.util.find_spec("litellm") is None, reason="litellm is not installed")

# A new model option, written where model options are declared (ModelOptions) and nowhere else. The patch
# happens before anything else of the package is imported, so every module sees it as if it were there.
ADD_TOP_P = """
import json, sys
from typing import Annotated
from pydantic import Field
import cuda_agent.agent.model_options as options
from cuda_agent.flags import Flag

class WithTopP(options.ModelOptions):
    top_p: Annotated[float | None, Flag()] = Field(None, ge=0, le=1, description="Nucleus sampling: the share of "
                                                   "probability mass a reply is drawn from.")

options.ModelOptions = WithTopP
from typer.testing import CliRunner
from cuda_agent.cli import app

runner, out, base_url = CliRunner(), {}, sys.argv[1]
for command in ("optimize", "batch", "tui", "mcp"):
    out[command] = " ".join(runner.invoke(app, [command, "--help"], env={"COLUMNS": "300"}).output.split())
shown = runner.invoke(app, ["config", "show", "--json"], env={"CUDA_AGENT_LLM__TOP_P": "0.25"})
out["config"] = json.loads(shown.stdout)
run = runner.invoke(app, ["optimize", sys.argv[2], "--model", "openai/fake-model", "--api-base", base_url,
                          "--tools", "text", "--top-p", "0.5", "--out", sys.argv[3], "--device", "cpu",
                          "--no-compile-baseline", "--json"])
out["run"] = json.loads(run.stdout[run.stdout.index("{"):])
print("RESULT " + json.dumps(out))
"""


@needs_litellm
def test_a_model_option_added_in_one_place_is_a_flag_a_setting_and_the_clients(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    for name in ("CUDA_AGENT_MODEL", "CUDA_AGENT_API_BASE"):
        monkeypatch.delenv(name, raising=False)
    with FakeOpenAIServer() as server:
        server.reply(content=FINISH)
        proc = subprocess.run(
            [sys.executable, "-c", ADD_TOP_P, server.base_url, str(TASK / "model.py"), str(tmp_path / "runs")],
            capture_output=True,
            text=True,
            timeout=600,
            env={**__import__("os").environ, "PYTHONPATH": str(ROOT)},
        )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.split("RESULT ", 1)[1])
    for command in ("optimize", "batch", "tui"):  # every command that calls a model
        assert (
            "--top-p <float range> [0.0<=x<=1.0] Nucleus sampling: the share of probability mass a reply is "
            "drawn from (setting: llm.top_p)."
        ) in out[command], (command, out[command])
    assert "--top-p" not in out["mcp"] and "--max-steps" in out["mcp"]  # there the client is the model
    config = out["config"]
    assert config["values"]["llm"]["top_p"] == 0.25 and config["origins"]["llm.top_p"] == "environment"
    assert config["flags"]["llm.top_p"] == "--top-p"
    assert out["run"]["stop_reason"] == "finished", out["run"]
    from cuda_agent.trajectory import read_trajectory

    header = read_trajectory(Path(out["run"]["run_dir"]) / "trajectory.jsonl")[0]
    assert header.config["settings"]["values"]["llm"]["top_p"] == 0.5
    assert header.config["settings"]["origins"]["llm.top_p"] == "flag"
    assert header.config["model"]["top_p"] == 0.5  # the litellm client's own config: LitellmModelConfig


def _options(command: str) -> dict[str, typer.core.click.Parameter]:
    cmd = typer.main.get_command(app)
    for word in command.split():
        cmd = cmd.get_command(None, word)
    return {opt: p for p in cmd.params for opt in p.opts}


def test_every_model_option_is_a_flag_a_listed_setting_and_part_of_the_clients_config(monkeypatch, tmp_path):
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    declared = {s.path: s for s in flagged(Settings) if s.path.startswith("llm.")}
    assert set(declared) == {f"llm.{name}" for name in ModelOptions.model_fields}  # each has its flag
    for command in ("optimize", "batch", "tui"):
        options = _options(command)
        for s in declared.values():
            assert s.option in options and options[s.option].help == s.help(), (command, s.path)
    assert not any(s.option in _options("mcp") for s in declared.values())
    shown = json.loads(CliRunner().invoke(app, ["config", "show", "--json", "--project-dir", str(tmp_path)]).stdout)
    assert {k: v for k, v in shown["flags"].items() if k.startswith("llm.")} == {
        p: s.option for p, s in declared.items()
    }
    assert set(shown["values"]["llm"]) == set(ModelOptions.model_fields)
    # the client's config is the model options plus its own fields: the same names, the same values
    assert set(ModelOptions.model_fields) <= set(LitellmModelConfig.model_fields)
    monkeypatch.setenv("CUDA_AGENT_LLM__MAX_OUTPUT_TOKENS", "77")
    settings = resolve(
        {"model": "openai/x", "llm": {"tools": "text", "price_in": 1.0, "price_out": 2.0}}, project_dir=tmp_path
    ).settings
    client = make_model(settings).client_config()
    assert {k: client[k] for k in ModelOptions.model_fields} == settings.llm.model_dump(mode="json")
    assert (client["tools"], client["max_output_tokens"], client["price_out"]) == ("text", 77, 2.0)


def test_no_command_declares_a_setting_flag_of_its_own():
    """Every option whose help names its setting is that setting's declared flag, with the declared help
    (batch's budgets: per task); the one exception, eval's --tolerance, takes a preset's name, not a value."""
    declared = {s.option: s for s in flagged(Settings)}

    def walk(cmd, path=()):
        yield path, cmd
        for name in cmd.list_commands(None) if hasattr(cmd, "list_commands") else ():
            yield from walk(cmd.get_command(None, name), (*path, name))

    seen = set()
    for path, cmd in walk(typer.main.get_command(app)):
        for p in getattr(cmd, "params", []):
            if "(setting: " not in (p.help or "") or path == ("eval",) and p.opts == ["--tolerance"]:
                continue
            s = declared[p.opts[0]]
            assert p.help.removeprefix("Per task: ").lower() == s.help().lower(), (path, p.opts)
            seen.add(s.option)
    assert seen == set(declared)  # and every declared flag is some command's


class _Section(BaseModel):
    mode: Annotated[Literal["fast", "slow"], Flag()] = Field("fast", description="How to go.")
    rounds: Annotated[int | None, Flag(per_task=True, short="-r")] = Field(None, ge=2, le=9, description="Rounds.")
    quiet: Annotated[bool, Flag(name="--loud", sets=False)] = Field(True, description="Speak up.")
    hidden: int = 3  # no flag


class _Elsewhere(BaseModel):
    level: int = 1


class _Settings(BaseModel):
    name: Annotated[str | None, Flag()] = Field(None, description="A name.")
    section: _Section = Field(default_factory=_Section)
    other: Annotated[_Elsewhere, SectionFlags(level=Flag(help="The level."))] = Field(default_factory=_Elsewhere)


def test_setting_flags_turns_declared_fields_into_options_and_back():
    seen = []

    @setting_flags("section", "other.level", per_task=True, settings=_Settings)
    def command(
        first: str = typer.Argument(...),
        flags: SettingFlags = SettingFlags(),
        last: bool = typer.Option(False, "--last"),
    ) -> None:
        seen.append(flags)

    demo = typer.Typer()
    demo.command()(command)
    demo.command("other")(lambda: None)
    shown = " ".join(CliRunner().invoke(demo, ["command", "--help"], env={"COLUMNS": "300"}).output.split())
    assert (
        shown.index("--mode fast|slow")
        < shown.index("--rounds -r <int range> [2<=x<=9] Per task: rounds (setting: section.rounds).")
        < shown.index("--loud")
    )
    assert shown.index("--loud") < shown.index("--level") < shown.index("--last")
    assert "How to go (setting: section.mode; default fast)." in shown and "(setting: section.quiet = false)" in shown
    assert "The level (setting: other.level; default 1)." in shown and "--hidden" not in shown and "--name" not in shown
    r = CliRunner().invoke(demo, ["command", "x", "-r", "3", "--loud", "--level", "4"])
    assert r.exit_code == 0, r.output
    assert dict(seen[-1]) == {"section.rounds": 3, "section.quiet": False, "other.level": 4}
    assert seen[-1].layer() == {"section": {"rounds": 3, "quiet": False}, "other": {"level": 4}}
    assert CliRunner().invoke(demo, ["command", "x"]).exit_code == 0 and dict(seen[-1]) == {}  # none given
    bad = CliRunner().invoke(demo, ["command", "x", "--mode", "medium"])
    assert bad.exit_code == 2 and "--mode medium: give fast or slow" in bad.output
    assert CliRunner().invoke(demo, ["command", "x", "-r", "1"]).exit_code == 2  # the field's ge=2
    with pytest.raises(ValueError, match="'section.hidden'"):
        setting_flags("section.hidden", settings=_Settings)
    with pytest.raises(TypeError, match="SettingFlags"):
        setting_flags("name", settings=_Settings)(lambda x=1: None)


def test_a_section_flag_for_no_field_is_an_error():
    class Wrong(BaseModel):
        other: Annotated[_Elsewhere, SectionFlags(levle=Flag(help="typo"))] = Field(default_factory=_Elsewhere)

    with pytest.raises(ValueError, match="levle"):
        flagged(Wrong)


def test_docs_settings_names_every_flag():
    doc = (ROOT / "docs" / "settings.md").read_text()
    missing = [s.option for s in flagged(Settings) if f"({s.option}" not in doc and f" {s.option}" not in doc]
    assert not missing, f"docs/settings.md does not name {missing}"
