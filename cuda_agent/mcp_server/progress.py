"""Progress notifications while a tool call runs. A verify, benchmark or profile takes seconds to
minutes, and `finish` answers only after the re-verification: a client that asked for progress (its
request carried a progressToken) hears that the call started and then, every PROGRESS_EVERY_S, how
long it has run, so a client whose timeout resets on progress (the spec allows it; the TypeScript
SDK's resetTimeoutOnProgress) does not give up on a call that is still working. No SDK import
here: the server passes the sending function.
"""

from __future__ import annotations

import contextlib
from typing import Awaitable, Callable, TypeVar

import anyio

PROGRESS_EVERY_S = 5.0
T = TypeVar("T")
Report = Callable[[float, str], Awaitable[None]]  # (progress, message): the request's own notification


async def with_progress(
    work: Callable[[], Awaitable[T]], report: Report, what: str, every: float = PROGRESS_EVERY_S
) -> T:
    """`work()`'s result; meanwhile `report` at the start (progress 0) and every `every` seconds
    (progress: the seconds elapsed, increasing as the spec asks). A report that fails is dropped:
    progress is advice, never a reason for the call to fail."""
    start = anyio.current_time()

    async def tick() -> None:
        progress, message = 0.0, f"{what}: started"
        while True:
            with contextlib.suppress(Exception):  # a client gone: its answer fails the same way later, where it matters
                await report(progress, message)
            await anyio.sleep(every)
            elapsed = anyio.current_time() - start
            progress, message = round(elapsed, 1), f"{what}: running for {elapsed:.0f} s"

    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        try:
            return await work()
        finally:
            tg.cancel_scope.cancel()
