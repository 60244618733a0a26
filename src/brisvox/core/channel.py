"""The bounded channel: every queue between tasks (transport, provider sessions) is one.

A :class:`Channel` has a fixed capacity.  What happens when it is full is its
:class:`Overflow` policy: one for the whole channel (``Channel(8, Overflow.DROP_OLDEST)``),
or one per item, decided by a ``policy`` function that returns an :class:`ItemPolicy`:

* ``BACKPRESSURE`` (the default): the sender waits for room (never lost).  A slow reader
  slows the producer, which in turn stops reading its socket, so the peer sees the pressure.
* ``DROP_OLDEST``: the oldest queued item of the same class (``key``) is evicted; with
  nothing of its class queued the new item is dropped.  Either way one item is counted in
  ``dropped``.  Never waits.
* ``DISPLACE``: a queued item with the same ``key`` is removed and the new one appended
  (cumulative values: nothing is lost but intermediate values); when the queue is still
  full, the oldest ``DROP_OLDEST`` item of any class is evicted; only when there is none
  does the sender wait.
* ``DROP_NEWEST``: a full queue drops the new item (counted).  Never waits.

``purge(pred)`` removes queued items synchronously (a TTS cancel drops the audio of a
cancelled context still waiting to be read); ``wake()`` makes a blocked ``recv_or_wake``
return :data:`WAKE` (used to hand a receiver out-of-band work).  Closing has two flavours:
``close()`` (the writer is done: senders get :class:`ChannelClosed`, the receiver drains
what is queued, then gets :class:`ChannelClosed` and iteration ends) and ``abort()`` (the
reader is gone: queued items are dropped as well).  A sender cancelled after it was woken
hands the wakeup on, so a second blocked sender never waits beside a free slot.

The same :class:`Overflow` names the data-lane policies of a processor's inbox
(:mod:`brisvox.core.inbox`).  A channel has one receiver and any number of senders; it
lives on one event loop and is not thread-safe.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Final, Generic, Self, TypeVar

from brisvox.core.errors import ChannelClosed, ConfigError

__all__ = ["WAKE", "Channel", "ItemPolicy", "Overflow", "SpaceWaiters", "Wake"]

T = TypeVar("T")


class Overflow(enum.Enum):
    """What a full queue does with one more item."""

    BACKPRESSURE = "backpressure"
    DROP_OLDEST = "drop_oldest"
    DROP_NEWEST = "drop_newest"
    DISPLACE = "displace"


@dataclass(frozen=True, slots=True)
class ItemPolicy:
    overflow: Overflow
    key: Hashable = None


class Wake(enum.Enum):
    WAKE = "wake"


WAKE: Final = Wake.WAKE


class SpaceWaiters(deque[asyncio.Future[None]]):
    """The senders blocked on a full queue, woken in arrival order.

    Shared by the channel and the inbox's lanes.  A sender that was woken but leaves
    without putting (cancelled, or its frame went stale) must hand the wakeup on
    (:meth:`was_woken`, then :meth:`wake`), or a second blocked sender waits beside a free slot.
    A deque underneath, so the per-frame "anyone waiting?" test stays a C-level truth test.
    """

    __slots__ = ()

    def add(self) -> asyncio.Future[None]:
        """A future resolved when this sender may find room (or the queue closes)."""
        fut = asyncio.get_running_loop().create_future()
        self.append(fut)
        return fut

    def discard(self, fut: asyncio.Future[None]) -> None:
        if fut in self:
            self.remove(fut)

    def wake(self, count: int = 1) -> None:
        """Resolve the next ``count`` live waiters (done ones are skipped)."""
        while count > 0 and self:
            fut = self.popleft()
            if not fut.done():
                fut.set_result(None)
                count -= 1

    def wake_all(self) -> None:
        while self:
            fut = self.popleft()
            if not fut.done():
                fut.set_result(None)

    @staticmethod
    def was_woken(fut: asyncio.Future[None]) -> bool:
        """True when ``fut`` carries a wakeup (resolved, not cancelled)."""
        return fut.done() and not fut.cancelled()


class _Uniform:
    """The policy function of a channel with one overflow policy for every item."""

    __slots__ = ("policy",)

    def __init__(self, overflow: Overflow) -> None:
        self.policy = ItemPolicy(overflow)

    def __call__(self, _: object) -> ItemPolicy:
        return self.policy


# One per policy, shared by every channel: a channel is made per call (eight of them), and each
# object a call holds is walked by every full garbage collection while the call lives.
_UNIFORM: Final = {overflow: _Uniform(overflow) for overflow in Overflow}


class Channel(Generic[T]):
    """A bounded FIFO with an overflow policy (see module docs)."""

    __slots__ = ("_closed", "_items", "_name", "_policy", "_recv_waiter", "_send_waiters", "_woken",
                 "capacity", "dropped")

    def __init__(
        self,
        capacity: int,
        overflow: Overflow = Overflow.BACKPRESSURE,
        *,
        name: str = "channel",
        policy: Callable[[T], ItemPolicy] | None = None,
    ) -> None:
        if capacity < 1:
            raise ConfigError(f"{name}: channel capacity must be at least 1, got {capacity}")
        if policy is not None and overflow is not Overflow.BACKPRESSURE:
            raise ConfigError(f"{name}: give either one overflow policy or a policy per item, not both")
        self.capacity = capacity
        self.dropped = 0
        self._name = name
        self._policy: Callable[[T], ItemPolicy] = policy if policy is not None else _UNIFORM[overflow]
        self._items: deque[tuple[T, ItemPolicy]] = deque()
        self._closed = False
        self._woken = False
        self._recv_waiter: asyncio.Future[None] | None = None
        # Made when a sender first has to wait: most channels never fill, and an empty deque is
        # still an object every full garbage collection walks for as long as the call lives.
        self._send_waiters: SpaceWaiters | None = None

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"Channel({self._name!r}, {len(self._items)}/{self.capacity}, dropped={self.dropped}, {state})"

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def receiver_waiting(self) -> bool:
        """Whether the receiver waits in :meth:`recv` with nothing queued: an item handled now,
        in the sender's task, is in order with everything the receiver took before it."""
        waiter = self._recv_waiter
        return waiter is not None and not waiter.done() and not self._items

    # --- sending ---------------------------------------------------------------------------

    def try_send(self, item: T) -> bool:
        """Queue ``item`` without waiting.  False when a ``BACKPRESSURE`` item (or a
        ``DISPLACE`` item that found nothing to evict) would have to wait; lossy items
        return True even when they were dropped (see ``dropped``)."""
        if self._closed:
            raise ChannelClosed(f"{self._name} is closed")
        pol = self._policy(item)
        if pol.overflow is Overflow.DISPLACE:
            self._remove_key(pol.key)
        if len(self._items) < self.capacity:
            self._push(item, pol)
            return True
        kind = pol.overflow
        if kind is Overflow.DROP_NEWEST:
            self.dropped += 1
            return True
        if kind is Overflow.DROP_OLDEST:
            if self._evict_oldest(pol.key):
                self._push(item, pol)
            self.dropped += 1
            return True
        if kind is Overflow.DISPLACE and self._evict_oldest(None):
            self.dropped += 1
            self._push(item, pol)
            return True
        return False

    async def send(self, item: T) -> None:
        """Queue ``item``, waiting for room when its policy says so.  Raises ChannelClosed once closed."""
        while not self.try_send(item):
            waiters = self._send_waiters
            if waiters is None:
                waiters = self._send_waiters = SpaceWaiters()
            fut = waiters.add()
            try:
                await fut
            except asyncio.CancelledError:
                if SpaceWaiters.was_woken(fut):
                    self._room()  # pass the wake-up on to the next sender
                raise
            finally:
                waiters.discard(fut)

    def _push(self, item: T, pol: ItemPolicy) -> None:
        self._items.append((item, pol))
        waiter = self._recv_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _remove_key(self, key: Hashable) -> None:
        for i, (_, pol) in enumerate(self._items):
            if pol.overflow is Overflow.DISPLACE and pol.key == key:
                del self._items[i]
                return

    def _evict_oldest(self, key: Hashable) -> bool:
        """Evict the oldest DROP_OLDEST item (of class ``key``, or of any class for None)."""
        for i, (_, pol) in enumerate(self._items):
            if pol.overflow is Overflow.DROP_OLDEST and (key is None or pol.key == key):
                del self._items[i]
                return True
        return False

    def _room(self) -> None:
        waiters = self._send_waiters
        if waiters and len(self._items) < self.capacity:
            waiters.wake()

    # --- receiving -------------------------------------------------------------------------

    def try_recv(self) -> T | None:
        """The oldest queued item, or None when nothing is queued; ChannelClosed once closed and drained."""
        if not self._items:
            if self._closed:
                raise ChannelClosed(f"{self._name} is closed")
            return None
        item = self._items.popleft()[0]
        self._room()
        return item

    async def recv(self) -> T:
        """The oldest item; waits for one.  Raises ChannelClosed once closed and drained."""
        while True:
            got = await self.recv_or_wake()
            if got is not WAKE:
                return got

    async def recv_or_wake(self) -> T | Wake:
        """The next item, or :data:`WAKE` if :meth:`wake` was called (once per call)."""
        while True:
            if self._woken:
                self._woken = False
                return WAKE
            if self._items:
                item = self._items.popleft()[0]
                self._room()
                return item
            if self._closed:
                raise ChannelClosed(f"{self._name} is closed")
            fut = asyncio.get_running_loop().create_future()
            self._recv_waiter = fut
            try:
                await fut
            finally:
                self._recv_waiter = None

    def wake(self) -> None:
        self._woken = True
        waiter = self._recv_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> T:
        try:
            return await self.recv()
        except ChannelClosed:
            raise StopAsyncIteration from None

    # --- maintenance -----------------------------------------------------------------------

    def purge(self, pred: Callable[[T], bool]) -> list[T]:
        """Remove and return every queued item for which ``pred`` is true, synchronously."""
        kept: deque[tuple[T, ItemPolicy]] = deque()
        removed: list[T] = []
        for entry in self._items:
            (removed.append(entry[0]) if pred(entry[0]) else kept.append(entry))
        if removed:
            self._items = kept
            for _ in removed:
                self._room()
        return removed

    def close(self) -> None:
        """The writer is done: senders get ChannelClosed, the receiver drains what is queued."""
        if self._closed:
            return
        self._closed = True
        waiter = self._recv_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        if self._send_waiters is not None:
            self._send_waiters.wake_all()

    def abort(self) -> int:
        """The reader is gone: drop what is queued (returned count) and close."""
        dropped = len(self._items)
        self._items.clear()
        self.close()
        return dropped
