"""Time for all brisvox logic.

Logic never reads a clock directly: it receives a :class:`Clock` (or, in the pure
modules, the time as an argument).  Instants are ``float`` seconds on the running event
loop's monotonic clock (``loop.time()``); durations are ``float`` seconds.

Two clocks exist:

* :class:`SystemClock` for production: the loop's monotonic time and the real wall time.
* :class:`SimClock` for simulations and tests: the same loop time, but run on a
  :class:`VirtualTimeLoop`, whose clock jumps to the next timer whenever every task
  waits on one; its wall time starts at a fixed origin (2026-01-01T00:00:00Z).

Bounded waits use :func:`deadline` / :func:`deadline_at` (a context manager) or
:func:`bounded` (one awaitable): a wait that runs out raises
:class:`~brisvox.core.errors.DeadlineExceeded` naming the wait and its bound.

This module is the only place that may call ``time.time``, ``time.monotonic``,
``asyncio.sleep``, ``asyncio.timeout``, ``asyncio.timeout_at`` or ``asyncio.wait_for``
(a test scans the package for violations).
"""

from __future__ import annotations

import asyncio
import selectors
import time
from collections.abc import Awaitable, Callable, Coroutine
from concurrent.futures import Executor
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any, Protocol, TypeVar, runtime_checkable

from brisvox.core.errors import DeadlineExceeded

__all__ = [
    "SIM_WALL_ORIGIN",
    "Clock",
    "Deadline",
    "SimClock",
    "SystemClock",
    "Timer",
    "VirtualTimeDeadlock",
    "VirtualTimeLoop",
    "bounded",
    "call_at",
    "deadline",
    "deadline_at",
    "hold_time_for",
    "monotonic_ns",
    "run_virtual",
]

T = TypeVar("T")

SIM_WALL_ORIGIN = datetime(2026, 1, 1, tzinfo=UTC)


@runtime_checkable
class Clock(Protocol):
    """The injected source of time."""

    def now(self) -> float:
        """Monotonic seconds on the running loop's clock."""
        ...

    def wall(self) -> datetime:
        """Wall-clock time, for logs and records only; never for deadlines."""
        ...

    async def sleep_until(self, deadline: float) -> None:
        """Sleep until ``now() >= deadline``; returns at once for a past deadline."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Sleep for ``seconds`` (negative values count as zero)."""
        ...


class _LoopClock:
    __slots__ = ()

    def now(self) -> float:
        return asyncio.get_running_loop().time()

    async def sleep_until(self, deadline: float) -> None:
        await self.sleep(deadline - self.now())

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(max(0.0, seconds))


class SystemClock(_LoopClock):
    """Production time: the loop's monotonic clock and the real wall clock."""

    __slots__ = ()

    def wall(self) -> datetime:
        return datetime.now(UTC)

    def __repr__(self) -> str:
        return "SystemClock()"


class SimClock(_LoopClock):
    """Simulation time: loop time (virtual under :class:`VirtualTimeLoop`), wall from a fixed origin.

    The wall origin maps to the loop time at which the clock was first read, so two
    runs of the same simulation log identical wall times.
    """

    __slots__ = ("_origin", "_start")

    def __init__(self, origin: datetime = SIM_WALL_ORIGIN) -> None:
        self._origin = origin
        self._start: float | None = None

    def now(self) -> float:
        t = super().now()
        if self._start is None:
            self._start = t
        return t

    def wall(self) -> datetime:
        t = self.now()
        assert self._start is not None
        return self._origin + timedelta(seconds=t - self._start)

    def __repr__(self) -> str:
        return f"SimClock(origin={self._origin.isoformat()})"


