"""`cuda-agent mcp` end to end: the SDK's own client drives a whole session over stdio against
`python -m cuda_agent.cli mcp` on the CPU task (host-only kernels), and the run folder has the shape
of an `optimize` run's: workspace history with versions, a trajectory naming the client, report.md
and the drop-in. Bad arguments get the registry's one-line error, as a model's do in optimize."""

import json
import os
import sys
from pathlib import Path

import anyio
import pytest

mcp = pytest.importorskip("mcp")
import mcp_types as types  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from cuda_agent.records import Closing, Evaluation, Header, ToolResultRecord  # noqa: E402
from cuda_agent.trajectory import read_trajectory  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
TASK = Path(__file__).parent / "harness" / "cpu_task"
CLIENT = types.Implementation(name="test-client", version="9.1")


def server(out: Path, *extra: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        cwd=str(ROOT),
        env=dict(os.environ),
        args=[
            "-m",
            "cuda_agent.cli",
            "mcp",
            str(TASK / "model.py"),
            "--out",
            str(out),
            "--device",
            "cpu",
            "--no-compile-baseline",
            *extra,
        ],
    )


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content)


def heard(seen: dict, name: str):
    """A progress callback keeping what the server sent during the call `name`."""
    notes = seen.setdefault(f"progress {name}", [])

    async def callback(progress: float, total: float | None, message: str | None) -> None:
        notes.append((progress, message))

    return callback


async def session(out: Path) -> dict:
    seen = {}
    async with Client(server(out), client_info=CLIENT, read_timeout_seconds=600) as c:
        seen["tools"] = {t.name: t for t in (await c.list_tools()).tools}
        resources = (await c.list_resources()).resources
        seen["skill"] = (await c.read_resource(resources[0].uri)).contents[0].text
        seen["prompts"] = [p.name for p in (await c.list_prompts()).prompts]
        seen["prompt"] = (await c.get_prompt("task")).messages[0].content.text
        seen["system"] = (await c.get_prompt("system")).messages[0].content.text
        seen["bad"] = await c.call_tool("edit_file", {"mode": "create"})
        for path in ("kernels/scale_add.cu", "model_new.py"):
            r = await c.call_tool(
                "edit_file",
                {"mode": "create", "path": path, "overwrite": True, "file_text": (TASK / "honest" / path).read_text()},
            )
            assert not r.is_error, text(r)
        seen["compile"] = await c.call_tool("compile", {})
        seen["verify"] = await c.call_tool("verify", {}, progress_callback=heard(seen, "verify"))
        seen["benchmark"] = await c.call_tool("benchmark", {})
        seen["finish"] = await c.call_tool(
            "finish", {"summary": "host loop, fused"}, progress_callback=heard(seen, "finish")
        )
        seen["after"] = await c.call_tool("list_files", {})
    return seen


def test_a_client_drives_a_whole_run_with_the_shape_of_an_optimize_run(tmp_path):
    out = tmp_path / "runs"
    seen = anyio.run(session, out)
    # what the client is shown: the loop's own tools (no shell without --allow-shell), SKILL.md, the task
    assert {"edit_file", "compile", "verify", "benchmark", "profile", "finish"} <= set(seen["tools"])
    assert "shell" not in seen["tools"]
    assert seen["tools"]["finish"].input_schema["properties"]["summary"]
    assert "SKILL" in seen["skill"] or "kernels/" in seen["skill"]
    assert seen["prompts"] == ["task", "system"] and "class Model" in seen["prompt"]
    # a bad argument: the registry's one-line error, as an error result
    bad = text(seen["bad"])
    assert seen["bad"].is_error and "edit_file" in bad and len(bad.strip().splitlines()) == 1, bad
    assert not seen["compile"].is_error and not seen["verify"].is_error, text(seen["verify"])
    # a client that gave a progressToken hears that its long calls started (and, past 5 s, how long they ran)
    for name in ("verify", "finish"):
        notes = seen[f"progress {name}"]
        assert notes and notes[0] == (0.0, f"{name}: started"), notes
        assert [p for p, _ in notes] == sorted({p for p, _ in notes}), notes  # increasing, as the spec asks
    finish = text(seen["finish"])
    assert "finished" in finish and "re-verified" in finish and "report:" in finish and "drop-in:" in finish, finish
    summary = seen["finish"].structured_content
    assert summary["stop_reason"] == "finished" and summary["verified_reward"] >= 1
    assert seen["after"].is_error and "ended" in text(seen["after"])

    run_dir = Path(summary["run_dir"])
    assert run_dir.parent == out
    records = read_trajectory(run_dir / "trajectory.jsonl")
    header, closing = records[0], records[-1]
    assert isinstance(header, Header) and header.model == "mcp:test-client/9.1"
    assert header.messages[1]["content"] == seen["prompt"]  # the 'task' prompt is the loop's task message
    assert header.messages[0]["content"] == seen["system"]  # and 'system' its system message
    assert [t["function"]["name"] for t in header.tools] == list(seen["tools"])
    assert isinstance(closing, Closing) and closing.stop_reason == "finished"
    results = [r for r in records if isinstance(r, ToolResultRecord)]
    assert [r.name for r in results] == ["edit_file"] * 3 + ["compile", "verify", "benchmark", "finish"]
    assert results[0].format_error and results[0].observation.startswith("Format error:")
    assert any(isinstance(r, Evaluation) and r.version for r in records)
    log = (
        __import__("subprocess")
        .run(["git", "-C", str(run_dir / "workspace"), "log", "--oneline", "best"], capture_output=True, text=True)
        .stdout
    )
    assert len(log.splitlines()) >= 2, log
    assert Path(summary["report"]).is_file() and (Path(summary["dropin"]) / "layer.py").is_file()
    assert json.loads((run_dir / "outcome.json").read_text())["stop_reason"] == "finished"


