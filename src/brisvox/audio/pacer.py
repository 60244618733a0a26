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

* :class:`PaceTicker` (optional, one per process): one loop timer for the pacers of every
  call.  A pacer given a ticker (and a ``try_sink`` that takes a frame without waiting)
  does not sleep per frame: the ticker wakes at the earliest due frame of all its pacers
  and releases, in that one callback, every frame due within ``window`` of it (frames go
  out at most ``window`` early, never late by the ticker; the grid keeps its phase).  The
  pacer's own task then only wakes when the sink is full (it awaits ``sink``:
  backpressure, and the wait counts as the sink's, as above), on close, or when releasing
  failed (it raises that failure).  An interrupt drops the frame waiting for its slot at
  once.  At 60 calls that is a few hundred wake-ups a second instead of one timer and one
  task wake-up per frame per call.

Frames are anything with ``epoch`` and ``duration`` (``OutputAudioFrame``).  Callers
cut audio into frames of at most one tick (20 ms) before pushing, so the wire never sees
more than one tick of audio ahead of real time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from brisvox.core.clock import Clock, Timer, call_at
from brisvox.core.errors import ChannelClosed, ConfigError

__all__ = ["FRAME_DURATION", "TICK_WINDOW", "OutputPacer", "PaceGrid", "PaceTicker", "PacedFrame", "PacerStats"]

FRAME_DURATION = 0.02
# How early the shared ticker may release a frame so that frames of many calls due close
# together go out in one wake-up (bench/density/tick_lever.py measured the choice).
TICK_WINDOW = 0.005


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
        ticker: PaceTicker | None = None,
        try_sink: Callable[[F], bool] | None = None,
    ) -> None:
        if capacity < 1:
            raise ConfigError(f"OutputPacer: capacity must be at least 1, got {capacity}")
        if ticker is not None and try_sink is None:
            raise ConfigError("OutputPacer: a ticker needs try_sink (a sink that takes a frame without waiting)")
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
        # Ticked mode (see module docs): the frame waiting for its slot and its release time,
        # the frame the sink refused (the run task awaits the sink with it), a failure of the
        # ticker's release, and the due time the ticker holds for this pacer.
        self._ticker = ticker
        self._try_sink = try_sink
        self._ticking = False
        self._held: tuple[F, float] | None = None
        self._stalled: F | None = None
        self._failure: Exception | None = None
        self._sink_done = -math.inf
        self._armed: float | None = None
        self._attention: asyncio.Future[None] | None = None

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
        now = self._clock.now()
        self._queue.append((frame, now))
        self._notify_item()
        if self._ticking and self._held is None and self._stalled is None and self._armed is None:
            # Released by the ticker's next callback, not here: as the per-call pacer's task
            # would, after the pusher's step (it may push a mark behind the frame first).
            assert self._ticker is not None
            self._ticker.arm(self, now)

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
        held = self._held
        if held is not None and held[0].epoch < new_epoch:
            self._held = None  # abandoned at once, its slot with it
            self._armed = None
            self.stats.abandoned += 1
            if self._ticking and self._stalled is None:
                self._kick(self._clock.now())
        return purged

    def close(self) -> None:
        self._closed = True
        self._notify_item()
        self._notify_room(all_of_them=True)
        self._signal()

    async def run(self) -> None:
        """Release frames until close(); the caller owns the task that runs this."""
        if self._ticker is not None:
            await self._run_ticked()
            return
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

    async def _run_ticked(self) -> None:
        """The pacer's task in ticked mode: the ticker releases the frames; this task takes
        over only what must wait (a full sink), and ends on close or a failed release."""
        clock, loop = self._clock, asyncio.get_running_loop()
        self._ticking = True
        try:
            self._kick(clock.now())
            while True:
                if self._failure is not None:
                    raise self._failure
                frame = self._stalled
                if frame is not None:
                    await self._sink(frame)  # backpressure: the wire is slow
                    self._stalled = None
                    self._sink_done = clock.now()
                    self._kick(self._sink_done)
                    continue
                if self._closed and self._held is None and not self._queue:
                    raise ChannelClosed("output pacer is closed")
                fut = self._attention = loop.create_future()
                try:
                    await fut
                finally:
                    self._attention = None
        finally:
            self._ticking = False
            self._armed = None  # the ticker skips this pacer's entries from now on

    def _signal(self) -> None:
        w = self._attention
        if w is not None and not w.done():
            w.set_result(None)

    def _kick(self, now: float) -> None:
        """Release what is due and hand the ticker the next due time (ticked mode)."""
        ticker = self._ticker
        assert ticker is not None
        try:
            due = self._pump(now, now + ticker.window)
        except Exception as exc:  # the run task raises it: this call ends, the others go on
            self._failure = exc
            self._signal()
            return
        if due is not None and due != self._armed:
            ticker.arm(self, due)

    def _pump(self, now: float, horizon: float) -> float | None:
        """Release every frame due by ``horizon``; the next due time, or None when nothing
        waits for a slot (idle, stalled on the sink, or closed and drained)."""
        try_sink = self._try_sink
        assert try_sink is not None
        while True:
            held = self._held
            if held is None:
                if not self._queue:
                    if self._closed:
                        self._signal()
                    return None
                frame, pushed_at = self._queue.popleft()
                self._notify_room()
                if frame.epoch < self._floor:
                    self.stats.abandoned += 1
                    continue
                held = self._held = (frame, self.grid.schedule(max(pushed_at, self._sink_done), frame.duration))
            frame, release = held
            if release > horizon:
                return release
            self._held = None
            self.stats.released += 1
            self.stats.underruns = self.grid.underruns
            if not try_sink(frame):
                self._stalled = frame
                self._signal()
                return None
            self._sink_done = now

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


