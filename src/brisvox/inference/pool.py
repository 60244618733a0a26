"""A dedicated pool of OS threads for model inference, with a bounded two-lane queue.

Models never run on the event loop.  A coroutine hands a job to the pool with
:meth:`InferencePool.submit` (which refuses at once, with a typed error, when the job's
lane is full or the pool is closed) and awaits the returned asyncio future; a pool
thread runs the job and completes the future on the loop it came from.

Two lanes: :attr:`Lane.VAD` (one short window per call every 32 ms) is always served
before :attr:`Lane.NORMAL`, so a long job queued by one call never delays another
call's voice activity by more than the job already running.  That bound is the longest
job's length, so long jobs do not belong here: end-of-turn analyses (about 100 ms each)
get a separate pool of their own, :func:`start_turn_executor`, and so should anything
that holds a thread for more than a few milliseconds (a Whisper transcription takes most
of a second: with one pool thread it would stall every call's VAD for that long).

On a :class:`~brisvox.core.clock.VirtualTimeLoop` every future the pool completes is
registered with :func:`~brisvox.core.clock.hold_time_for`, so virtual time stands still
while a model computes (thread work costs zero virtual time, as with ``run_in_executor``).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import logging
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, TypeVar

from brisvox.core.clock import hold_time_for
from brisvox.core.errors import ConfigError
from brisvox.inference.errors import InferenceFailed, PoolClosed, PoolFull

__all__ = [
    "InferencePool",
    "Lane",
    "PoolConfig",
    "PoolStats",
    "default_threads",
    "live_pools",
    "start_turn_executor",
]

T = TypeVar("T")
log = logging.getLogger(__name__)

TURN_THREADS_ENV = "BRISVOX_SMART_TURN_THREADS"


class Lane(enum.Enum):
    """Queue lanes, served in this order."""

    VAD = "vad"
    NORMAL = "normal"


def default_threads() -> int:
    """Half the logical cores, at least one."""
    return max(1, (os.cpu_count() or 1) // 2)


@dataclass(frozen=True, slots=True)
class PoolConfig:
    """How many threads a pool runs and how many jobs each lane may hold (per thread)."""

    name: str = "brisvox-infer"
    threads: int | None = None  # None: default_threads()
    jobs_per_thread: int = 32

    def resolved_threads(self) -> int:
        n = default_threads() if self.threads is None else self.threads
        if n < 1:
            raise ConfigError(f"{self.name}: threads must be at least 1, got {n}")
        return n

    def lane_capacity(self) -> int:
        if self.jobs_per_thread < 1:
            raise ConfigError(f"{self.name}: jobs_per_thread must be at least 1, got {self.jobs_per_thread}")
        return self.jobs_per_thread * self.resolved_threads()


@dataclass(frozen=True, slots=True)
class PoolStats:
    """Counters of one pool (a snapshot)."""

    threads: int
    queued_vad: int
    queued_normal: int
    running: int
    completed: int
    failed: int
    refused_full: int
    refused_closed: int
    skipped_cancelled: int


class _Job(Generic[T]):
    __slots__ = ("args", "fn", "future", "loop", "name")

    def __init__(
        self,
        fn: Callable[..., T],
        args: tuple[Any, ...],
        future: asyncio.Future[T],
        loop: asyncio.AbstractEventLoop,
        name: str,
    ) -> None:
        self.fn = fn
        self.args = args
        self.future = future
        self.loop = loop
        self.name = name


def _resolve(fut: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if fut.done():
        return
    if ok:
        fut.set_result(value)
    else:
        fut.set_exception(value)


_LIVE: weakref.WeakSet[InferencePool] = weakref.WeakSet()


def live_pools() -> list[InferencePool]:
    """Every pool of this process that is not closed, by name: the embedded models' capacity
    (what the server's default call limit and its readiness read)."""
    return sorted((p for p in list(_LIVE) if not p.closed), key=lambda p: p.name)


class InferencePool:
    """N daemon threads serving a bounded two-lane queue; see the module docs.

    Use it as a context manager (sync or async), or call :meth:`close` /
    :meth:`aclose`.  Closing refuses new jobs, fails queued ones with
    :class:`PoolClosed`, lets running jobs finish, and (``aclose``) waits for the threads.
    """

    def __init__(self, config: PoolConfig | None = None) -> None:
        self._config = config or PoolConfig()
        self._threads_n = self._config.resolved_threads()
        self._capacity = self._config.lane_capacity()
        self._cond = threading.Condition()
        self._lanes: dict[Lane, deque[_Job[Any]]] = {lane: deque() for lane in Lane}
        self._closed = False
        self._running = 0
        self._completed = 0
        self._failed = 0
        self._refused_full = 0
        self._refused_closed = 0
        self._skipped = 0
        self._alive = self._threads_n
        self._exit_waiters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future[None]]] = []
        self._threads = [
            threading.Thread(target=self._worker, name=f"{self._config.name}-{i}", daemon=True)
            for i in range(self._threads_n)
        ]
        for t in self._threads:
            t.start()
        _LIVE.add(self)

    # --- submitting ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        return self._config.name

    @property
    def threads(self) -> int:
        return self._threads_n

    @property
    def lane_capacity(self) -> int:
        return self._capacity

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def saturated(self) -> bool:
        """A lane is full: the next job on it would be refused with :class:`PoolFull`."""
        with self._cond:
            return any(len(queue) >= self._capacity for queue in self._lanes.values())

    def submit(
        self, fn: Callable[..., T], *args: Any, lane: Lane = Lane.NORMAL, name: str | None = None
    ) -> asyncio.Future[T]:
        """Queue ``fn(*args)``; returns a future of the running loop, or raises a refusal at once.

        Cancelling the future before a thread picks the job up skips the job; a job that
        is already running finishes and its result is discarded.
        """
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        job = _Job(fn, args, fut, loop, name or str(getattr(fn, "__qualname__", "job")))
        with self._cond:
            if self._closed:
                self._refused_closed += 1
                raise PoolClosed(self.name)
            queue = self._lanes[lane]
            if len(queue) >= self._capacity:
                self._refused_full += 1
                raise PoolFull(self.name, lane.value, self._capacity)
            queue.append(job)
            self._cond.notify()
        hold_time_for(fut)
        return fut

    async def run(self, fn: Callable[..., T], *args: Any, lane: Lane = Lane.NORMAL) -> T:
        """Submit and await; raises :class:`PoolFull`, :class:`PoolClosed` or :class:`InferenceFailed`."""
        return await self.submit(fn, *args, lane=lane)

    # --- the threads ---------------------------------------------------------------------

    def _next_job(self) -> _Job[Any] | None:
        with self._cond:
            while True:
                for lane in Lane:
                    queue = self._lanes[lane]
                    if queue:
                        self._running += 1
                        return queue.popleft()
                if self._closed:
                    return None
                self._cond.wait()

    def _worker(self) -> None:
        try:
            while (job := self._next_job()) is not None:
                try:
                    self._run_job(job)
                finally:
                    with self._cond:
                        self._running -= 1
        finally:
            self._on_worker_exit()

    def _run_job(self, job: _Job[Any]) -> None:
        # Reading the future's state from this thread is safe (one attribute read); the
        # caller cancels on the loop before anything it does later can reach this thread.
        if job.future.cancelled():
            with self._cond:
                self._skipped += 1
            return
        try:
            value = job.fn(*job.args)
        except Exception as exc:  # delivered to the caller, typed
            with self._cond:
                self._failed += 1
            log.debug("inference job %s failed: %r", job.name, exc)
            err = InferenceFailed(job.name, exc)
            err.__cause__ = exc
            self._deliver(job, False, err)
            return
        with self._cond:
            self._completed += 1
        self._deliver(job, True, value)

    @staticmethod
    def _deliver(job: _Job[Any], ok: bool, value: Any) -> None:
        try:
            job.loop.call_soon_threadsafe(_resolve, job.future, ok, value)
        except RuntimeError:  # the loop is closed: nobody is waiting any more
            log.debug("inference job %s finished after its loop closed", job.name)

    def _on_worker_exit(self) -> None:
        with self._cond:
            self._alive -= 1
            if self._alive > 0:
                return
            waiters, self._exit_waiters = self._exit_waiters, []
        for loop, fut in waiters:
            with contextlib.suppress(RuntimeError):  # a closed loop waits for nothing
                loop.call_soon_threadsafe(_resolve, fut, True, None)

    # --- closing -------------------------------------------------------------------------

    def close(self) -> None:
        """Refuse new jobs and fail the queued ones with :class:`PoolClosed` (idempotent, no wait)."""
        with self._cond:
            if self._closed:
                return
            self._closed = True
            dropped = [job for lane in Lane for job in self._lanes[lane]]
            for lane in Lane:
                self._lanes[lane].clear()
            self._cond.notify_all()
        for job in dropped:
            self._deliver(job, False, PoolClosed(self.name))

    def join(self, timeout: float | None = None) -> None:
        """Block until the threads have exited (after :meth:`close`); for synchronous callers."""
        for t in self._threads:
            t.join(timeout)

    async def aclose(self) -> None:
        """Close and wait (without blocking the loop) until every thread has exited."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[None] = loop.create_future()
        with self._cond:
            if self._alive == 0:
                fut.set_result(None)
            else:
                self._exit_waiters.append((loop, fut))
        hold_time_for(fut)
        self.close()
        await fut

    def __enter__(self) -> InferencePool:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
        self.join()

    async def __aenter__(self) -> InferencePool:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # --- observing -----------------------------------------------------------------------

    def stats(self) -> PoolStats:
        with self._cond:
            return PoolStats(
                threads=self._threads_n,
                queued_vad=len(self._lanes[Lane.VAD]),
                queued_normal=len(self._lanes[Lane.NORMAL]),
                running=self._running,
                completed=self._completed,
                failed=self._failed,
                refused_full=self._refused_full,
                refused_closed=self._refused_closed,
                skipped_cancelled=self._skipped,
            )

    def __repr__(self) -> str:
        state = "closed" if self._closed else "open"
        return f"InferencePool({self.name!r}, threads={self._threads_n}, {state})"


def start_turn_executor(
    vad_pool: InferencePool,
    threads: int | None = None,
    env: Mapping[str, str] | None = None,
) -> InferencePool:
    """The end-of-turn executor: a separate pool (``brisvox-turn-<i>`` threads, 32 jobs per thread).

    ``threads`` defaults to ``BRISVOX_SMART_TURN_THREADS``, else as many as ``vad_pool``;
    0 shares ``vad_pool`` (analyses then queue on its normal lane behind nothing but VAD
    windows).  The caller owns the returned pool (close it unless it is ``vad_pool``).
    """
    if threads is None:
        raw = (os.environ if env is None else env).get(TURN_THREADS_ENV)
        if raw is not None and raw.strip():
            try:
                threads = int(raw)
            except ValueError:
                raise ConfigError(f"{TURN_THREADS_ENV} must be an integer, got {raw!r}") from None
    if threads is None:
        threads = vad_pool.threads
    if threads < 0:
        raise ConfigError(f"end-of-turn threads must be 0 (share the VAD pool) or more, got {threads}")
    if threads == 0:
        return vad_pool
    return InferencePool(PoolConfig(name="brisvox-turn", threads=threads, jobs_per_thread=32))
