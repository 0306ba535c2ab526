"""Snapshots of the app's main screens on a run folder with fixed content (fake_run.py), at
80x24 and 120x40 (pytest-textual-snapshot). Update with `pytest tests/tui --snapshot-update`
after looking at what changed, and look at each new SVG before committing it."""

import pytest

pytest.importorskip("textual")
pytest.importorskip("pytest_textual_snapshot")

from fake_run import build  # noqa: E402

from cuda_agent.tui.app import RunApp  # noqa: E402

SIZES = [(80, 24), (120, 40)]


@pytest.fixture
def run_dir(tmp_path, monkeypatch):
    return build(tmp_path, monkeypatch)


def app_for(run_dir):
    return RunApp(run_dir, poll_s=60.0, gpu=False)  # one read at mount; no timer ticks while snapshotting


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_versions_screen(snap_compare, run_dir, size):
    assert snap_compare(app_for(run_dir), terminal_size=size)


@pytest.mark.parametrize("tab", ["kernel", "diff", "plot", "profile"])
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_tab(snap_compare, run_dir, size, tab):
    async def show(pilot):
        pilot.app.query_one("#tabs").active = tab
        await pilot.pause()

    assert snap_compare(app_for(run_dir), terminal_size=size, run_before=show)


def test_approval_dialog(snap_compare, run_dir):
    from cuda_agent.control import PendingCall
    from cuda_agent.tui.screens import ApprovalScreen

    async def ask(pilot):
        pilot.app.push_screen(ApprovalScreen(PendingCall(id="call-7", name="compile", arguments='{"show": "sass"}')))
        await pilot.pause()

    assert snap_compare(app_for(run_dir), terminal_size=(80, 24), run_before=ask)


def test_kernel_and_diff_in_the_light_theme(snap_compare, run_dir):
    async def light(pilot):
        pilot.app.theme = "textual-light"
        pilot.app.query_one("#tabs").active = "kernel"
        await pilot.pause()

    assert snap_compare(app_for(run_dir), terminal_size=(120, 40), run_before=light)
