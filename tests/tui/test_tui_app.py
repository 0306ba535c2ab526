"""The app driven by Textual's Pilot against real agent processes (scripted model, CPU task):
browsing a finished run, approve / reject / edit, pause / resume, a message to the model, stop
and resume from the app, detach and attach again."""

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import pytest

pytest.importorskip("textual")

from textual.widgets import DataTable, Static, TextArea  # noqa: E402

from cuda_agent.control import read_state  # noqa: E402
from cuda_agent.run import RunRequest, RunSpec  # noqa: E402
from cuda_agent.settings import Settings  # noqa: E402
from cuda_agent.trajectory import read_trajectory  # noqa: E402
from cuda_agent.tui import agent_process  # noqa: E402
from cuda_agent.tui.app import RunApp  # noqa: E402
from cuda_agent.tui.screens import ApprovalScreen, MessageScreen, QuitScreen  # noqa: E402

TASK = Path(__file__).resolve().parents[1] / "harness" / "cpu_task"


STARTED = []  # every agent process a test (or the app it drives) started: killed at the end
_start_agent = agent_process.start_agent


def start_agent(*args, **kw):
    agent, run_dir = _start_agent(*args, **kw)
    STARTED.append(agent)
    return agent, run_dir


@pytest.fixture(autouse=True)
def _no_agent_left_behind(monkeypatch):
    monkeypatch.setattr(agent_process, "start_agent", start_agent)  # the app's resume goes through it too
    yield
    while STARTED:
        agent = STARTED.pop()
        if agent.running():  # a failed test: the agent may be waiting for a decision forever
            os.killpg(agent.proc.pid, signal.SIGKILL)
            agent.wait(10)


def call(name, **args):
    return {"content": f"calling {name}", "tool_calls": [{"name": name, "arguments": args}]}


def script(tmp_path, *calls) -> Path:
    path = tmp_path / "script.json"
    path.write_text(json.dumps(list(calls)))
    return path


def settings(tmp_path) -> Settings:
    return Settings.model_validate(
        {"out": str(tmp_path / "runs"), "limits": {"max_steps": 20}, "eval": {"device": "cpu", "baselines": ["eager"]}}
    )


def agent_request(tmp_path, script_path, approve: bool = False) -> RunRequest:
    """What `optimize TASK --script S --device cpu --no-compile-baseline --max-steps 20 --tui` starts."""
    return RunRequest(
        spec=RunSpec(task=str(TASK / "model.py"), script=script_path), settings=settings(tmp_path), approve=approve
    )


KERNEL = call(
    "edit_file",
    mode="create",
    path="kernels/scale_add.cu",
    file_text=(TASK / "honest" / "kernels" / "scale_add.cu").read_text(),
)
MODEL_NEW = call(
    "edit_file",
    mode="create",
    path="model_new.py",
    overwrite=True,
    file_text=(TASK / "honest" / "model_new.py").read_text(),
)