class Deadline:
    """The body of ``async with`` is cancelled when ``clock`` reaches ``at``; it then raises
    :class:`DeadlineExceeded` (``what``, ``seconds``).  Made by :func:`deadline` / :func:`deadline_at`.

    On the loop clocks (:class:`SystemClock`, :class:`SimClock`) clock instants are loop
    time, so the deadline is one loop timer (``asyncio.timeout_at``: no task, which matters
    on paths that run several times per audio frame) and lands on the same timeline under
    virtual time.  Any other clock gets a watchdog task that sleeps on it and cancels the
    body.  A ``TimeoutError`` the body raises itself passes through unchanged; an inner
    deadline that runs out is reported by its own name.
    """

    __slots__ = ("_at", "_clock", "_dog", "_fired", "_owner", "_timer", "seconds", "what")

    def __init__(self, clock: Clock, at: float, seconds: float, what: str) -> None:
        self._clock = clock
        self._at = at
        self.seconds = seconds
        self.what = what
        self._timer: asyncio.Timeout | None = None
        self._dog: asyncio.Task[None] | None = None
        self._owner: asyncio.Task[Any] | None = None
        self._fired = False

    async def __aenter__(self) -> Deadline:
        if isinstance(self._clock, _LoopClock):
            self._timer = asyncio.timeout_at(self._at)
            await self._timer.__aenter__()
        else:
            self._owner = asyncio.current_task()
            assert self._owner is not None, "a deadline needs a running task"
            self._dog = asyncio.get_running_loop().create_task(self._watch(), name=f"deadline/{self.what}")
        return self

    async def _watch(self) -> None:
        await self._clock.sleep_until(self._at)
        self._fired = True
        assert self._owner is not None
        self._owner.cancel()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        timer = self._timer
        if timer is not None:
            try:
                await timer.__aexit__(exc_type, exc, tb)
            except TimeoutError:
                if timer.expired():
                    raise DeadlineExceeded(self.what, self.seconds) from None
                raise
            return
        dog = self._dog
        assert dog is not None and self._owner is not None
        dog.cancel()
        # Waits for the watchdog to end without taking its cancellation for ours.
        await asyncio.wait((dog,))
        if self._fired and exc_type is not None and issubclass(exc_type, asyncio.CancelledError):
            self._owner.uncancel()
            raise DeadlineExceeded(self.what, self.seconds) from None


def deadline(clock: Clock, seconds: float, what: str) -> Deadline:
    """``async with deadline(clock, 5.0, "connect"):`` bounds the body by ``seconds`` of ``clock`` time."""
    seconds = max(0.0, seconds)
    return Deadline(clock, clock.now() + seconds, seconds, what)


def deadline_at(clock: Clock, at: float, what: str) -> Deadline:
    """Like :func:`deadline`, up to the instant ``at`` of ``clock``."""
    return Deadline(clock, at, max(0.0, at - clock.now()), what)


async def bounded(clock: Clock, seconds: float, aw: Awaitable[T], what: str) -> T:
    """Await ``aw`` in this task; raise DeadlineExceeded(what, seconds) when ``clock`` passes the bound first.

    On the deadline (or when this task is cancelled) ``aw`` is cancelled and has ended
    before this returns (pass ``asyncio.shield(task)`` to leave a task running).  A
    ``TimeoutError`` that ``aw`` raises itself passes through.
    """
    async with deadline(clock, seconds, what):
        return await aw


class Timer(Protocol):
    """A callback scheduled by :func:`call_at`; ``cancel()`` before it runs stops it."""

    def cancel(self) -> object: ...


def call_at(clock: Clock, at: float, callback: Callable[[], object]) -> Timer:
    """Run ``callback`` (synchronous) when ``clock`` reaches ``at``: for protocol objects whose
    callbacks cannot await.  On the loop clocks it is one loop timer; any other clock gets a
    task that sleeps on it (cancelled by ``cancel()``)."""
    loop = asyncio.get_running_loop()
    if isinstance(clock, _LoopClock):
        return loop.call_at(at, callback)

    async def fire() -> None:
        await clock.sleep_until(at)
        callback()

    return loop.create_task(fire(), name="clock-timer")


class VirtualTimeDeadlock(RuntimeError):
    """Every task waits and nothing (timer, thread, socket) can wake the loop."""