class PaceTicker:
    """One loop timer for the output pacers of every call of a process (see module docs).

    It owns no task: the timer is armed only while some pacer has a frame waiting for its
    slot, so a ticker with no calls holds nothing.  ``wakeups`` counts its callbacks."""

    __slots__ = ("_clock", "_firing", "_heap", "_seq", "_timer", "_timer_at", "wakeups", "window")

    def __init__(self, clock: Clock, *, window: float = TICK_WINDOW) -> None:
        if not 0 <= window < FRAME_DURATION:
            raise ConfigError(f"PaceTicker: window must be >= 0 and under one frame, got {window}")
        self._clock = clock
        self.window = window
        self._heap: list[tuple[float, int, OutputPacer[Any]]] = []
        self._seq = itertools.count()
        self._timer: Timer | None = None
        self._timer_at = math.inf
        self._firing = False
        self.wakeups = 0

    def arm(self, pacer: OutputPacer[Any], due: float) -> None:
        """Release ``pacer``'s next frame at ``due`` (replaces what it armed before)."""
        pacer._armed = due
        heapq.heappush(self._heap, (due, next(self._seq), pacer))
        if not self._firing and due < self._timer_at:
            self._set_timer(due)

    def _set_timer(self, at: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = at
        self._timer = call_at(self._clock, at, self._fire)

    def _fire(self) -> None:
        self._timer, self._timer_at = None, math.inf
        self.wakeups += 1
        now = self._clock.now()
        heap, due_now = self._heap, []
        while heap and heap[0][0] <= now + self.window:
            due, _, pacer = heapq.heappop(heap)
            if pacer._armed == due:  # else stale: re-armed, interrupted or ended since
                pacer._armed = None
                due_now.append(pacer)
        self._firing = True
        try:
            for pacer in due_now:
                pacer._kick(now)  # a failure ends that pacer's call, never the tick
        finally:
            self._firing = False
        while heap and heap[0][2]._armed != heap[0][0]:
            heapq.heappop(heap)
        if heap:
            self._set_timer(heap[0][0])
