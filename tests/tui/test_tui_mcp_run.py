"""`cuda-agent tui RUN_DIR` follows a run an MCP client drives (`cuda-agent mcp`, stdio, the SDK's own
client on the CPU task): each call appears as the client makes it, a verified version shows in the
versions table, the status line names the client and says the app does not steer the run (no
control channel: "not running"; `r` is refused while the client runs it), and then how the run ended."""

import asyncio
import os
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("textual")
pytest.importorskip("mcp")

import mcp_types as types  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from textual.widgets import DataTable, Static  # noqa: E402

from cuda_agent.tui.app import RunApp  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
TASK = ROOT / "tests" / "harness" / "cpu_task"
CLIENT = types.Implementation(name="test-client", version="9.1")


async def until(pilot, cond, what, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.1)
        if cond():
            return
    raise AssertionError(f"timed out waiting for: {what}")


def shown(app, selector) -> str:
    from rich.console import Console

    console = Console(width=200, record=True, file=open(os.devnull, "w"))
    console.print(app.query_one(selector, Static).content)
    return console.export_text()


def test_the_app_follows_a_run_an_mcp_client_drives(tmp_path):
    out = tmp_path / "runs"
    params = StdioServerParameters(
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
            "--max-steps",
            "20",
        ],
    )

    def edit(path):
        return {"mode": "create", "path": path, "overwrite": True, "file_text": (TASK / "honest" / path).read_text()}

    async def scenario():
        async with Client(params, client_info=CLIENT, read_timeout_seconds=300) as c:
            assert not (await c.call_tool("list_files", {})).is_error
            (run_dir,) = list(out.iterdir())  # the run folder starts with the first call
            app = RunApp(run_dir, poll_s=0.1, gpu=False)
            async with app.run_test(size=(120, 40)) as pilot:
                steps = app.query_one("#steps")
                await until(pilot, lambda: len(steps.root.children) == 1, "the first call")
                status = shown(app, "#status")
                assert "mcp:test-client/9.1" in status and "step 1/20" in status and "not running" in status, status
                for path in ("kernels/scale_add.cu", "model_new.py"):
                    assert not (await c.call_tool("edit_file", edit(path))).is_error
                assert not (await c.call_tool("verify", {})).is_error
                await until(pilot, lambda: len(steps.root.children) == 4, "the calls made since, as they were written")
                table = app.query_one("#table", DataTable)
                await until(pilot, lambda: table.row_count == 1, "the verified version")
                assert "kernels/scale_add.cu" in shown(app, "#kernel-text")
                notes = []  # r while the client drives: refused, the run is another process's
                real_notify = app.notify
                app.notify = lambda message, **kw: (notes.append(message), real_notify(message, **kw))[1]
                await pilot.press("r")
                await until(pilot, lambda: notes, "the answer to r")
                assert "this run is being run by another process (pid" in notes[0], notes
                await c.call_tool("finish", {"summary": "fused"})
                await until(pilot, lambda: "stopped: finished" in shown(app, "#status"), "how the run ended")
                await pilot.press("q")

    asyncio.run(scenario())
