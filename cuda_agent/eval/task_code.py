"""The task's own code (get_init_inputs, get_inputs, the module's __init__ and forward) run in
the parent: whatever it raises, a call that never returns and running out of GPU memory become a
one-line TaskCodeError naming the call and the task's line, which the harness reports as an
`unscorable` verdict (exit code 5), never a traceback nor a wait without end."""

from __future__ import annotations

import signal
import threading
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from cuda_agent.task import TaskError


class TaskCodeError(TaskError):
    """The task's own code failed, hung or ran out of memory: the task cannot be scored as it is."""


class _Overran(BaseException):  # BaseException: a task's `except Exception` cannot swallow it
    pass


def is_out_of_memory(e: BaseException) -> bool:
    try:
        import torch
    except ImportError:
        return False
    return isinstance(e, torch.OutOfMemoryError)


def _where(e: BaseException, files: tuple[Path, ...]) -> str:
    """' (model.py line 19)': the last frame of the traceback inside the task's files."""
    names = {str(f) for f in files}
    frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename in names]
    return f" ({Path(frames[-1].filename).name} line {frames[-1].lineno})" if frames else ""


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return f"{type(e).__name__}: {text[0][:300]}" if text else type(e).__name__


@contextmanager
def _deadline(seconds: float | None) -> Iterator[None]:
    """SIGALRM after `seconds`, on the main thread only (signals reach no other thread). A timer
    already set (e.g. pytest-timeout's) is put back afterwards with the time it had left; one due
    sooner than ours is left alone."""
    theirs = signal.getitimer(signal.ITIMER_REAL)[0]
    if not seconds or threading.current_thread() is not threading.main_thread() or 0 < theirs <= seconds:
        yield
        return

    def overran(signum, frame):
        raise _Overran()

    start = time.monotonic()
    old = signal.signal(signal.SIGALRM, overran)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
        if theirs:
            signal.setitimer(signal.ITIMER_REAL, max(theirs - (time.monotonic() - start), 1e-3))


@contextmanager
def task_code(call: str, files: tuple[Path, ...], timeout_s: float | None, where: str = "the parent") -> Iterator[None]:
    """Run the task's `call` (e.g. "get_inputs()", "forward"): its failures as TaskCodeError."""
    try:
        with _deadline(timeout_s):
            yield
    except _Overran:
        raise TaskCodeError(
            f"the task's {call} did not return within {timeout_s:g} s; fix the task "
            "(or raise eval.timeout_s for a task that is truly that slow)"
        ) from None
    except TaskCodeError:
        raise
    except Exception as e:
        if is_out_of_memory(e):
            raise TaskCodeError(
                f"out of GPU memory in {where} running the task's {call}: {_first_line(e)}; "
                "free the GPU of other processes, or use smaller inputs"
            ) from None
        raise TaskCodeError(f"the task's {call} raised {_first_line(e)}{_where(e, files)}") from None
