"""Waits for a future against a deadline on the injected clock and a cancellation token."""

from __future__ import annotations

import asyncio
import contextlib
import enum
from typing import Any

from brisvox.agent.tools.cancel import CancelToken
from brisvox.core.clock import Clock, deadline_at
from brisvox.core.errors import DeadlineExceeded

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
    waiters: set[asyncio.Future[Any]] = {fut} if cancelled is None else {fut, cancelled}
    bound = deadline_at(clock, deadline, "tool call") if deadline is not None else contextlib.nullcontext()
    try:
        async with bound:
            # asyncio.wait never cancels what it waits on: fut stays its owner's.
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
    except DeadlineExceeded:
        pass  # the deadline came first: decided below, where a tie goes to fut
    finally:
        if cancelled is not None and not cancelled.done():
            cancelled.cancel()
    if fut.done():
        return Ended.DONE
    if cancel is not None and cancel.is_cancelled:
        return Ended.CANCELLED
    return Ended.TIMEOUT
