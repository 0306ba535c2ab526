"""The shell tool: off by default, time-limited with its process group killed, no credentials."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from procs import running  # tests/helpers

from cuda_agent.settings import ToolSettings
from cuda_agent.tools.base import MAX_OBSERVATION, ToolContext
from cuda_agent.tools.shell import Shell

shell = Shell()


@pytest.fixture
def sh(ws) -> ToolContext:
    return ToolContext(workspace=ws, tools=ToolSettings(allow_shell=True))


def test_off_by_default(ctx, ws):
    r = shell.run({"command": "touch made_by_shell"}, ctx)
    assert r.status == "error" and "disabled" in r.observation and "view_file" in r.observation
    assert not (ws.root / "made_by_shell").exists()


def test_runs_in_workspace_with_exit_code(sh, ws):
    r = shell.run({"command": "pwd; ls kernels; echo oops >&2; exit 3"}, sh)
    assert r.status == "error" and r.data["exit_code"] == 3
    assert r.observation.startswith("exit code 3")
    assert str(ws.root) in r.observation and "add.cu" in r.observation and "oops" in r.observation
    assert shell.run({"command": "true"}, sh).observation == "exit code 0 (no output)"


def test_timeout_kills_the_process_group(sh, ws):
    t0 = time.monotonic()
    r = shell.run({"command": "sleep 100.101 & echo started; sleep 100", "timeout": 1}, sh)
    assert time.monotonic() - t0 < 5
    assert r.status == "error" and r.data["timed_out"] and "timed out after 1 s" in r.observation
    assert "started" in r.observation  # output printed before the kill is kept
    time.sleep(0.3)
    assert not running("100.101")


def test_background_leftovers_are_killed_when_command_ends(sh, ws):
    r = shell.run({"command": "(setsid sleep 100.102 &) ; sleep 100.103 & echo ok", "timeout": 10}, sh)
    assert r.status == "ok"
    time.sleep(0.3)
    assert not running("100.102") and not running("100.103")  # even the one that left the session


def test_timeout_is_capped_by_settings(ws):
    ctx = ToolContext(workspace=ws, tools=ToolSettings(allow_shell=True, shell_timeout_s=1))
    t0 = time.monotonic()
    r = shell.run({"command": "sleep 100", "timeout": 600}, ctx)
    assert time.monotonic() - t0 < 5
    assert r.data["timeout"] == 1 and "capped" in r.observation


def test_environment_has_no_credentials(sh, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-should-not-leak")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-should-not-leak")
    monkeypatch.setenv("CUDA_AGENT_PLAIN", "not-on-the-allowlist")
    r = shell.run({"command": "env"}, sh)
    assert "should-not-leak" not in r.observation and "OPENAI_API_KEY" not in r.observation
    assert "not-on-the-allowlist" not in r.observation  # an allowlist, not a scrubber
    assert "PATH=" in r.observation and "HOME=/tmp" in r.observation


def test_shell_cannot_write_outside_the_workspace(sh, ws, tmp_path):
    outside = tmp_path / "judge-copy.py"
    outside.write_text("original")
    rc = Path.home() / ".bashrc"
    before = rc.read_bytes() if rc.exists() else None
    shell.run({"command": f"echo x > {outside}; echo y >> {rc}; echo z > note.txt"}, sh)
    assert outside.read_text() == "original"
    assert (ws.root / "note.txt").read_text() == "z\n"
    assert (rc.read_bytes() if rc.exists() else None) == before


def test_huge_output_is_bounded(sh):
    r = shell.run({"command": "yes line | head -c 50000000; echo; echo THE-END"}, sh)
    assert r.status == "ok" and len(r.observation) <= MAX_OBSERVATION
    assert "cut" in r.observation and r.observation.rstrip().endswith("THE-END")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie still answers kill(0); it is dead for our purpose
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False
