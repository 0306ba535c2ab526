"""A Ctrl-C that Python swallows (raised inside a hook whose errors it ignores, as logging's after-fork
lock release is: seen losing a batch's Ctrl-C) still ends the run, as `interrupted`, before the next turn."""

from __future__ import annotations

import os
import signal
import time

from test_loop import (  # noqa: F401 (env is a fixture)
    FINISH,
    LIST,
    env,  # noqa: F401
    of,
    run,
)

from cuda_agent.agent.interrupts import InterruptLatch
from cuda_agent.agent.scripted_model import ScriptedModel


def _ctrl_c_swallowed() -> None:
    try:
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(1)  # the handler runs here, and raises
    except KeyboardInterrupt:
        pass  # what an ignored hook does with it


class SwallowsCtrlC(ScriptedModel):
    def query(self, messages, tools):
        if len(self.calls) == 1:  # while the second turn is asked for
            _ctrl_c_swallowed()
        return super().query(messages, tools)


def test_a_swallowed_ctrl_c_still_ends_the_run_before_the_next_turn(env, tmp_path):
    model = SwallowsCtrlC([LIST, LIST, LIST, FINISH])
    _, result, records = run(env, tmp_path, None, model=model)
    assert result.stop_reason == "interrupted" and len(model.calls) == 2  # no third turn was asked for
    assert of(records, "closing")[-1].stop_reason == "interrupted"
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the run's handler is gone


def test_the_latch_remembers_and_leaves_other_handlers_alone():
    with InterruptLatch() as latch:
        latch.check()  # nothing yet
        _ctrl_c_swallowed()
        try:
            latch.check()
            raise AssertionError("the swallowed Ctrl-C was forgotten")
        except KeyboardInterrupt:
            pass
    mine = signal.signal(signal.SIGINT, lambda *a: None)  # a caller with its own handler (the TUI, a batch)
    try:
        with InterruptLatch():
            assert signal.getsignal(signal.SIGINT).__name__ == "<lambda>"
    finally:
        signal.signal(signal.SIGINT, mine)
