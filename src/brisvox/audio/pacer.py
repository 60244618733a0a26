"""The output pacer: releases bot audio at real time, one frame per tick.

Two parts:

* :class:`PaceGrid` (pure, time as an argument) decides when each frame is released.
  Frames are placed on an absolute grid: frame *n* of a run is due at
  ``start + sum(durations before it)``, so wake-up jitter never accumulates.  The
  **underrun rule**: when the next frame becomes available later than its slot plus
  ``resync_after`` (the source ran dry, or a slow sink held the pacer back), the grid
  restarts at that instant instead of bursting to catch up; the underrun is counted.
  A frame that is late by less than ``resync_after`` is released at once and the grid
  keeps its phase.  A frame counts as available from the moment it was queued, or from
  the moment the sink took the previous frame if that was later: when only the pacer's
  own wake-up was late (a busy loop), it catches up on the same grid.
* :class:`OutputPacer` (the asyncio shell) owns a bounded input queue (``capacity``,
  backpressure: ``push`` waits) and one loop, :meth:`run`, that takes a frame, sleeps on
  the injected clock until its slot and hands it to the sink (an async callable that may
  apply backpressure).  :meth:`interrupt` is the system lane: it purges queued frames of
  older epochs and abandons the frame the loop is waiting on; it never waits.

Frames are anything with ``epoch`` and ``duration`` (``OutputAudioFrame``).  Callers
cut audio into frames of at most one tick (20 ms) before pushing, so the wire never sees
more than one tick of audio ahead of real time.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

from brisvox.core.clock import Clock
from brisvox.core.errors import ChannelClosed, ConfigError

__all__ = ["FRAME_DURATION", "OutputPacer", "PaceGrid", "PacedFrame", "PacerStats"]

FRAME_DURATION = 0.02


class PacedFrame(Protocol):
    @property
    def epoch(self) -> int: ...

    @property
    def duration(self) -> float: ...


F = TypeVar("F", bound=PacedFrame)


@dataclass(slots=True)
class PacerStats:
    released: int = 0
    underruns: int = 0
    abandoned: int = 0
    purged: int = 0


class PaceGrid:
    """When to release each frame (pure; see module docs)."""

    __slots__ = ("_next_due", "resync_after", "underruns")

    def __init__(self, *, resync_after: float = FRAME_DURATION) -> None:
        if resync_after < 0:
            raise ConfigError(f"PaceGrid: resync_after must be >= 0, got {resync_after}")
        self.resync_after = resync_after
        self.underruns = 0
        self._next_due: float | None = None

    @property
    def next_due(self) -> float | None:
        return self._next_due

    def schedule(self, available_at: float, duration: float) -> float:
        """Release time of a frame of ``duration`` seconds that is ready at ``available_at``."""
        due = self._next_due
        if due is None or available_at > due + self.resync_after:
            if due is not None:
                self.underruns += 1
            release = available_at
        else:
            release = due
        self._next_due = release + duration
        return release

    def reset(self) -> None:
        """Forget the grid: the next frame starts a new run (no underrun counted)."""
        self._next_due = None


class OutputPacer(Generic[F]):
    """Real-time release of frames into ``sink`` (see module docs)."""

    def __init__(
        self,
        clock: Clock,
        sink: Callable[[F], Awaitable[None]],
        *,
        capacity: int = 64,
        resync_after: float = FRAME_DURATION,
    ) -> None:
        if capacity < 1:
            raise ConfigError(f"OutputPacer: capacity must be at least 1, got {capacity}")
        self._clock = clock
        self._sink = sink
        self._capacity = capacity
        self._queue: deque[tuple[F, float]] = deque()  # (frame, when it was pushed)
        self._floor = 0
        self._closed = False
        self._item_waiter: asyncio.Future[None] | None = None
        self._room_waiters: deque[asyncio.Future[None]] = deque()
        self.grid = PaceGrid(resync_after=resync_after)
        self.stats = PacerStats()

    def __len__(self) -> int:
        return len(self._queue)

    @property
    def floor(self) -> int:
        """Frames of an epoch below this are dropped."""
        return self._floor

    async def push(self, frame: F) -> None:
        """Queue a frame, waiting while the queue is full.  Raises ChannelClosed after close()."""
        while True:
            if self._closed:
                raise ChannelClosed("output pacer is closed")
            if len(self._queue) < self._capacity:
                break
            fut = asyncio.get_running_loop().create_future()
            self._room_waiters.append(fut)
            try:
                await fut
            except BaseException:
                if fut.done() and not fut.cancelled() and len(self._queue) < self._capacity:
                    self._notify_room()  # woken but leaving: the room goes to the next pusher
                raise
            finally:
                if fut in self._room_waiters:
                    self._room_waiters.remove(fut)
        self._queue.append((frame, self._clock.now()))
        self._notify_item()

    def interrupt(self, new_epoch: int) -> int:
        """Drop queued frames older than ``new_epoch`` and abandon the one being waited on.
        Returns how many queued frames were purged."""
        if new_epoch <= self._floor:
            return 0
        self._floor = new_epoch
        before = len(self._queue)
        self._queue = deque(e for e in self._queue if e[0].epoch >= new_epoch)
        purged = before - len(self._queue)
        self.stats.purged += purged
        self._notify_room(all_of_them=True)
        return purged

    def close(self) -> None:
        self._closed = True
        self._notify_item()
        self._notify_room(all_of_them=True)

    async def run(self) -> None:
        """Release frames until close(); the caller owns the task that runs this."""
        clock = self._clock
        sink_done = clock.now()  # when the last hand-off to the sink returned
        while True:
            frame, pushed_at = await self._next()
            if frame.epoch < self._floor:
                self.stats.abandoned += 1
                continue
            # Ready when it was queued, or when the sink took the previous frame if that was
            # later: a slow sink is an underrun, a late wake-up of this task is not.
            release = self.grid.schedule(max(pushed_at, sink_done), frame.duration)
            if release > clock.now():
                await clock.sleep_until(release)
            if frame.epoch < self._floor:  # interrupted while waiting for its slot
                self.stats.abandoned += 1
                continue
            self.stats.released += 1
            self.stats.underruns = self.grid.underruns
            await self._sink(frame)
            sink_done = clock.now()

    async def _next(self) -> tuple[F, float]:
        while not self._queue:
            if self._closed:
                raise ChannelClosed("output pacer is closed")
            fut = asyncio.get_running_loop().create_future()
            self._item_waiter = fut
            try:
                await fut
            finally:
                self._item_waiter = None
        entry = self._queue.popleft()
        self._notify_room()
        return entry

    def _notify_item(self) -> None:
        w = self._item_waiter
        if w is not None and not w.done():
            w.set_result(None)

    def _notify_room(self, *, all_of_them: bool = False) -> None:
        while self._room_waiters:
            fut = self._room_waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                if not all_of_them:
                    return
