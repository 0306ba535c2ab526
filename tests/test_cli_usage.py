"""Bad usage is one line on stderr, exit code 2, and nothing made (issue 27 items 4 and 6): a
`--script` that is missing or not a script, no API key for the model, a bad `--api-key-env`, a
tracked or file `--out`, a candidate folder without model_new.py; in optimize, batch, tui and eval,
before any run folder, batch folder or output file exists. And `llm.api_key_env` is a setting like
the other model options: every layer, `config show`, the flag, the model the run makes."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cuda_agent.cli import app

TASK = Path(__file__).parent / "harness" / "cpu_task"
UNSET = "CUDA_AGENT_TEST_KEY_NOBODY_SETS"
needs_litellm = pytest.mark.skipif(importlib.util.find_spec("litellm") is None, reason="litellm is not installed")


def bad_usage(args: list, says: str, made: Path, **env) -> None:
    r = CliRunner().invoke(app, [str(a) for a in args], env=env or None)
    assert r.exit_code == 2, (args, r.output)
    assert says in r.stderr and r.stderr.count("\n") == 1 and r.stdout == "", (args, r.stderr, r.stdout)
    assert r.stderr.startswith("error: ") and "Traceback" not in r.stderr
    assert not made.exists(), f"{made} was made for a command that could not run"


def scripts(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Script files a user can get wrong, each with what its one line says."""
    cases = {
        "not JSON": ("{oops", "is not JSON"),
        "no responses": (json.dumps({"name": "demo", "steps": []}), "a script is a JSON list of responses"),
        "a number": ("42", "a script is a JSON list of responses"),
        "an entry without a name": (json.dumps([{"tool_calls": [{"arguments": {}}]}]), "entry 1: scripted tool"),
        "an entry of the wrong type": (json.dumps(["fine", 7]), "script entry 2 is a int"),
        "a field of the wrong type": (json.dumps(["fine", {"cost": "cheap"}]), "entry 2: cost"),
        "a name that is not text": (json.dumps({"name": 3, "responses": []}), "a script is a JSON list"),
    }
    out = {}
    for i, (name, (text, says)) in enumerate(cases.items()):
        path = tmp_path / f"script{i}.json"
        path.write_text(text)
        out[name] = (path, says)
    out["missing"] = (tmp_path / "nowhere.json", "nowhere.json")
    (tmp_path / "a_folder.json").mkdir()
    out["a folder"] = (tmp_path / "a_folder.json", "Is a directory")
    return out


def test_optimize_refuses_a_bad_script_before_making_a_run_folder(tmp_path):
    out = tmp_path / "runs"
    for name, (path, says) in scripts(tmp_path).items():
        bad_usage(["optimize", TASK / "model.py", "--script", path, "--out", out, "--device", "cpu"], says, out)


@needs_litellm
def test_optimize_refuses_a_model_without_its_key_before_making_a_run_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv(UNSET, raising=False)
    out = tmp_path / "runs"
    base = ["optimize", TASK / "model.py", "--out", out, "--device", "cpu"]
    bad_usage([*base, "--model", "openai/gpt-5"], "set OPENAI_API_KEY to use openai/gpt-5", out)
    bad_usage([*base, "--model", "openai/gpt-5"], "--api-key-env", out)
    bad_usage([*base, "--model", "openai/gpt-5", "--api-key-env", UNSET], f"{UNSET} is not set", out)
    bad_usage([*base, "--model", "openai/gpt-5"], f"{UNSET} is not set", out, CUDA_AGENT_LLM__API_KEY_ENV=UNSET)
    for name in ("1KEY", "MY-KEY", "A B", "$KEY"):
        bad_usage([*base, "--model", "openai/gpt-5", "--api-key-env", name], "llm.api_key_env", out)


def test_resuming_in_the_app_with_a_bad_script_is_one_line(tmp_path):
    pytest.importorskip("textual")
    run = tmp_path / "run"
    run.mkdir()
    (run / "trajectory.jsonl").write_text("")
    for name, (path, says) in scripts(tmp_path).items():
        bad_usage(["tui", run, "--script", path], says, tmp_path / "never")


def _tasks(tmp_path: Path) -> Path:
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "one.py").write_text((TASK / "model.py").read_text())
    (tasks / "two.py").write_text((TASK / "model.py").read_text())
    return tasks