class _FastForwardSelector(selectors.BaseSelector):
    """Wraps the loop's selector: a wait that only a timer can end advances virtual time instead.

    I/O that is already ready is always delivered first (``select(0)``).  While work
    runs in another thread (``pending_external > 0``) the wait is real, so thread work
    costs no virtual time and a timer can never fire "during" it.
    """

    def __init__(self, inner: selectors.BaseSelector, loop: VirtualTimeLoop) -> None:
        self._inner = inner
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        ready = self._inner.select(0)
        if ready or timeout == 0:
            return ready
        if self._loop.pending_external > 0:
            # A thread is computing: wait for it in real time, and let no timer fire meanwhile.
            return self._inner.select(None)
        if timeout is None:
            # No timer is armed: only real I/O or another thread can wake the loop.
            ready = self._inner.select(self._loop.deadlock_after)
            if not ready:
                raise VirtualTimeDeadlock(
                    f"virtual-time loop: every task has waited {self._loop.deadlock_after:g} s of real time "
                    "on something no timer, thread or socket will end"
                )
            return ready
        self._loop.advance(timeout)
        return []

    def register(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.register(fileobj, events, data)

    def unregister(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.unregister(fileobj)

    def modify(self, fileobj: Any, events: int, data: Any = None) -> selectors.SelectorKey:
        return self._inner.modify(fileobj, events, data)

    def close(self) -> None:
        self._inner.close()

    def get_key(self, fileobj: Any) -> selectors.SelectorKey:
        return self._inner.get_key(fileobj)

    def get_map(self) -> Any:
        return self._inner.get_map()


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """An event loop whose clock fast-forwards to the next timer when every task waits.

    A 120 s timeout costs microseconds and every run of a simulation sees the same
    times.  Work handed to ``run_in_executor`` takes zero virtual time: the loop waits
    for it in real time before advancing.  Sockets that another process writes to are
    not suitable here (time would run ahead of them); such tests use the system clock.
    """

    def __init__(self, start: float = 0.0, deadlock_after: float = 10.0, max_time: float | None = None) -> None:
        super().__init__()
        self._virtual_now = start
        self.deadlock_after = deadlock_after
        # A task that re-arms a timer forever would spin virtual time without ever
        # blocking; past ``max_time`` the loop raises instead of running on.
        self.max_time = max_time
        self.pending_external = 0
        self._selector = _FastForwardSelector(self._selector, self)  # type: ignore[has-type]

    def time(self) -> float:
        return self._virtual_now

    def advance(self, seconds: float) -> None:
        if seconds > 0:
            self._virtual_now += seconds
            if self.max_time is not None and self._virtual_now > self.max_time:
                raise VirtualTimeDeadlock(
                    f"virtual time passed {self.max_time:g} s: some task keeps re-arming a timer "
                    "and the awaited work never finishes"
                )

    def run_in_executor(  # type: ignore[override]
        self, executor: Executor | None, func: Callable[..., T], *args: Any
    ) -> asyncio.Future[T]:
        fut = super().run_in_executor(executor, func, *args)
        self.hold_for(fut)
        return fut

    def hold_for(self, fut: asyncio.Future[Any]) -> None:
        """Keep virtual time still until ``fut`` (completed by another thread) is done."""
        self.pending_external += 1

        def _release(_: asyncio.Future[Any]) -> None:
            self.pending_external -= 1

        fut.add_done_callback(_release)


def hold_time_for(fut: asyncio.Future[Any]) -> None:
    """Tell a virtual-time loop that ``fut`` is completed by another thread; a no-op otherwise."""
    loop = fut.get_loop()
    if isinstance(loop, VirtualTimeLoop):
        loop.hold_for(fut)


def run_virtual(main: Callable[[], Coroutine[Any, Any, T]] | Awaitable[T], *, start: float = 0.0) -> T:
    """Run a coroutine to completion on a fresh :class:`VirtualTimeLoop`."""
    loop = VirtualTimeLoop(start)
    try:
        coro = main() if callable(main) else main
        return loop.run_until_complete(coro)
    finally:
        try:
            _cancel_leftovers(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            loop.close()


def _cancel_leftovers(loop: asyncio.AbstractEventLoop) -> None:
    tasks = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for t in tasks:
        t.cancel()
    if tasks:
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))


def monotonic_ns() -> int:
    """Real monotonic nanoseconds, for benchmarks and profiling only (never logic)."""
    return time.perf_counter_ns()
