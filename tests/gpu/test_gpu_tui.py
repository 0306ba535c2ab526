"""A real optimisation session on the GPU, driven through the app by a Pilot script: the demo
session of examples/scale_add_small (scripted model, real tools) with a profile call after the
first benchmark, in approve mode; every call approved from the app, a pause and a message on the
way; at the end the best version's row, kernel and profile are looked at and the final state is
saved as SVG (CUDA_AGENT_RESULTS_DIR, which benchmarks/gpu_suite.sh sets, keeps them)."""

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("textual")

from textual.widgets import DataTable  # noqa: E402

from cuda_agent.control import read_state  # noqa: E402
from cuda_agent.run import RunRequest, RunSpec  # noqa: E402
from cuda_agent.settings import Settings  # noqa: E402
from cuda_agent.trajectory import read_trajectory  # noqa: E402
from cuda_agent.tui.agent_process import start_agent  # noqa: E402
from cuda_agent.tui.app import RunApp  # noqa: E402
from cuda_agent.tui.screens import ApprovalScreen, MessageScreen  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "scale_add_small"
EXTRA_SETTINGS: dict = {}  # a CPU dry run of this test sets {"eval": {"device": "cpu", ...}}


def demo_with_profile(tmp_path) -> Path:
    doc = json.loads((EXAMPLE / "demo_session.json").read_text())
    names = [r["tool_calls"][0]["name"] for r in doc["responses"]]
    first_benchmark = names.index("benchmark")
    doc["responses"].insert(
        first_benchmark + 1,
        {"content": "Where does the time go?", "tool_calls": [{"name": "profile", "arguments": {}}]},
    )
    path = tmp_path / "demo_with_profile.json"
    path.write_text(json.dumps(doc))
    return path


def shown(app, selector) -> str:
    from rich.console import Console
    from textual.widgets import Static

    console = Console(width=200, record=True, file=open(os.devnull, "w"))
    console.print(app.query_one(selector, Static).content)
    return console.export_text()


async def until(pilot, cond, what, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.2)
        if cond():
            await pilot.pause(0.3)
            return
    raise AssertionError(f"timed out waiting for: {what}")


@pytest.mark.gpu
def test_a_real_session_driven_through_the_app(tmp_path):
    script = demo_with_profile(tmp_path)
    settings = Settings.model_validate({"out": str(tmp_path / "runs"), "limits": {"max_steps": 20}, **EXTRA_SETTINGS})
    request = RunRequest(spec=RunSpec(task=str(EXAMPLE / "model.py"), script=script), settings=settings, approve=True)
    agent, run_dir = start_agent(request, tmp_path / "agent.log")
    results = os.environ.get("CUDA_AGENT_RESULTS_DIR")
    approved: list[str] = []
    seen_status: list[str] = []

    def closed():
        return any(r.type == "closing" for r in read_trajectory(run_dir / "trajectory.jsonl"))

    async def scenario():
        app = RunApp(run_dir, agent=agent, poll_s=0.2, gpu=True)
        async with app.run_test(size=(120, 40)) as pilot:
            while not closed():
                await until(
                    pilot,
                    lambda: isinstance(app.screen, ApprovalScreen) or closed(),
                    "the next approval or the run's end",
                    timeout=600,
                )
                if not isinstance(app.screen, ApprovalScreen):
                    break
                name = app.screen.call.name
                seen_status.append(shown(app, "#status"))
                if name == "compile" and "compile" not in approved:
                    # before the first build: pause, leave the model a note, resume, then approve
                    await pilot.press("escape")
                    await until(pilot, lambda: not isinstance(app.screen, ApprovalScreen), "put off", 30)
                    await pilot.press("p")
                    await until(pilot, lambda: read_state(run_dir).paused, "the pause", 30)
                    await pilot.press("m")
                    await until(pilot, lambda: isinstance(app.screen, MessageScreen), "the message screen", 30)
                    await pilot.press(*"profile before finishing", "enter")
                    await until(pilot, lambda: not isinstance(app.screen, MessageScreen), "the message sent", 30)
                    await pilot.press("p")
                    await until(pilot, lambda: not read_state(run_dir).paused, "the resume", 30)
                    await pilot.press("o")
                    await until(pilot, lambda: isinstance(app.screen, ApprovalScreen), "the approval reopened", 30)
                approved.append(name)
                call_id = app.screen.call.id
                await pilot.click("#approve")
                await until(
                    pilot,
                    lambda: not isinstance(app.screen, ApprovalScreen) or app.screen.call.id != call_id or closed(),
                    f"{name} approved",
                    60,
                )
            await until(pilot, lambda: not agent.running(), "the agent's exit", timeout=300)
            await until(pilot, lambda: app.query_one("#table", DataTable).row_count >= 2, "two versions", 30)
            # the best row, its kernel and the profile the model saw before it
            best = app.view.best()
            assert best is not None and best.correct
            app.show_version(best.version)
            await pilot.pause(0.5)
            kernel, profile = shown(app, "#kernel-text"), shown(app, "#profile-text")
            status = shown(app, "#status")
            if results:
                Path(results).mkdir(parents=True, exist_ok=True)
                app.save_screenshot("tui-final-versions.svg", results)
                await pilot.press("f")
                await pilot.pause(0.5)
                app.save_screenshot("tui-final-profile.svg", results)
                Path(results, "tui-session.txt").write_text(
                    f"approved: {approved}\nstatus: {status}\nbest: v{best.version} {best.time_ms} ms "
                    f"{best.speedup_eager}x eager {best.speedup_compile}x compile reward {best.reward}\n\n"
                    f"{profile}\n"
                )
            await pilot.press("q")
        return kernel, profile, status

    try:
        kernel, profile, status = asyncio.run(scenario())
    finally:
        if agent.running():
            os.killpg(agent.proc.pid, signal.SIGKILL)
    records = list(read_trajectory(run_dir / "trajectory.jsonl"))
    closing = [r for r in records if r.type == "closing"]
    assert closing and closing[-1].stop_reason == "finished", (tmp_path / "agent.log").read_text()[-3000:]
    assert approved == [
        "view_file",
        "edit_file",
        "edit_file",
        "compile",
        "verify",
        "benchmark",
        "profile",
        "edit_file",
        "compile",
        "benchmark",
        "finish",
    ]
    assert [m.content for m in records if m.type == "user_message" and m.injected] == ["profile before finishing"]
    assert "scale_add" in kernel
    assert "scale_add_kernel" in profile  # the real ncu summary of the first version
    import torch

    # the status bar names the GPU as the driver does, less the vendor's prefix (any card: H200, H100...)
    assert torch.cuda.get_device_name().removeprefix("NVIDIA ") in status, status
    assert "stopped: finished" in status
    assert all("waiting for approval" in s for s in seen_status)