async def until(pilot, cond, what, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        await pilot.pause(0.1)
        if cond():
            await pilot.pause(0.2)  # let a screen that just appeared finish mounting before keys and clicks
            return
    raise AssertionError(f"timed out waiting for: {what}")


def shown(app, selector) -> str:
    """The plain text a Static shows (rich renderables rendered as a terminal would)."""
    from rich.console import Console

    console = Console(width=200, record=True, file=open("/dev/null", "w"))
    console.print(app.query_one(selector, Static).content)
    return console.export_text()


def records(run_dir, kind):
    return [r for r in read_trajectory(run_dir / "trajectory.jsonl") if r.type == kind]


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("finished")
    agent, run_dir = start_agent(
        agent_request(
            tmp, script(tmp, KERNEL, MODEL_NEW, call("verify"), call("benchmark"), call("finish", summary="fused"))
        ),
        tmp / "agent.log",
    )
    assert agent.wait(300) is not None, (tmp / "agent.log").read_text()
    return run_dir


def test_browsing_a_finished_run(finished_run):
    async def scenario():
        app = RunApp(finished_run, poll_s=0.1, gpu=False)
        async with app.run_test(size=(120, 40)) as pilot:
            await until(pilot, lambda: app.query_one("#table", DataTable).row_count == 2, "two versions")
            status = shown(app, "#status")
            assert "scripted" in status and "step 5/20" in status and "stopped: finished" in status
            assert len(app.query_one("#steps").root.children) == 5
            # the best version is shown; its kernel and the diff from the version before it
            assert app.selected == app.view.best().version
            kernel = shown(app, "#kernel-text")
            assert "kernels/scale_add.cu" in kernel and "scale_add" in kernel
            table = app.query_one("#table", DataTable)
            table.focus()
            await pilot.press("down", "up")  # a person moving the cursor to version 1
            await pilot.pause(0.2)
            assert app.selected == 1
            diff = shown(app, "#diff-text")
            assert "version 1 (no earlier version)" in diff and "+++ b/kernels/scale_add.cu" in diff
            assert "*best" in [str(table.get_cell_at((r, 0))) for r in range(table.row_count)]
            # a tool call, selected in the tree, shows its whole observation
            tree = app.query_one("#steps")
            node = tree.root.children[2].children[0]  # step 3: verify
            tree.select_node(node)
            await pilot.pause(0.2)
            assert "status: correct" in shown(app, "#call-text")
            await pilot.press("q")  # nothing runs: quits at once
        assert app.return_code is None or app.return_code == 0

    asyncio.run(scenario())


def test_approve_reject_edit_pause_message_stop_and_resume(tmp_path):
    path = script(
        tmp_path,
        call("list_files"),
        call("view_file", path="model.py"),
        call("list_files"),
        call("list_files"),
        call("finish", summary="looked around"),
    )
    agent, run_dir = start_agent(agent_request(tmp_path, path, approve=True), tmp_path / "agent.log")

    async def scenario():
        app = RunApp(run_dir, agent=agent, poll_s=0.1, gpu=False, resume_with=(settings(tmp_path), str(path)))
        async with app.run_test(size=(100, 30)) as pilot:
            # step 1: list_files waits for a decision; reject it with a reason
            await until(pilot, lambda: isinstance(app.screen, ApprovalScreen), "the approval screen")
            assert "list_files" in str(app.screen.query_one("#title").render())
            app.screen.query_one("#reason").value = "look at model.py first"
            await pilot.click("#reject")
            # step 2: view_file; put the decision off, pause, then edit its arguments to two lines
            await until(
                pilot,
                lambda: isinstance(app.screen, ApprovalScreen) and app.screen.call.name == "view_file",
                "the second approval",
            )
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, ApprovalScreen), "the approval put off")
            await pilot.press("p")
            await until(pilot, lambda: read_state(run_dir).paused, "the pause noted")
            assert "(o decides)" in shown(app, "#status")
            await pilot.press("o")
            await until(pilot, lambda: isinstance(app.screen, ApprovalScreen), "the approval reopened")
            app.screen.query_one("#arguments", TextArea).text = '{"path": "model.py", "start_line": 1, "end_line": 2}'
            await pilot.click("#edit")
            await until(pilot, lambda: len(records(run_dir, "tool_result")) == 2, "step 2's result")
            await pilot.pause(0.5)
            assert len(records(run_dir, "model_turn")) == 2  # no step 3 while paused
            assert "paused" in shown(app, "#status")
            # approve mode off and on again (state only), a message for the model, then resume
            await pilot.press("a")
            await until(pilot, lambda: not read_state(run_dir).approve_mode, "approve mode off")
            await pilot.press("a")
            await until(pilot, lambda: read_state(run_dir).approve_mode, "approve mode on")
            await pilot.press("m")
            await until(pilot, lambda: isinstance(app.screen, MessageScreen), "the message screen")
            await pilot.press(*"try float4", "enter")
            await until(pilot, lambda: not isinstance(app.screen, MessageScreen), "the message sent")
            await pilot.press("p")
            # step 3 reads the message, then its call waits for a decision: put it off and stop
            await until(
                pilot,
                lambda: isinstance(app.screen, ApprovalScreen) and app.screen.call.name == "list_files",
                "step 3's approval",
            )
            assert [m.content for m in records(run_dir, "user_message")] == ["try float4"]
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, ApprovalScreen), "the approval put off")
            await pilot.press("s")  # stop: the waiting call is answered as rejected, the run ends, all kept
            await until(pilot, lambda: records(run_dir, "closing"), "the stop")
            await until(pilot, lambda: not agent.running(), "the agent's exit", timeout=120)
            assert "stopped: stopped" in shown(app, "#status")
            # resume from the app: the run continues with the same script and finishes
            await pilot.press("r")
            await until(pilot, lambda: len(records(run_dir, "closing")) == 2, "the resumed run's end", timeout=120)
            await until(pilot, lambda: app.agent is not None and not app.agent.running(), "exit", timeout=120)
            await pilot.press("q")

    asyncio.run(scenario())
    results = records(run_dir, "tool_result")
    assert results[0].status == "rejected" and "look at model.py first" in results[0].observation
    turns = records(run_dir, "model_turn")
    assert turns[1].edited_by_person and json.loads(turns[1].tool_calls[0].arguments)["end_line"] == 2
    assert turns[1].tool_calls[0].original_arguments == '{"path": "model.py"}'
    (message,) = [m for m in records(run_dir, "user_message") if m.injected]
    assert message.content == "try float4" and message.step == 2  # read before step 3's query
    assert results[2].status == "rejected" and "stopped by a person" in results[2].observation
    closings = records(run_dir, "closing")
    assert [c.stop_reason for c in closings] == ["stopped", "finished"]
    assert records(run_dir, "resume")[0].previous_stop == "stopped"


