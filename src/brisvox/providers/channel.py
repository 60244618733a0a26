"""Bounded channels for provider sessions, and a base class for session handles.

A provider session moves two streams: what we send (audio, text) and what the provider
answers (transcripts, audio, word timings).  Both run through a :class:`Channel` with a
fixed capacity and a named :class:`Overflow` policy:

* ``BACKPRESSURE`` (the default, and what every provider session uses for its events):
  ``put`` waits until the reader took an item.  Nothing is lost; a slow reader slows the
  producer, which in turn stops reading its socket, so the provider sees the pressure.
* ``DROP_OLDEST``: a full channel evicts its oldest item (real-time audio in, where fresh
  samples matter more than old ones).  Drops are counted in ``dropped``.
* ``DROP_NEWEST``: a full channel refuses the new item (metrics).  Counted in ``dropped``.

Closing has two flavours: :meth:`Channel.close` (the writer is done: the reader drains what
is queued, then iteration ends) and :meth:`Channel.abort` (the reader is gone: queued items
are dropped and every waiting writer gets :class:`~brisvox.core.errors.ChannelClosed`).
:meth:`Channel.remove_if` purges queued items, which is how a TTS cancel drops the audio of
a cancelled context that is still waiting to be read.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Callable
from types import TracebackType
from typing import Generic, Self, TypeVar

from brisvox.core.errors import ChannelClosed, ConfigError

__all__ = ["DEFAULT_EVENT_CAPACITY", "Channel", "Overflow", "SessionBase"]

T = TypeVar("T")
E = TypeVar("E")

DEFAULT_EVENT_CAPACITY = 64
"""Events a session buffers before its producer waits (about 1.3 s of 20 ms audio chunks)."""


class Overflow(enum.Enum):
    """What a full channel does with one more item."""

    BACKPRESSURE = "backpressure"
    DROP_OLDEST = "drop_oldest"
    DROP_NEWEST = "drop_newest"


class Channel(Generic[T]):
    """A bounded single-loop FIFO with an overflow policy and two ways to close."""

    __slots__ = ("_capacity", "_closed", "_getters", "_items", "_name", "_overflow", "_putters", "dropped")

    def __init__(self, capacity: int, overflow: Overflow = Overflow.BACKPRESSURE, *, name: str = "channel") -> None:
        if capacity < 1:
            raise ConfigError(f"{name}: channel capacity must be at least 1, got {capacity}")
        self._capacity = capacity
        self._overflow = overflow
        self._name = name
        self._items: deque[T] = deque()
        self._getters: deque[asyncio.Future[None]] = deque()
        self._putters: deque[asyncio.Future[None]] = deque()
        self._closed = False
        self.dropped = 0

    @property
    def capacity(self) -> int:
        return self._capacity

    @property
    def overflow(self) -> Overflow:
        return self._overflow

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"Channel({self._name!r}, {len(self._items)}/{self._capacity}, {self._overflow.value}, {state})"

    # --- writing ---------------------------------------------------------------------------

    async def put(self, item: T) -> None:
        """Queue ``item``; under backpressure wait for room.  Raises ChannelClosed once closed."""
        while True:
            if self._closed:
                raise ChannelClosed(f"{self._name} is closed")
            if len(self._items) < self._capacity or self._overflow is not Overflow.BACKPRESSURE:
                self.put_nowait(item)
                return
            fut = asyncio.get_running_loop().create_future()
            self._putters.append(fut)
            try:
                await fut
            finally:
                if fut in self._putters:
                    self._putters.remove(fut)

    def put_nowait(self, item: T) -> bool:
        """Queue ``item`` without waiting; returns False when it was not queued.

        A full backpressure channel refuses the item (False, not counted as a drop); a
        drop-newest channel refuses and counts it; a drop-oldest channel evicts the oldest
        queued item, counts that, and queues this one (True).
        """
        if self._closed:
            raise ChannelClosed(f"{self._name} is closed")
        if len(self._items) >= self._capacity:
            if self._overflow is Overflow.BACKPRESSURE:
                return False
            self.dropped += 1
            if self._overflow is Overflow.DROP_NEWEST:
                return False
            self._items.popleft()
        self._items.append(item)
        _wake_one(self._getters)
        return True

    def close(self) -> None:
        """The writer is done: the reader gets what is queued, then the end."""
        if self._closed:
            return
        self._closed = True
        _wake_all(self._getters)
        _wake_all(self._putters)

    def abort(self) -> int:
        """The reader is gone: drop what is queued (returned count) and release waiting writers."""
        dropped = len(self._items)
        self._items.clear()
        self.close()
        return dropped

    def remove_if(self, predicate: Callable[[T], bool]) -> int:
        """Drop every queued item for which ``predicate`` is true; returns how many."""
        kept = [item for item in self._items if not predicate(item)]
        removed = len(self._items) - len(kept)
        if removed:
            self._items.clear()
            self._items.extend(kept)
            for _ in range(removed):
                _wake_one(self._putters)
        return removed

    # --- reading ---------------------------------------------------------------------------

    def get_nowait(self) -> T | None:
        """The oldest queued item, or None when nothing is queued (open or closed)."""
        if not self._items:
            return None
        item = self._items.popleft()
        _wake_one(self._putters)
        return item

    async def get(self) -> T:
        """The oldest item; waits for one.  Raises ChannelClosed once closed and drained."""
        while not self._items:
            if self._closed:
                raise ChannelClosed(f"{self._name} is closed")
            fut = asyncio.get_running_loop().create_future()
            self._getters.append(fut)
            try:
                await fut
            finally:
                if fut in self._getters:
                    self._getters.remove(fut)
        item = self._items.popleft()
        _wake_one(self._putters)
        return item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.get()
        except ChannelClosed:
            raise StopAsyncIteration from None


def _wake_one(waiters: deque[asyncio.Future[None]]) -> None:
    while waiters:
        fut = waiters.popleft()
        if not fut.done():
            fut.set_result(None)
            return


def _wake_all(waiters: deque[asyncio.Future[None]]) -> None:
    while waiters:
        fut = waiters.popleft()
        if not fut.done():
            fut.set_result(None)


class SessionBase(Generic[E]):
    """Helper for provider session handles: an event channel, iteration, and closing.

    A session is an async iterator of its events and an async context manager; leaving the
    ``async with`` block (or calling :meth:`aclose`) cancels the session: the subclass hook
    :meth:`_shutdown` stops its work (cancel tasks, close sockets), queued events are
    dropped and iteration ends.  When the provider side ends on its own, the subclass calls
    :meth:`_finish`: the reader drains the queued events, then iteration ends.
    """

    def __init__(self, *, capacity: int = DEFAULT_EVENT_CAPACITY, name: str = "session") -> None:
        self._events: Channel[E] = Channel(capacity, Overflow.BACKPRESSURE, name=f"{name} events")
        self._closing = False
        self._name = name

    @property
    def closed(self) -> bool:
        """True once :meth:`aclose` was called or the session ended on its own."""
        return self._closing or self._events.closed

    async def _emit(self, event: E) -> None:
        """Queue an event for the reader (waits while the reader is behind)."""
        await self._events.put(event)

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
            return await self._events.get()
        except ChannelClosed:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
