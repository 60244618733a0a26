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
    """Await ``aw``; raise DeadlineExceeded(what, seconds) when ``clock`` passes the bound first."""
    work: asyncio.Future[T] = asyncio.ensure_future(aw)
    if work.done():
        return work.result()
    timer = asyncio.ensure_future(clock.sleep(seconds))
    try:
        await asyncio.wait((work, timer), return_when=asyncio.FIRST_COMPLETED)
    except BaseException:
        work.cancel()
        timer.cancel()
        await asyncio.gather(work, timer, return_exceptions=True)
        raise
    if work.done():
        timer.cancel()
        await asyncio.gather(timer, return_exceptions=True)
        return work.result()
    work.cancel()
    await asyncio.gather(work, return_exceptions=True)
    raise DeadlineExceeded(what, seconds)
