"""The one timed wait of the flows: an awaitable raced against the injected clock."""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

from brisvox.core.clock import Clock
from brisvox.core.errors import DeadlineExceeded

T = TypeVar("T")


async def wait_on_clock(clock: Clock, work: Coroutine[Any, Any, T], seconds: float, what: str) -> T:
    """``await work`` for at most ``seconds`` of ``clock`` time; raises :class:`DeadlineExceeded`.

    Both helper tasks live only inside this call: on return, on a timeout and when the
    caller is cancelled they are cancelled and awaited before control leaves.
    """
    job = asyncio.ensure_future(work)
    timer = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait((job, timer), return_when=asyncio.FIRST_COMPLETED)
        if job.done():
            return job.result()
        raise DeadlineExceeded(what, seconds)
    finally:
        for task in (job, timer):
            if not task.done():
                task.cancel()
        await asyncio.gather(job, timer, return_exceptions=True)
