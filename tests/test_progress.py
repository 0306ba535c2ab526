"""cuda_agent/progress.py: what a long step shows. Off a terminal a line per step, per announced
phase and per evaluation phase that is still running after LINE_AFTER_S, with N of M; on a terminal
rich's live display and no plain lines; quiet: nothing; `on_change` hears each change, then None.
The phases of a real evaluation are in tests/test_cli_progress.py."""

import io
import time
from types import SimpleNamespace

from rich.console import Console

import cuda_agent.progress as progress_module
from cuda_agent.progress import Progress, upcoming


def plain() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=False, width=300), out


def fake_evaluator(baseline_rounds=0, baselines=("eager", "compile")):
    """What Job.watch and upcoming() read of an Evaluator: its cfg and the `phases` hook."""
    cfg = SimpleNamespace(n_sets=10, baseline_rounds=baseline_rounds, baselines=list(baselines))
    return SimpleNamespace(cfg=cfg, phases=dict)


def test_lines_off_a_terminal_say_each_step_with_its_count_and_each_announced_phase():
    console, out = plain()
    changes = []
    with Progress(console, on_change=changes.append).job("re-verifying", total=3) as job:
        job.phase("starting the evaluator")
        job.step("re-verifying version 4")
        job.advance("version 4 FAILED re-verification")
        job.step("re-verifying version 2")
        job.phase("checking correctness")
        job.advance("version 2 passed re-verification")
    assert out.getvalue().splitlines() == [
        "re-verifying: starting the evaluator",
        "re-verifying version 4 (1 of 3)",
        "version 4 FAILED re-verification",
        "re-verifying version 2 (2 of 3)",
        "re-verifying version 2 (2 of 3): checking correctness",
        "version 2 passed re-verification",
    ]
    assert changes[0] == "re-verifying: starting the evaluator" and changes[-1] is None
    assert "re-verifying version 2 (2 of 3): checking correctness" in changes


def test_quiet_prints_nothing_but_still_tells_on_change():
    console, out = plain()
    changes = []
    with Progress(console, quiet=True, on_change=changes.append).job("baselines", total=2) as job:
        job.step("baselines of a on cpu")
        job.phase("timing eager")
        job.advance("a: timed")
    assert out.getvalue() == ""
    assert changes == ["baselines of a on cpu (1 of 2)", "baselines of a on cpu (1 of 2): timing eager", None]


def test_a_job_without_lines_is_not_printed_off_a_terminal():
    console, out = plain()
    with Progress(console).job("benchmark", lines=False) as job:
        job.phase("timing it")
    assert out.getvalue() == ""


def test_an_evaluation_phase_gets_a_line_only_when_it_is_still_running(monkeypatch):
    """What runs after a phase depends on the verdict (timing only if correct): a phase that ended
    at once is never said, a long one is, once."""
    monkeypatch.setattr(progress_module, "LINE_AFTER_S", 0.05)
    console, out = plain()
    ev = fake_evaluator()
    with Progress(console).job("first evaluation (benchmark)") as job:
        with job.watch(ev):
            seconds = ev.phases()  # what evaluate() records its phases in
            seconds["static"] = 0.0  # -> building: ends at once
            seconds["build"] = 0.0  # -> auditing: runs a while
            time.sleep(0.3)
            seconds["audit"] = 0.3
        assert ev.phases is dict  # the hook is given back
    assert out.getvalue().splitlines() == ["first evaluation (benchmark): auditing the built library"]


def test_the_phases_of_an_evaluation_in_order(monkeypatch):
    ev = fake_evaluator()
    changes = []
    with Progress(plain()[0], on_change=changes.append).job("benchmark", lines=False) as job:
        with job.watch(ev):
            seconds = ev.phases()
            for key in (
                "static",
                "build",
                "audit",
                "start_wait",
                "judge_ready_after",
                "load",
                "correctness",
                "timing",
                "kill",
                "baselines",
                "total",
            ):
                seconds[key] = 0.01
            assert dict(seconds)["total"] == 0.01  # still the timings evaluate() returns in the verdict
    assert [c.removeprefix("benchmark: ") for c in changes if c] == [
        "static guards",
        "building the kernels",
        "auditing the built library",
        "starting the recorder and the judge",
        "loading the candidate",
        "checking correctness on 10 input sets",
        "timing it",
        "finishing",
        "the eager and torch.compile baselines: read from the cache, or timed now (once per task)",
        "finishing",
    ]


def test_what_comes_next_depends_on_what_the_evaluation_does():
    rounds = fake_evaluator(baseline_rounds=3, baselines=["eager"])
    assert upcoming(rounds, "correctness", True, {}) == "timing it, with eager beside it in 3 interleaved rounds"
    assert upcoming(rounds, "kill", True, {"timing": 1.0}) == "finishing"  # timed beside it already
    plain_ev = fake_evaluator()
    assert upcoming(plain_ev, "correctness", False, {}) == "finishing"  # verify: no timing
    assert upcoming(plain_ev, "kill", True, {}) == "finishing"  # not timed (failed): no baselines either


def test_an_evaluator_without_the_hook_is_shown_as_one_step():
    changes = []
    with Progress(plain()[0], on_change=changes.append).job("benchmark", lines=False) as job:
        with job.watch(SimpleNamespace(cfg=None)):  # a pool's evaluator
            pass
    assert changes == [None]


def test_on_a_terminal_the_live_display_shows_the_step_and_no_plain_line():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)
    with Progress(console).job("baselines", total=2) as job:
        job.step("baselines of level1/a on cpu")
        job.phase("timing eager")
        time.sleep(0.3)  # a refresh of the display
        job.advance()
    shown = out.getvalue()
    assert "baselines of level1/a on cpu (1 of 2): timing eager" in shown and "\x1b[" in shown
    assert "1/2" in shown  # rich's N of M
