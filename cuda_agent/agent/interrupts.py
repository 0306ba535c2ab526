"""A Ctrl-C that is not lost. Python's SIGINT handler raises KeyboardInterrupt at whatever line runs,
and where that line is in a hook whose errors Python ignores (logging's lock release after each
fork, which every subprocess spawn runs; a __del__), the interrupt is printed as "Exception
ignored" and gone: a batch's Ctrl-C once let its task run on to the end. The latch also remembers
it, and the loop raises it again before its next turn."""

from __future__ import annotations

import signal
import threading
from types import FrameType
from typing import Any, Callable


class InterruptLatch:
    """While entered (main thread, Python's own SIGINT handler in place): Ctrl-C raises as before,
    and `check()` raises it again if that was swallowed. Elsewhere it changes nothing."""

    def __init__(self) -> None:
        self.seen = False
        self._previous: Callable[[int, FrameType | None], Any] | int | None = None  # the handler it replaced

    def __enter__(self) -> InterruptLatch:
        if (
            threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGINT) is signal.default_int_handler
        ):
            self._previous = signal.signal(signal.SIGINT, self._handler)
        return self

    def _handler(self, signum, frame) -> None:
        self.seen = True
        raise KeyboardInterrupt

    def check(self) -> None:
        if self.seen:
            raise KeyboardInterrupt

    def __exit__(self, *exc) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None
