"""Waits for a future against a deadline on the injected clock and a cancellation token."""

from __future__ import annotations

import asyncio
import enum
from typing import Any

from brisvox.agent.tools.cancel import CancelToken
from brisvox.core.clock import Clock
from brisvox.core.tasks import TaskScope

__all__ = ["Ended", "race"]


class Ended(enum.Enum):
    DONE = "done"
    TIMEOUT = "timeout"
    CANCELLED = "cancelled"


async def race(clock: Clock, fut: asyncio.Future[Any], deadline: float | None, cancel: CancelToken | None) -> Ended:
    """``DONE`` once ``fut`` is done (preferred over a tie), else whichever of the others came first.

    ``fut`` is not cancelled here: its owner decides what to do with it.
    """
    if fut.done():
        return Ended.DONE
    if cancel is not None and cancel.is_cancelled:
        return Ended.CANCELLED
    cancelled = cancel.future() if cancel is not None else None
    try:
        async with TaskScope("race") as scope:
            waiters: set[asyncio.Future[Any]] = {fut}
            if deadline is not None:
                waiters.add(scope.spawn(clock.sleep_until(deadline), name="deadline"))
            if cancelled is not None:
                waiters.add(cancelled)
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
            scope.cancel()
    finally:
        if cancelled is not None and not cancelled.done():
            cancelled.cancel()
    if fut.done():
        return Ended.DONE
    if cancel is not None and cancel.is_cancelled:
        return Ended.CANCELLED
    return Ended.TIMEOUT
