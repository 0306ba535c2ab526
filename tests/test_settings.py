"""Settings: five layers in order (defaults < user file < project file < CUDA_AGENT_* < flags), each
value's origin kept and shown, a bad value named with the layer it came from, and a run that uses
and records them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuda_agent.cli import app
from cuda_agent.settings import Settings, SettingsError, resolve
from cuda_agent.trajectory import read_trajectory

TASK = Path(__file__).parent / "harness" / "cpu_task"


@pytest.fixture()
def layers(tmp_path, monkeypatch):
    """A user file and a project file, no CUDA_AGENT_* from the machine running the tests."""
    import os

    for k in [
        k
        for k in os.environ
        if k.startswith("CUDA_AGENT_")
        and "__" in k
        or k in ("CUDA_AGENT_MODEL", "CUDA_AGENT_API_BASE", "CUDA_AGENT_OUT")
    ]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    user = tmp_path / "config" / "cuda-agent" / "config.toml"
    user.parent.mkdir(parents=True)
    project = tmp_path / "project"
    project.mkdir()
    return user, project


def test_each_layer_overrides_the_one_below_and_says_so(layers, monkeypatch):
    user, project = layers
    user.write_text('model = "openai/from-user"\n[limits]\nmax_steps = 11\nmax_cost = 2.0\n[eval]\nn_sets = 7\n')
    (project / "cuda-agent.toml").write_text("[limits]\nmax_steps = 22\n[eval.timing]\nbudget_ms = 123\n")
    monkeypatch.setenv("CUDA_AGENT_EVAL__N_SETS", "8")
    r = resolve({"limits": {"max_cost": 0.5, "max_tokens": None}}, project_dir=project)
    s = r.settings
    assert (s.model, s.limits.max_steps, s.limits.max_cost, s.eval.n_sets, s.eval.timing.budget_ms) == (
        "openai/from-user",
        22,
        0.5,
        8,
        123,
    )
    assert r.origins == {
        "model": "user file",
        "limits.max_steps": "project file",
        "limits.max_cost": "flag",
        "eval.n_sets": "environment",
        "eval.timing.budget_ms": "project file",
    }
    rows = {name: (value, origin) for name, value, origin in r.rows()}
    assert rows["eval.timing.warmup_ms"] == (Settings().eval.timing.warmup_ms, "default")  # a sibling keeps its default
    assert r.record()["origins"]["limits.max_cost"] == "flag"


@pytest.mark.parametrize(
    "where, text, says",
    [
        ("project", "[eval]\nn_set = 9\n", "eval.n_set from {project}: it is not a setting"),
        ("project", "[eval]\nn_sets = 0\n", "eval.n_sets from {project}: Input should be greater than or equal to 1"),
        ("user", "[tools]\nshell_timeout_s = 'soon'\n", "tools.shell_timeout_s from {user}"),
        ("project", "[eval\n", "{project} is not valid TOML"),
    ],
)
def test_a_bad_value_is_one_line_naming_its_file(layers, where, text, says):
    user, project = layers
    path = {"user": user, "project": project / "cuda-agent.toml"}[where]
    path.write_text(text)
    with pytest.raises(SettingsError) as e:
        resolve(project_dir=project)
    message = str(e.value)
    assert says.format(project=project / "cuda-agent.toml", user=user) in message and "\n" not in message


def test_a_bad_environment_value_names_the_variable(layers, monkeypatch):
    monkeypatch.setenv("CUDA_AGENT_LIMITS__MAX_STEPS", "many")
    with pytest.raises(SettingsError, match="limits.max_steps from CUDA_AGENT_LIMITS__MAX_STEPS"):
        resolve(project_dir=layers[1])


def test_validating_settings_reads_nothing_else(layers, monkeypatch):
    """A job file or a header is validated as it is: the environment of the process reading it
    (a batch task's, a resumed run's) does not slip in."""
    monkeypatch.setenv("CUDA_AGENT_MODEL", "openai/from-env")
    assert Settings.model_validate({}).model is None


def test_config_show_lists_values_and_origins(layers, monkeypatch):
    user, project = layers
    (project / "cuda-agent.toml").write_text("[tools]\nallow_shell = true\n")
    monkeypatch.setenv("CUDA_AGENT_MODEL", "openai/gpt-5")
    r = CliRunner().invoke(app, ["config", "show", "--json", "--project-dir", str(project)])
    assert r.exit_code == 0, r.output
    shown = json.loads(r.stdout)
    assert shown["values"]["tools"]["allow_shell"] is True and shown["values"]["model"] == "openai/gpt-5"
    assert shown["origins"] == {"tools.allow_shell": "project file", "model": "environment"}
    table = CliRunner().invoke(app, ["config", "show", "--project-dir", str(project)], env={"COLUMNS": "200"})
    assert "tools.allow_shell" in table.stdout and "project file" in table.stdout
    (project / "cuda-agent.toml").write_text("[tools]\nallow_shel = true\n")
    bad = CliRunner().invoke(app, ["config", "show", "--project-dir", str(project)])
    assert bad.exit_code == 2 and "tools.allow_shel" in bad.output and "not a setting" in bad.output


def test_a_run_uses_the_project_file_and_records_where_each_setting_came_from(layers, monkeypatch):
    """optimize in a folder with cuda-agent.toml: its limits apply (the run stops at its step
    limit), flags still win, and the header keeps the resolved settings with their origins."""
    user, project = layers
    (project / "cuda-agent.toml").write_text(
        f'out = "{project / "runs"}"\n[limits]\nmax_steps = 2\n[eval]\nbaselines = ["eager"]\nn_sets = 2\n'
    )
    script = project / "script.json"
    script.write_text(json.dumps([{"content": "look", "tool_calls": [{"name": "list_files", "arguments": {}}]}] * 5))
    monkeypatch.chdir(project)
    r = CliRunner().invoke(
        app, ["optimize", str(TASK / "model.py"), "--script", str(script), "--device", "cpu", "--json"]
    )
    summary = json.loads(r.stdout[r.stdout.index("{") :])
    assert summary["stop_reason"] == "max_steps" and summary["steps"] == 2, r.output
    run_dir = Path(summary["run_dir"])
    assert run_dir.parent == project / "runs"
    header = read_trajectory(run_dir / "trajectory.jsonl")[0]
    recorded = header.config["settings"]
    assert recorded["origins"] == {
        "out": "project file",
        "limits.max_steps": "project file",
        "eval.baselines": "project file",
        "eval.n_sets": "project file",
        "eval.device": "flag",
    }
    assert recorded["values"]["eval"]["n_sets"] == 2 and header.config["eval"]["baselines"] == ["eager"]
