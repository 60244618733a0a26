"""A turn's cancellation token: cancelled once, observed by every call of the turn."""

from __future__ import annotations

import asyncio

__all__ = ["CancelToken"]


class CancelToken:
    """Set once (``cancel()``); ``wait()`` returns when it is.  Cheap to create per turn."""

    __slots__ = ("_event", "_reason", "_waiters")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._reason = ""
        self._waiters: set[asyncio.Future[None]] = set()

    def cancel(self, reason: str = "") -> None:
        if not self._event.is_set():
            self._reason = reason
            self._event.set()
            for fut in list(self._waiters):
                if not fut.done():
                    fut.set_result(None)
            self._waiters.clear()

    def future(self) -> asyncio.Future[None]:
        """A future resolved at the cancellation (no task needed); cancel it when no longer wanted."""
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self._event.is_set():
            fut.set_result(None)
        else:
            self._waiters.add(fut)
            fut.add_done_callback(self._waiters.discard)
        return fut

    @property
    def is_cancelled(self) -> bool:
        return self._event.is_set()

    @property
    def reason(self) -> str:
        return self._reason

    async def wait(self) -> None:
        await self._event.wait()

    def __repr__(self) -> str:
        return f"CancelToken(cancelled={self.is_cancelled})"
