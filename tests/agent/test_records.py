"""Trajectory records: append-only JSONL written as it happens, read back whole or torn, no keys."""

from __future__ import annotations

import json

import pytest

from cuda_agent.agent.header import make_header
from cuda_agent.records import (
    CallRecord,
    Closing,
    Evaluation,
    FormatErrorRecord,
    ModelTurn,
    TaskInfo,
    ToolResultRecord,
    Trim,
    UserMessage,
)
from cuda_agent.secrets import REDACTED, scrub_config
from cuda_agent.trajectory import TrajectoryWriter, read_trajectory

KEY = "sk-proj-RECORDSKEY0123456789abcdef"


def sample() -> list:
    return [
        make_header(
            "r1",
            TaskInfo(path="/t/model.py", class_name="Model", hash="abc"),
            "gpt-x",
            {"agent": {"max_steps": 5}},
            [{"role": "system", "content": "hi"}],
            [],
        ),
        ModelTurn(
            step=1,
            content="let me look",
            tool_calls=[CallRecord(id="c1", name="list_files", arguments="{}")],
            prompt_tokens=10,
            completion_tokens=3,
            cost=None,
            latency_s=0.5,
        ),
        ToolResultRecord(step=1, call_id="c1", name="list_files", observation="model.py", status="ok"),
        FormatErrorRecord(step=2, message="no tool call"),
        Evaluation(step=3, commit="deadbeef", version=1, status="correct", reward=2, time_ms=0.1),
        UserMessage(step=3, content="try float4"),
        Trim(step=4, removed=[{"index": 3, "chars": 1200}]),
        Closing(stop_reason="finished", best_version=1, best_reward=2, steps=4),
    ]


def test_every_record_round_trips_and_each_is_on_disk_before_the_next(tmp_path):
    path, records = tmp_path / "run" / "trajectory.jsonl", sample()
    with TrajectoryWriter(path) as w:
        for n, record in enumerate(records, 1):
            w.write(record)
            assert len(path.read_text().splitlines()) == n  # flushed, not waiting for close
    back = read_trajectory(path)
    assert back == records
    assert back[1].tool_calls[0].name == "list_files" and back[1].cost is None
    assert back[4].reward == 2 and back[-1].stop_reason == "finished"
    assert "python" in back[0].versions and "cuda-agent" in back[0].versions


def test_torn_last_line_is_skipped_and_a_bad_middle_line_raises(tmp_path):
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as w:
        for record in sample()[:3]:
            w.write(record)
    whole = path.read_text()
    path.write_text(whole + whole.splitlines()[1][:25])  # a crash mid-write
    assert len(read_trajectory(path)) == 3
    path.write_text(whole.splitlines()[0] + "\n{garbage\n" + whole.splitlines()[2] + "\n")
    with pytest.raises(ValueError, match=r"t.jsonl:2"):
        read_trajectory(path)


def test_reopening_after_a_crash_appends_cleanly(tmp_path):
    path = tmp_path / "t.jsonl"
    lines = [r.model_dump_json() for r in sample()[:2]]
    path.write_text(lines[0] + "\n" + lines[1][:30])  # torn: dropped on reopen
    with TrajectoryWriter(path) as w:
        w.write(Closing(stop_reason="interrupted"))
    assert [r.type for r in read_trajectory(path)] == ["header", "closing"]
    path.write_text(lines[0] + "\n" + lines[1])  # whole but for its newline: kept
    with TrajectoryWriter(path) as w:
        w.write(Closing(stop_reason="interrupted"))
    assert [r.type for r in read_trajectory(path)] == ["header", "model_turn", "closing"]


def test_config_scrubbing_drops_credentials_and_keeps_limits():
    config = {
        "model": {
            "model": "gpt-x",
            "api_key": "abc123",
            "api_key_env": "OPENAI_API_KEY",
            "max_tokens": 512,
            "api_base": "http://localhost:8000/v1",
            "extra_headers": [KEY, "x-ok"],
        },
        "agent": {"max_tokens": 1000, "max_cost": None},
        "note": KEY,
    }
    assert scrub_config(config) == {
        "model": {
            "model": "gpt-x",
            "max_tokens": 512,
            "api_base": "http://localhost:8000/v1",
            "extra_headers": ["x-ok"],
        },
        "agent": {"max_tokens": 1000, "max_cost": None},
    }


