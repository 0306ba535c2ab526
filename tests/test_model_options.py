"""Model options (--tools, --context-tokens, --temperature, --max-output-tokens, --price-in/--price-out):
settings from every layer, flags on optimize and batch, and what reaches the server, the header and
the report. The model is the loopback OpenAI-compatible server (tests/helpers/fake_openai_server.py)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from fake_openai_server import FakeOpenAIServer
from typer.testing import CliRunner

from cuda_agent.agent.text_protocol import FORMAT_HELP
from cuda_agent.cli import app
from cuda_agent.settings import SettingsError, resolve
from cuda_agent.trajectory import read_trajectory

TASK = Path(__file__).parent / "harness" / "cpu_task"
needs_litellm = pytest.mark.skipif(importlib.util.find_spec("litellm") is None, reason="litellm is not installed")
FINISH = 'Done.\n```action\n{"tool": "finish", "arguments": {"summary": "nothing"}}\n```'


@pytest.fixture()
def clean_env(tmp_path, monkeypatch):
    import os

    for k in [
        k for k in os.environ if k.startswith("CUDA_AGENT_LLM") or k in ("CUDA_AGENT_MODEL", "CUDA_AGENT_API_BASE")
    ]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_the_llm_section_comes_from_every_layer(clean_env, monkeypatch):
    (clean_env / "cuda-agent.toml").write_text(
        '[llm]\ntools = "text"\ncontext_tokens = 8192\nprice_in = 0.1\nprice_out = 0.2\n'
    )
    monkeypatch.setenv("CUDA_AGENT_LLM__TEMPERATURE", "0.3")
    r = resolve({"llm": {"max_output_tokens": 256, "price_in": None}})
    llm = r.settings.llm
    assert (llm.tools, llm.context_tokens, llm.temperature, llm.max_output_tokens, llm.price_in, llm.price_out) == (
        "text",
        8192,
        0.3,
        256,
        0.1,
        0.2,
    )
    assert {k: v for k, v in r.origins.items() if k.startswith("llm.")} == {
        "llm.tools": "project file",
        "llm.context_tokens": "project file",
        "llm.price_in": "project file",
        "llm.price_out": "project file",
        "llm.temperature": "environment",
        "llm.max_output_tokens": "flag",
    }
    assert llm.native_tools is False  # text: the client is told not to use the provider's function calling


@pytest.mark.parametrize(
    "toml, says",
    [
        ('[llm]\ntools = "json"\n', "llm.tools from"),
        ("[llm]\nprice_in = 1.0\n", "give both price_in and price_out"),
        ("[llm]\ncontext_tokens = 100\n", "llm.context_tokens from"),
    ],
)
def test_a_bad_llm_setting_is_one_line(clean_env, toml, says):
    (clean_env / "cuda-agent.toml").write_text(toml)
    with pytest.raises(SettingsError) as e:
        resolve()
    assert says in str(e.value) and "\n" not in str(e.value) and "Value error" not in str(e.value)


@pytest.mark.parametrize(
    "args, says",
    [
        (["--tools", "json"], "--tools json: give native, text or auto"),
        (["--price-in", "1"], "give both price_in and price_out"),
        (["--context-tokens", "10"], "--context-tokens"),
        (["--temperature", "-1"], "--temperature"),
    ],
)
def test_bad_model_flags_stop_optimize_and_batch_with_exit_2(clean_env, args, says):
    for command in (["optimize", str(TASK / "model.py")], ["batch", str(TASK.parent), "--out", str(clean_env / "b")]):
        r = CliRunner().invoke(app, [*command, "--model", "openai/x", "--device", "cpu", *args])
        assert r.exit_code == 2 and says in " ".join(r.output.split()), (command, r.output)


@needs_litellm
def test_optimize_sends_the_options_and_records_them(clean_env):
    """--tools text with a model litellm would call natively; the window, temperature and reply cap reach
    the server and the header; a local server named like a priced model stays unpriced."""
    with FakeOpenAIServer(model="gpt-4o-mini") as server:
        server.reply(content=FINISH, prompt_tokens=900, completion_tokens=20)
        r = CliRunner().invoke(
            app,
            [
                "optimize",
                str(TASK / "model.py"),
                "--model",
                "openai/gpt-4o-mini",
                "--api-base",
                server.base_url,
                "--tools",
                "text",
                "--context-tokens",
                "8192",
                "--temperature",
                "0.2",
                "--max-output-tokens",
                "300",
                "--out",
                str(clean_env / "runs"),
                "--device",
                "cpu",
                "--no-compile-baseline",
                "--json",
            ],
        )
        (request,) = server.chat_requests
    summary = json.loads(r.stdout[r.stdout.index("{") :])
    assert summary["stop_reason"] == "finished", r.output
    body = request["body"]
    assert "tools" not in body and FORMAT_HELP in body["messages"][0]["content"]  # text, though litellm says native
    assert (body["temperature"], body["max_tokens"]) == (0.2, 300)
    assert summary["cost"] is None  # gpt-4o-mini's price is not this server's
    run_dir = Path(summary["run_dir"])
    header = read_trajectory(run_dir / "trajectory.jsonl")[0]
    assert header.config["settings"]["values"]["llm"]["tools"] == "text"
    assert header.config["settings"]["origins"]["llm.context_tokens"] == "flag"
    assert header.config["model"]["tools"] == "text" and header.config["model"]["max_output_tokens"] == 300
    assert header.config["llm"] == {
        "protocol": "text",
        "context_tokens": 8192,
        "window_from": "context_tokens",
        "pricing": "unpriced",
    }
    assert "unpriced" in (run_dir / "report.md").read_text()


@needs_litellm
def test_given_prices_price_each_turn(clean_env):
    with FakeOpenAIServer() as server:
        server.reply(content=FINISH, prompt_tokens=1_000_000, completion_tokens=100_000)
        r = CliRunner().invoke(
            app,
            [
                "optimize",
                str(TASK / "model.py"),
                "--model",
                "openai/fake-model",
                "--api-base",
                server.base_url,
                "--tools",
                "text",
                "--price-in",
                "0.5",
                "--price-out",
                "2",
                "--out",
                str(clean_env / "runs"),
                "--device",
                "cpu",
                "--no-compile-baseline",
                "--json",
            ],
        )
    summary = json.loads(r.stdout[r.stdout.index("{") :])
    assert summary["cost"] == pytest.approx(0.5 + 0.2), r.output


@needs_litellm
def test_batch_passes_the_options_to_each_task(tmp_path):
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "a.py").write_text((TASK / "model.py").read_text())
    with FakeOpenAIServer() as server:
        server.reply(content=FINISH)
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "cuda_agent.cli",
                "batch",
                str(tasks),
                "--out",
                str(tmp_path / "run"),
                "--model",
                "openai/fake-model",
                "--api-base",
                server.base_url,
                "--tools",
                "text",
                "--temperature",
                "0",
                "--max-output-tokens",
                "64",
                "--device",
                "cpu",
                "--no-compile-baseline",
            ],
            capture_output=True,
            text=True,
            timeout=300,
        )
        requests = server.chat_requests
    assert proc.returncode == 0, proc.stderr
    (request,) = requests
    body = request["body"]
    assert "tools" not in body and FORMAT_HELP in body["messages"][0]["content"]
    assert (body["temperature"], body["max_tokens"]) == (0, 64)


@needs_litellm
def test_a_window_too_small_for_the_first_request_stops_before_it_with_advice(clean_env):
    with FakeOpenAIServer() as server:
        server.reply(content=FINISH)
        r = CliRunner().invoke(
            app,
            [
                "optimize",
                str(TASK / "model.py"),
                "--model",
                "openai/fake-model",
                "--api-base",
                server.base_url,
                "--tools",
                "text",
                "--context-tokens",
                "1024",
                "--out",
                str(clean_env / "runs"),
                "--device",
                "cpu",
                "--no-compile-baseline",
            ],
        )
        sent = server.chat_requests
    assert r.exit_code == 4 and sent == []  # nothing the server would refuse was sent
    said = " ".join(r.output.split())
    assert "model_error:context_window" in said and "the system prompt and the task need about" in said
    assert "window of 1024 tokens (given by --context-tokens)" in said and "--max-output-tokens" in said
