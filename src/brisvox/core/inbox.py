"""A processor's inbox: four bounded lanes, {downstream, upstream} x {system, data}.

Receive order: any system frame first (the downstream lane, then the upstream one), else
the data lanes, alternating directions when both hold frames.  Within a lane frames are
FIFO.

Every lane is bounded.  System lanes always apply backpressure.  On a data lane the
policy depends on the frame's overflow class: audio and metrics follow the inbox's
:class:`OverflowPolicies` (the channel's :class:`~brisvox.core.channel.Overflow` names;
``DISPLACE`` has no meaning for frames and is refused), every other frame applies
backpressure.  The lanes are not channels (:mod:`brisvox.core.channel`): one task
receives from four of them in priority order, a purge on an epoch advance and the
interrupt watch reach into them, and a graceful stop discards late frames quietly.  Drop-oldest evicts the
oldest queued frame of the same overflow class (never reordering the rest); drop-newest
discards the arriving frame.  Every drop is counted in :class:`QueueStats`.

An inbox also remembers the newest interrupt epoch ever enqueued into it, so the
processor that owns it can abandon a blocked push whose frame became stale, and refuse
to send frames an interrupt already waiting in its inbox will make stale.
"""

from __future__ import annotations

import asyncio
import enum
from collections import deque
from dataclasses import dataclass
from typing import Final

from brisvox.core.channel import Overflow, SpaceWaiters
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.frames import Direction, Frame, FrameClass, InterruptFrame, OverflowClass

__all__ = [
    "DEFAULT_POLICIES",
    "REALTIME_INPUT_POLICIES",
    "Inbox",
    "InboxState",
    "OverflowPolicies",
    "PutOutcome",
    "QueueConfig",
    "QueueStats",
]

_SYS_DOWN: Final = 0
_SYS_UP: Final = 1
_DATA_DOWN: Final = 2
_DATA_UP: Final = 3


@dataclass(frozen=True, slots=True)
class QueueConfig:
    """Lane capacities (per direction).  Keep data lanes small: queued audio is latency."""

    system: int = 32
    data: int = 32

    def __post_init__(self) -> None:
        for name in ("system", "data"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"QueueConfig.{name} must be an integer >= 1, got {value!r}")


@dataclass(frozen=True, slots=True)
class OverflowPolicies:
    """The data-lane policies for audio and metrics frames; everything else is backpressure."""

    audio: Overflow = Overflow.BACKPRESSURE
    metrics: Overflow = Overflow.DROP_NEWEST

    def __post_init__(self) -> None:
        for name in ("audio", "metrics"):
            if getattr(self, name) is Overflow.DISPLACE:
                raise ConfigError(f"OverflowPolicies.{name}: displace needs a key, which frames do not have")


DEFAULT_POLICIES: Final = OverflowPolicies()
# The stage right after the transport input: stale caller audio is worth less than fresh.
REALTIME_INPUT_POLICIES: Final = OverflowPolicies(audio=Overflow.DROP_OLDEST)


@dataclass(slots=True)
class QueueStats:
    received: int = 0
    dropped_oldest: int = 0
    dropped_newest: int = 0
    purged: int = 0
    discarded_after_stop: int = 0

    @property
    def dropped(self) -> int:
        return self.dropped_oldest + self.dropped_newest


class InboxState(enum.Enum):
    OPEN = "open"
    STOPPED = "stopped"  # the owner finished a graceful stop: late frames are discarded quietly
    CLOSED = "closed"  # the owner is gone: senders get ChannelClosed


class PutOutcome(enum.Enum):
    QUEUED = "queued"
    DROPPED = "dropped"  # an overflow policy discarded a frame (the new one or an older one)
    FULL = "full"  # backpressure: the caller must wait (try_put only)
    DISCARDED = "discarded"  # the owner already stopped


def _lane_of(frame: Frame, direction: Direction) -> int:
    down = direction is Direction.DOWNSTREAM
    if frame.frame_class is FrameClass.SYSTEM:
        return _SYS_DOWN if down else _SYS_UP
    return _DATA_DOWN if down else _DATA_UP