def test_key_shaped_text_and_environment_secrets_are_redacted(tmp_path, monkeypatch):
    env_secret = "opaque-provider-credential-42"
    monkeypatch.setenv("MY_SERVICE_TOKEN", env_secret)
    monkeypatch.setenv("HF_HOME", "/root/.cache/huggingface")  # secret-named, but a path: left alone
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path) as w:
        w.write(
            ModelTurn(
                step=1,
                content=f"export OPENAI_API_KEY={KEY}; token {env_secret}",
                tool_calls=[CallRecord(id="c", name="shell", arguments=json.dumps({"cmd": f"echo {KEY}"}))],
            )
        )
        w.write(
            ToolResultRecord(
                step=1,
                call_id="c",
                name="shell",
                observation="/root/.cache/huggingface",
                status="ok",
                data={"stdout": KEY},
            )
        )
    text = path.read_text()
    assert KEY not in text and env_secret not in text and "/root/.cache/huggingface" in text
    turn, result = read_trajectory(path)
    assert turn.content == f"export OPENAI_API_KEY={REDACTED}; token [redacted:MY_SERVICE_TOKEN]"
    assert result.data == {"stdout": REDACTED}


def test_writer_redacts_by_value_short_keys_urls_and_added_secrets(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-123")
    monkeypatch.setenv("DATABASE_URL", "postgres://admin:pw@db/x")
    path = tmp_path / "t.jsonl"
    with TrajectoryWriter(path, secrets=[("api_key", "from-config-1")]) as w:
        w.add_secrets(("litellm.api_key", "set-later-2"))
        w.write(
            ToolResultRecord(
                step=1,
                call_id="c",
                name="verify",
                status="error",
                observation="OPENAI_API_KEY=sk-test-123\nDATABASE_URL=postgres://admin:pw@db/x",
                data={"env": ["sk-test-123", {"k": "from-config-1 set-later-2"}], "n": 3},
            )
        )
    text = path.read_text()
    for secret in ("sk-test-123", "admin:pw@", "from-config-1", "set-later-2"):
        assert secret not in text
    (result,) = read_trajectory(path)
    assert result.observation == ("OPENAI_API_KEY=[redacted:OPENAI_API_KEY]\nDATABASE_URL=[redacted:DATABASE_URL]")
    assert result.data == {
        "env": ["[redacted:OPENAI_API_KEY]", {"k": "[redacted:api_key] [redacted:litellm.api_key]"}],
        "n": 3,
    }


def test_a_versions_record_and_trailers_come_from_the_same_metrics():
    """A verdict becomes metrics in one place (metrics_of): the commit's trailers carry them, and
    the evaluation record made from the parsed version has them too."""
    from cuda_agent.eval.verdict import Timing, Verdict
    from cuda_agent.records import VersionMetrics
    from cuda_agent.workspace.trailers import metrics_of, parse_log, version_message

    def t(ms):
        return Timing(
            median_ms=ms,
            mean_ms=ms,
            min_ms=ms,
            max_ms=ms,
            p20_ms=ms,
            p80_ms=ms,
            reps=20,
            warmup=3,
            input_sets=3,
        )

    verdict = Verdict(status="correct", correct=True, reward=3, timing=t(0.5), eager=t(1.0), speedup_vs_eager=2.0)
    message = version_message(verdict, 2)
    subject, _, rest = message.partition("\n\n")
    trailers = rest.rsplit("\n\n", 1)[-1]
    (info,) = parse_log("\x1f".join(["abc", "1700000000", subject, trailers]) + "\x1e")
    e = info.evaluation(7)
    assert (e.step, e.commit, e.version, e.reward, e.time_ms, e.eager_ms, e.compile_ms, e.speedup_eager) == (
        7,
        "abc",
        2,
        3,
        0.5,
        1.0,
        None,
        2.0,
    )
    assert metrics_of(verdict).model_dump() == e.model_dump(include=set(VersionMetrics.model_fields))
