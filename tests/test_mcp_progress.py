"""The progress ticker of `cuda-agent mcp` (cuda_agent/mcp_server/progress.py): a notification when
a call starts, then one per interval with the seconds elapsed, stopping when the call returns; a
report that fails never fails the call. (tests/test_cli_mcp.py hears them from a real verify.)"""

import anyio

from cuda_agent.mcp_server.progress import with_progress


def test_a_long_call_reports_at_start_and_then_every_interval_until_it_returns():
    notes = []

    async def report(progress, message):
        notes.append((progress, message))

    async def work():
        await anyio.sleep(0.55)
        return "verdict"

    async def main():
        result = await with_progress(work, report, "verify", every=0.1)
        await anyio.sleep(0.3)  # nothing after the call returned
        return result

    assert anyio.run(main) == "verdict"
    assert notes[0] == (0.0, "verify: started")
    ticks = [p for p, _ in notes[1:]]
    assert 4 <= len(ticks) <= 6 and ticks == sorted(set(ticks)) and all(0 < p < 0.7 for p in ticks), notes
    assert all(m.startswith("verify: running for ") and m.endswith(" s") for _, m in notes[1:])


def test_a_report_that_fails_leaves_the_call_alone():
    async def report(progress, message):
        raise RuntimeError("the client went away")

    async def work():
        await anyio.sleep(0.25)
        return 42

    assert anyio.run(lambda: with_progress(work, report, "benchmark", every=0.1)) == 42
