"""Bounded waits on the injected clock."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from brisvox.core.clock import Clock
from brisvox.core.errors import DeadlineExceeded

__all__ = ["bounded"]

T = TypeVar("T")


async def bounded(clock: Clock, seconds: float, aw: Awaitable[T], what: str) -> T:
    """Await ``aw`` in this task; raise DeadlineExceeded(what, seconds) when ``clock`` passes the bound first.

    On the deadline (or when this task is cancelled) ``aw`` is cancelled and has ended
    before this returns.  A ``TimeoutError`` that ``aw`` raises itself passes through.
    """
    # A timer handle on the loop, not a sleeping task: this runs about three times per
    # audio frame, and a task, a sleep and a wait() per call were most of the loop's work
    # at 100 calls.  Clock instants are loop time (brisvox.core.clock), so the deadline
    # lands on the same timeline under virtual time.
    deadline = asyncio.timeout_at(clock.now() + max(0.0, seconds))
    try:
        async with deadline:
            return await aw
    except TimeoutError:
        if deadline.expired():
            raise DeadlineExceeded(what, seconds) from None
        raise