async def list_only(out: Path) -> None:
    async with Client(server(out), client_info=CLIENT, read_timeout_seconds=120) as c:
        await c.list_tools()


def test_a_client_that_only_lists_leaves_nothing_behind(tmp_path):
    """docs/mcp.md: no run folder, nor the --out folder this server made for it; one that was there stays."""
    said = " ".join((ROOT / "docs" / "mcp.md").read_text().split())
    assert "never calls a tool leaves nothing behind" in said and "the `--out` folder when this server made it" in said
    out = tmp_path / "new" / "runs"
    anyio.run(list_only, out)
    assert not (tmp_path / "new").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    anyio.run(list_only, kept)
    assert kept.is_dir() and not any(kept.iterdir())


async def leave_after_one_call(out: Path) -> str:
    async with Client(server(out, "--max-steps", "5"), client_info=CLIENT, read_timeout_seconds=120) as c:
        r = await c.call_tool("list_files", {})
        assert not r.is_error
        return text(r)


def test_a_client_that_disconnects_ends_the_run_which_is_still_finalized(tmp_path):
    out = tmp_path / "runs"
    listing = anyio.run(leave_after_one_call, out)
    assert "model.py" in listing
    (run_dir,) = list(out.iterdir())
    records = read_trajectory(run_dir / "trajectory.jsonl")
    assert records[-1].stop_reason == "client_disconnected" and records[-1].steps == 1
    outcome = json.loads((run_dir / "outcome.json").read_text())  # written after finalizing, as optimize's
    assert outcome["stop_reason"] == "client_disconnected" and outcome["verified"] is None


async def calls(params: StdioServerParameters, *names: str) -> list[types.CallToolResult]:
    async with Client(params, client_info=CLIENT, read_timeout_seconds=300) as c:
        return [await c.call_tool(name, {"summary": "stopping here"} if name == "finish" else {}) for name in names]


def test_a_limit_ends_the_run_on_the_call_that_reached_it_and_resume_serves_it_again(tmp_path):
    out = tmp_path / "runs"
    first, second = anyio.run(calls, server(out, "--max-steps", "2"), "list_files", "list_files")
    assert not first.is_error and "ended" not in text(first)
    assert "the run ended: max_steps after 2 steps" in text(second), text(second)
    (run_dir,) = list(out.iterdir())
    assert read_trajectory(run_dir / "trajectory.jsonl")[-1].stop_reason == "max_steps"
    resumed = StdioServerParameters(
        command=sys.executable,
        cwd=str(ROOT),
        env=dict(os.environ),
        args=["-m", "cuda_agent.cli", "mcp", "--resume", str(run_dir), "--max-steps", "4"],
    )
    (finish,) = anyio.run(calls, resumed, "finish")
    assert "the run ended: finished after 3 steps" in text(finish), text(finish)
    records = read_trajectory(run_dir / "trajectory.jsonl")
    assert [r.model for r in records if r.type == "resume"] == ["mcp:test-client/9.1"]
    assert records[-1].stop_reason == "finished"


async def idle_past_the_deadline(params: StdioServerParameters) -> list[types.CallToolResult]:
    async with Client(params, client_info=CLIENT, read_timeout_seconds=120) as c:
        first = await c.call_tool("list_files", {})
        await anyio.sleep(6)  # the client thinks for longer than --max-wall leaves
        return [first, await c.call_tool("list_files", {})]


def test_a_client_idle_past_max_wall_finds_the_run_ended(tmp_path):
    out = tmp_path / "runs"
    first, late = anyio.run(idle_past_the_deadline, server(out, "--max-wall", "4"))
    assert not first.is_error
    assert late.is_error and "the run has ended" in text(late) and "max_wall_time" in text(late), text(late)
    (run_dir,) = list(out.iterdir())
    assert read_trajectory(run_dir / "trajectory.jsonl")[-1].stop_reason == "max_wall_time"
