"""The base class of provider session handles.

A provider session moves two streams: what we send (audio, text) and what the provider
answers (transcripts, audio, word timings).  Both run through a bounded
:class:`~brisvox.core.channel.Channel`; a session's events use backpressure (nothing is
lost; a slow reader slows the producer, which in turn stops reading its socket, so the
provider sees the pressure).  A TTS cancel purges (``Channel.purge``) the queued audio of a cancelled
context that is still waiting to be read.
"""

from __future__ import annotations

from types import TracebackType
from typing import Generic, Self, TypeVar

from brisvox.core.channel import Channel
from brisvox.core.errors import ChannelClosed

__all__ = ["DEFAULT_EVENT_CAPACITY", "SessionBase"]

E = TypeVar("E")

DEFAULT_EVENT_CAPACITY = 64
"""Events a session buffers before its producer waits (about 1.3 s of 20 ms audio chunks)."""


class SessionBase(Generic[E]):
    """Helper for provider session handles: an event channel, iteration, and closing.

    A session is an async iterator of its events and an async context manager; leaving the
    ``async with`` block (or calling :meth:`aclose`) cancels the session: the subclass hook
    :meth:`_shutdown` stops its work (cancel tasks, close sockets), queued events are
    dropped and iteration ends.  When the provider side ends on its own, the subclass calls
    :meth:`_finish`: the reader drains the queued events, then iteration ends.
    """

    def __init__(self, *, capacity: int = DEFAULT_EVENT_CAPACITY, name: str = "session") -> None:
        self._events: Channel[E] = Channel(capacity, name=f"{name} events")
        self._closing = False
        self._name = name

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` was called or the session ended on its own."""
        return self._closing or self._events.closed

    async def _emit(self, event: E) -> None:
        """Queue an event for the reader (waits while the reader is behind)."""
        await self._events.send(event)

    def _finish(self) -> None:
        """The provider side ended: the reader drains what is queued, then the iteration stops."""
        self._events.close()

    async def _shutdown(self) -> None:
        """Subclass hook: stop background work and release connections.  Called once."""

    def _check_open(self) -> None:
        if self.closed:
            raise ChannelClosed(f"{self._name} is closed")

    async def aclose(self) -> None:
        """Cancel the session: stop its work and drop events not yet read.  Idempotent."""
        if self._closing:
            return
        self._closing = True
        try:
            await self._shutdown()
        finally:
            self._events.abort()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> E:
        try:
            return await self._events.recv()
        except ChannelClosed:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