def test_quit_can_detach_and_a_new_app_attaches(tmp_path):
    path = script(tmp_path, call("list_files"), call("finish", summary="done"))
    agent, run_dir = start_agent(agent_request(tmp_path, path, approve=True), tmp_path / "agent.log")

    async def first():
        app = RunApp(run_dir, agent=agent, poll_s=0.1, gpu=False)
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, ApprovalScreen), "the approval screen")
            await pilot.press("escape")  # decide later
            await until(pilot, lambda: not isinstance(app.screen, ApprovalScreen), "the approval put off")
            await pilot.press("q")
            await until(pilot, lambda: isinstance(app.screen, QuitScreen), "the quit question")
            await pilot.click("#detach")

    asyncio.run(first())
    assert agent.running() and read_state(run_dir).pending  # still waiting for its decision

    async def second():
        app = RunApp(run_dir, poll_s=0.1, gpu=False)  # attached, not started by this app
        async with app.run_test(size=(80, 24)) as pilot:
            await until(pilot, lambda: isinstance(app.screen, ApprovalScreen), "the approval screen again")
            await pilot.click("#approve")
            await until(
                pilot,
                lambda: isinstance(app.screen, ApprovalScreen) and app.screen.call.name == "finish",
                "finish's approval",
            )
            await pilot.click("#approve")
            await until(pilot, lambda: records(run_dir, "closing"), "the run's end")
            await pilot.press("q")

    asyncio.run(second())
    assert agent.wait(120) is not None
    assert [r.status for r in records(run_dir, "tool_result")] == ["ok", "ok"]
    assert records(run_dir, "closing")[0].stop_reason == "finished"


def test_the_status_says_re_verifying_until_the_agent_has_finished_the_run(tmp_path):
    """After its closing record the agent's process still re-verifies the result (tens of seconds on
    a CPU) and writes the report: the status says so, not "stopped: finished", until it is done."""
    path = script(tmp_path, KERNEL, MODEL_NEW, call("benchmark"), call("finish", summary="fused"))
    agent, run_dir = start_agent(agent_request(tmp_path, path), tmp_path / "agent.log")

    def status(app) -> str:
        return " ".join(shown(app, "#status").split())

    async def scenario():
        app = RunApp(run_dir, agent=agent, poll_s=0.1, gpu=False)
        async with app.run_test(size=(160, 30)) as pilot:
            await until(
                pilot, lambda: "re-verifying version 1 (1 of 1)" in status(app), "the re-verification", timeout=180
            )
            now = status(app)
            assert "ended (finished); re-verifying version 1 (1 of 1)" in now and "stopped" not in now, now
            assert records(run_dir, "closing") and agent.running()
            await until(pilot, lambda: not agent.running(), "the agent's exit", timeout=180)
            await until(pilot, lambda: "stopped: finished" in status(app), "the finished status")
            assert "re-verifying" not in status(app)
            await pilot.press("q")  # nothing runs: quits at once

    asyncio.run(scenario())
    assert (run_dir / "report.md").is_file() and read_state(run_dir).activity is None
    log = (tmp_path / "agent.log").read_text()  # the agent's own log has the same steps as lines
    assert "re-verifying version 1 (1 of 1)" in log and "version 1 passed re-verification in" in log


def test_quitting_while_the_run_is_finished_in_the_background_says_so():
    from cuda_agent.tui.launch import closing_line

    run = Path("/runs/r1")
    line = closing_line(None, True, run, ended=True, busy="re-verifying version 2 (1 of 3): timing it")
    assert line.startswith("the run has ended; its process finishes it in the background (re-verifying version 2")
    assert "report.md" in line and "goes on" not in line
    assert "goes on in the background" in closing_line(None, True, run)  # the loop still going: detached