class Inbox:
    """Bounded four-lane inbox of one task.  Single consumer; any number of producers."""

    __slots__ = (
        "_capacity",
        "_had_senders",
        "_lanes",
        "_next_up",
        "_policies",
        "_recv_waiter",
        "_senders",
        "_space_waiters",
        "_watchers",
        "name",
        "newest_interrupt",
        "state",
        "stats",
    )

    def __init__(
        self,
        name: str = "inbox",
        config: QueueConfig | None = None,
        policies: OverflowPolicies | None = None,
    ) -> None:
        config = config or QueueConfig()
        self.name = name
        self._policies = policies or OverflowPolicies()
        self._capacity = (config.system, config.system, config.data, config.data)
        self._lanes: tuple[deque[tuple[Frame, int]], ...] = (deque(), deque(), deque(), deque())
        # A lane's waiters are made when a sender first has to wait on it: most lanes never
        # fill, and each empty deque would be walked by every full garbage collection while
        # the call lives (docs/PERFORMANCE.md, "Full garbage collections").
        self._space_waiters: list[SpaceWaiters | None] = [None, None, None, None]
        self._recv_waiter: asyncio.Future[None] | None = None
        self._watchers: list[asyncio.Future[None]] = []
        self._next_up = False
        self._senders = 0
        self._had_senders = False
        self.newest_interrupt = -1
        self.state = InboxState.OPEN
        self.stats = QueueStats()

    # --- producers ---------------------------------------------------------------------

    def try_put(self, frame: Frame, direction: Direction, source: int = 0) -> PutOutcome:
        """Queue ``frame`` without waiting.  FULL means a backpressure lane has no room.

        ``source`` tags where the frame came from (a branch index at a merge); it is
        returned with the frame by ``get``.
        """
        if self.state is not InboxState.OPEN:
            return self._refuse(frame)
        lane_index = _lane_of(frame, direction)
        lane = self._lanes[lane_index]
        outcome = PutOutcome.QUEUED
        if len(lane) >= self._capacity[lane_index]:
            policy = self._policy_for(frame, lane_index)
            if policy is Overflow.BACKPRESSURE:
                return PutOutcome.FULL
            if policy is Overflow.DROP_NEWEST or not self._evict_oldest(lane, frame.overflow):
                self.stats.dropped_newest += 1
                return PutOutcome.DROPPED
            self.stats.dropped_oldest += 1
            outcome = PutOutcome.DROPPED
        lane.append((frame, source))
        if isinstance(frame, InterruptFrame) and frame.new_epoch > self.newest_interrupt:
            self.newest_interrupt = frame.new_epoch
            self._wake_watchers()
        waiter = self._recv_waiter
        if waiter is not None:
            self._recv_waiter = None
            if not waiter.done():
                waiter.set_result(None)
        return outcome

    async def put(self, frame: Frame, direction: Direction, source: int = 0) -> PutOutcome:
        """Queue ``frame``, waiting for room on a backpressure lane."""
        while True:
            outcome = self.try_put(frame, direction, source)
            if outcome is not PutOutcome.FULL:
                return outcome
            await self.wait_for_space(frame, direction)

    def space_waiter(self, frame: Frame, direction: Direction) -> asyncio.Future[None]:
        """A future resolved when the lane ``frame`` goes to may have room (or the inbox closes)."""
        lane_index = _lane_of(frame, direction)
        waiters = self._space_waiters[lane_index]
        if waiters is None:
            waiters = self._space_waiters[lane_index] = SpaceWaiters()
        return waiters.add()

    async def wait_for_space(self, frame: Frame, direction: Direction) -> None:
        fut = self.space_waiter(frame, direction)
        try:
            await fut
        except BaseException:
            self.release_space(fut, frame, direction)
            raise
        finally:
            self.forget_space_waiter(fut, frame, direction)

    def forget_space_waiter(self, fut: asyncio.Future[None], frame: Frame, direction: Direction) -> None:
        """Stop tracking a waiter from :meth:`space_waiter` (its sender is done waiting)."""
        waiters = self._space_waiters[_lane_of(frame, direction)]
        if waiters is not None:
            waiters.discard(fut)

    def release_space(self, fut: asyncio.Future[None], frame: Frame, direction: Direction) -> None:
        """A sender leaving without putting passes the wakeup ``fut`` received to the next waiter.

        Without this, a woken sender that gives up (cancelled, or its frame went stale)
        swallows the only wakeup and a second blocked sender waits beside a free slot.
        """
        if not SpaceWaiters.was_woken(fut):
            return  # it was never woken: nothing to pass on
        lane_index = _lane_of(frame, direction)
        waiters = self._space_waiters[lane_index]
        if waiters and len(self._lanes[lane_index]) < self._capacity[lane_index]:
            waiters.wake()

    def interrupt_watcher(self) -> asyncio.Future[None]:
        """A future resolved when a newer interrupt is enqueued here (or the inbox closes)."""
        fut = asyncio.get_running_loop().create_future()
        self._watchers.append(fut)
        return fut

    def forget_watcher(self, fut: asyncio.Future[None]) -> None:
        if fut in self._watchers:
            self._watchers.remove(fut)

    def _refuse(self, frame: Frame) -> PutOutcome:
        if self.state is InboxState.CLOSED:
            raise ChannelClosed(f"inbox {self.name!r} is closed")
        self.stats.discarded_after_stop += 1
        return PutOutcome.DISCARDED

    def _policy_for(self, frame: Frame, lane_index: int) -> Overflow:
        if lane_index < _DATA_DOWN:
            return Overflow.BACKPRESSURE
        if frame.overflow is OverflowClass.AUDIO:
            return self._policies.audio
        if frame.overflow is OverflowClass.METRICS:
            return self._policies.metrics
        return Overflow.BACKPRESSURE

    @staticmethod
    def _evict_oldest(lane: deque[tuple[Frame, int]], overflow: OverflowClass) -> bool:
        for i, (queued, _) in enumerate(lane):
            if queued.overflow is overflow:
                del lane[i]
                return True
        return False

    # --- the consumer -------------------------------------------------------------------

    @property
    def receiver_waiting(self) -> bool:
        """Whether the owner's task waits in :meth:`get` with every lane empty: a frame handled
        now, in the sender's task, is in order with everything the owner took before it."""
        waiter = self._recv_waiter
        return waiter is not None and not waiter.done()

    def get_nowait(self) -> tuple[Frame, Direction, int] | None:
        """The next (frame, direction, source) in receive order, or None when empty."""
        lanes = self._lanes
        if lanes[_SYS_DOWN]:
            return self._take(_SYS_DOWN, Direction.DOWNSTREAM)
        if lanes[_SYS_UP]:
            return self._take(_SYS_UP, Direction.UPSTREAM)
        down, up = lanes[_DATA_DOWN], lanes[_DATA_UP]
        if down and up:
            take_up = self._next_up
            self._next_up = not take_up
            if take_up:
                return self._take(_DATA_UP, Direction.UPSTREAM)
            return self._take(_DATA_DOWN, Direction.DOWNSTREAM)
        if down:
            self._next_up = True
            return self._take(_DATA_DOWN, Direction.DOWNSTREAM)
        if up:
            self._next_up = False
            return self._take(_DATA_UP, Direction.UPSTREAM)
        return None

    async def get(self) -> tuple[Frame, Direction, int] | None:
        """The next frame in receive order; None once every sender closed and the inbox is empty."""
        while True:
            item = self.get_nowait()
            if item is not None:
                return item
            if self.state is InboxState.CLOSED or self._senders_gone():
                return None
            waiter = asyncio.get_running_loop().create_future()
            self._recv_waiter = waiter
            try:
                await waiter
            finally:
                if self._recv_waiter is waiter:
                    self._recv_waiter = None

    def _take(self, lane_index: int, direction: Direction) -> tuple[Frame, Direction, int]:
        frame, source = self._lanes[lane_index].popleft()
        self.stats.received += 1
        waiters = self._space_waiters[lane_index]
        if waiters:
            waiters.wake()
        return frame, direction, source

    def purge_stale(self, epoch: int) -> int:
        """Drop queued data-lane frames that are stale for ``epoch``; return how many."""
        purged = 0
        for lane_index in (_DATA_DOWN, _DATA_UP):
            lane = self._lanes[lane_index]
            if not lane:
                continue
            keep = [item for item in lane if not item[0].is_stale(epoch)]
            removed = len(lane) - len(keep)
            if removed:
                lane.clear()
                lane.extend(keep)
                purged += removed
                waiters = self._space_waiters[lane_index]
                if waiters:
                    waiters.wake(removed)
        self.stats.purged += purged
        return purged

    def drop_all(self) -> int:
        """Drop every queued frame (a cancel); return how many."""
        dropped = sum(len(lane) for lane in self._lanes)
        for lane in self._lanes:
            lane.clear()
        return dropped

    def __len__(self) -> int:
        return sum(len(lane) for lane in self._lanes)

    def lane_lengths(self) -> dict[str, int]:
        names = ("system_down", "system_up", "data_down", "data_up")
        return {n: len(lane) for n, lane in zip(names, self._lanes, strict=True)}

    # --- life cycle ---------------------------------------------------------------------

    def add_sender(self) -> None:
        """Count a producer; once every counted producer is removed and the lanes are empty,
        ``get`` returns None.  An inbox with no counted producer stays open until ``close``."""
        self._senders += 1
        self._had_senders = True

    def remove_sender(self) -> None:
        self._senders -= 1
        if self._senders_gone():
            self._wake_receiver()

    def _senders_gone(self) -> bool:
        return self._had_senders and self._senders <= 0

    def close(self, state: InboxState = InboxState.CLOSED) -> None:
        """End the inbox: CLOSED makes senders fail, STOPPED makes them discard quietly."""
        self.state = state
        for waiters in self._space_waiters:
            if waiters is not None:
                waiters.wake_all()
        self._wake_watchers()
        self._wake_receiver()

    def _wake_receiver(self) -> None:
        waiter = self._recv_waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def _wake_watchers(self) -> None:
        watchers, self._watchers = self._watchers, []
        for fut in watchers:
            if not fut.done():
                fut.set_result(None)

    def __repr__(self) -> str:
        return f"Inbox({self.name!r}, state={self.state.value}, queued={len(self)})"