def test_batch_refuses_bad_scripts_before_making_its_folder(tmp_path):
    tasks, out = _tasks(tmp_path), tmp_path / "batch"
    base = ["batch", tasks, "--out", out, "--device", "cpu"]
    for name, (path, says) in scripts(tmp_path).items():
        if name != "a folder":  # a folder is a folder of scripts
            bad_usage([*base, "--script", path], says, out)
    folder = tmp_path / "per_task"
    folder.mkdir()
    (folder / "one.json").write_text(json.dumps([{"content": "x", "tool_calls": [{"name": "finish"}]}]))
    (folder / "two.json").write_text("[{")
    bad_usage([*base, "--script", folder], f"script {folder / 'two.json'} is not JSON", out)


@needs_litellm
def test_batch_refuses_a_model_without_its_key_before_making_its_folder(tmp_path, monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    tasks, out = _tasks(tmp_path), tmp_path / "batch"
    bad_usage(
        ["batch", tasks, "--out", out, "--device", "cpu", "--model", "anthropic/claude-sonnet-4-5"],
        "set ANTHROPIC_API_KEY",
        out,
    )


def test_an_eval_only_batch_refuses_a_tracked_out_as_optimize_does(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    cands = tmp_path / "cands"
    (cands / "one").mkdir(parents=True)
    (cands / "one" / "model_new.py").write_text((TASK / "honest" / "model_new.py").read_text())
    tasks = _tasks(tmp_path)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "x", "tool_calls": [{"name": "finish"}]}]))
    monkeypatch.chdir(repo)
    for command in (
        ["batch", "--eval-only", tasks, "--candidates", cands],
        ["batch", tasks, "--script", script],
        ["optimize", TASK / "model.py", "--script", script],
    ):
        bad_usage([*command, "--out", "tests/myb", "--device", "cpu"], "which does not ignore it", repo / "tests")
    (tmp_path / "a_file").write_text("")
    bad_usage(
        ["batch", "--eval-only", tasks, "--candidates", cands, "--out", tmp_path / "a_file", "--device", "cpu"],
        "is a file: give a folder",
        tmp_path / "a_file" / "x",
    )


def test_eval_of_a_folder_without_model_new_is_one_line_as_a_missing_folder_is(tmp_path):
    empty = tmp_path / "candidate"
    (empty / "kernels").mkdir(parents=True)
    for candidate, says in ((empty, "has no model_new.py"), (tmp_path / "nowhere", "candidate folder not found")):
        for json_out in ([], ["--json"]):
            bad_usage(
                ["eval", TASK / "model.py", "--candidate", candidate, "--device", "cpu", *json_out],
                says,
                tmp_path / "never",
            )


def test_api_key_env_is_a_setting_of_every_layer_and_reaches_the_model(tmp_path, monkeypatch):
    from cuda_agent.run import make_model, model_problem
    from cuda_agent.settings import resolve

    monkeypatch.delenv("CUDA_AGENT_LLM__API_KEY_ENV", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "cuda-agent.toml").write_text('model = "openai/gpt-5"\n[llm]\napi_key_env = "PROJECT_KEY"\n')
    shown = CliRunner().invoke(app, ["config", "show", "--json"])
    assert shown.exit_code == 0, shown.output
    data = json.loads(shown.stdout)
    assert data["values"]["llm"]["api_key_env"] == "PROJECT_KEY"
    assert data["origins"]["llm.api_key_env"] == "project file"
    settings = resolve({"llm": {"api_key_env": "FLAG_KEY"}}).settings
    model = make_model(settings, None)
    assert model.config.api_key_env == "FLAG_KEY"  # the flag's layer over the file's
    monkeypatch.delenv("FLAG_KEY", raising=False)
    assert "FLAG_KEY is not set" in model_problem(settings, None)
    monkeypatch.setenv("FLAG_KEY", "sk-test-flag-key")
    assert model_problem(settings, None) is None
    (tmp_path / "cuda-agent.toml").write_text('[llm]\napi_key_env = "not a name"\n')
    r = CliRunner().invoke(app, ["config", "show"])
    assert r.exit_code == 2 and "llm.api_key_env" in r.stderr and str(tmp_path / "cuda-agent.toml") in r.stderr


def test_resuming_a_run_that_failed_before_it_started_says_so(tmp_path):
    """A run folder optimize made whose run failed before its first record: nothing to continue, and
    the line says that rather than "give the run folder that optimize printed" (it is that folder)."""
    run = tmp_path / "scale_add-20260101-000000"
    (run / "workspace").mkdir(parents=True)
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"content": "x", "tool_calls": [{"name": "finish"}]}]))
    r = CliRunner().invoke(app, ["optimize", "--resume", str(run), "--script", str(script), "--device", "cpu"])
    assert r.exit_code == 2 and r.stderr.count("\n") == 1, r.output
    assert "failed before it started" in r.stderr and "start it anew" in r.stderr and "printed" not in r.stderr
