"""A turn's cancellation token: cancelled once, observed by every call of the turn."""

from __future__ import annotations

import asyncio

__all__ = ["CancelToken"]


class CancelToken:
    """Set once (``cancel()``); ``wait()`` returns when it is.  Cheap to create per turn."""

    __slots__ = ("_event", "_reason")

    def __init__(self) -> None:
        self._event = asyncio.Event()
        self._reason = ""

    def cancel(self, reason: str = "") -> None:
        if not self._event.is_set():
            self._reason = reason
            self._event.set()

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
