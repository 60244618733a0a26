"""Silero VAD for many calls at once: the windows of every call scored in one ONNX run.

One Silero run costs about 170 us whatever its batch holds up to a few windows, and about
66 us per window in a batch of 16 or more (bench/inference.py, docs/PERFORMANCE.md); each
run handed to the inference pool also costs the event loop a thread wake-up and a
completion callback.  :class:`SileroBatcher` scores the windows of every call that asks
while a batch is running in the next batch (continuous batching): an idle server scores
each frame at once, exactly as before, and a busy one runs one job per pool round for all
its calls instead of one per call and frame.  A request holding several windows of one
stream is scored in several rounds of the same job (a stream's windows run in order: each
carries the state of the one before).  With ``linger`` the first request of an idle batcher
waits that long for others (fewer, larger jobs for a small delay of every VAD decision);
the default, 0, never waits.  With ``period`` a job starts no sooner than that long after the
one before: when calls are many, a job of a window or two ends long before the next call's
window arrives, so continuous batching alone runs about one job per window (60 calls: 1.2
windows per run); with a 10 ms period the windows of those 10 ms share one run (60 calls: about
23) and the VAD path's CPU halves (docs/PERFORMANCE.md).  A batcher that has not started a job
for a period starts at once, so one call's decisions (a window every 20 or 40 ms) never wait.

The batcher runs one job at a time on the pool's VAD lane, so one stream's state is never
touched by two jobs at once; each request's detector lock is held while its scorer is read
and updated (``VoiceActivityDetector.reset`` takes the same lock on the loop).  A pool that
refuses the job (full or closed) fails every request of it with that refusal, which the
detector handles as before (windows dropped, counted, the call told once); a model error
fails them with :class:`~brisvox.inference.errors.InferenceFailed`.

The waiting list is bounded by the calls: a detector awaits each request before its next
frame, so it holds at most one request per call, and the pool's VAD lane holds at most the
batcher's one job.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from brisvox.core.clock import Clock, call_at
from brisvox.core.errors import ConfigError
from brisvox.inference.errors import PoolClosed, PoolFull
from brisvox.inference.pool import InferencePool, Lane
from brisvox.inference.silero import SileroModel, SileroScorer

__all__ = ["BatcherStats", "SileroBatcher"]

Int16Array = npt.NDArray[np.int16]


@dataclass(slots=True)
class _Request:
    scorer: SileroScorer
    windows: Sequence[Int16Array]
    lock: threading.Lock
    future: asyncio.Future[list[float]]


@dataclass(slots=True)
class BatcherStats:
    jobs: int = 0  # pool jobs run
    requests: int = 0  # requests scored (one per caller frame with a window)
    runs: int = 0  # ONNX runs
    windows: int = 0  # windows scored


class SileroBatcher:
    """Scores the windows of many Silero streams together (see the module docs)."""

    def __init__(self, model: SileroModel, pool: InferencePool, *, clock: Clock | None = None,
                 linger: float = 0.0, period: float = 0.0) -> None:
        for name, value in (("linger", linger), ("period", period)):
            if value < 0:
                raise ConfigError(f"SileroBatcher {name} must not be negative, got {value}")
            if value > 0 and clock is None:
                raise ConfigError(f"SileroBatcher: a {name} needs the clock to wait on")
        self._model = model
        self._pool = pool
        self._clock = clock
        self._linger = linger
        self._period = period
        self._last_start = float("-inf")  # clock time the last job was handed to the pool
        self._pending: list[_Request] = []
        self._running = False  # a job is on the pool, or the linger or period timer is set
        self.stats = BatcherStats()

    @property
    def period(self) -> float:
        """Seconds a job waits at least after the start of the one before (0: none)."""
        return self._period

    async def score(self, scorer: SileroScorer, windows: Sequence[Int16Array], lock: threading.Lock) -> list[float]:
        """The speech probability of each window of ``scorer``'s stream, in order; raises
        PoolFull, PoolClosed or InferenceFailed as a pool job does."""
        fut: asyncio.Future[list[float]] = asyncio.get_running_loop().create_future()
        self._pending.append(_Request(scorer, windows, lock, fut))
        if not self._running:
            self._schedule(self._linger)
        return await fut

    def _schedule(self, wait: float) -> None:
        """Start the next job after ``wait`` seconds, and no sooner than ``period`` after the last
        job started; at once when both are past (an idle or lightly loaded batcher never waits)."""
        if self._clock is not None and (wait > 0 or self._period > 0):
            now = self._clock.now()
            at = max(now + wait, self._last_start + self._period)
            if at > now:
                self._running = True
                call_at(self._clock, at, self._timer_over)
                return
        self._launch()

    def _timer_over(self) -> None:
        self._running = False
        self._launch()

    def _launch(self) -> None:
        batch = [r for r in self._pending if not r.future.done()]  # a cancelled caller's request is skipped
        self._pending = []
        if not batch:
            return
        try:
            job = self._pool.submit(self._run, batch, lane=Lane.VAD, name="silero-batch")
        except (PoolFull, PoolClosed) as exc:
            for r in batch:
                if not r.future.done():
                    r.future.set_exception(exc)
            return
        self._running = True
        if self._clock is not None:
            self._last_start = self._clock.now()
        job.add_done_callback(lambda done: self._finished(batch, done))

    def _finished(self, batch: list[_Request], job: asyncio.Future[list[list[float]]]) -> None:
        self._running = False
        error = job.exception() if not job.cancelled() else PoolClosed(self._pool.name)
        results = job.result() if error is None else None
        for i, r in enumerate(batch):
            if r.future.done():
                continue
            if results is not None:
                r.future.set_result(results[i])
            else:
                assert error is not None
                r.future.set_exception(error)
        if self._pending:
            self._schedule(0.0)

    def _run(self, batch: list[_Request]) -> list[list[float]]:
        """On a pool thread: round k scores the k-th window of every request that has one."""
        out: list[list[float]] = [[] for _ in batch]
        rounds = max(len(r.windows) for r in batch)
        self.stats.jobs += 1
        self.stats.requests += len(batch)
        for k in range(rounds):
            by_rate: dict[int, list[int]] = {}
            for i, r in enumerate(batch):
                if k < len(r.windows):
                    by_rate.setdefault(r.scorer.sample_rate, []).append(i)
            for rate, members in by_rate.items():
                self._round(batch, members, k, rate, out)
        return out

    def _round(self, batch: list[_Request], members: list[int], k: int, rate: int, out: list[list[float]]) -> None:
        locks = list(dict.fromkeys(batch[i].lock for i in members))  # a stream has one request at a time
        for lock in locks:
            lock.acquire()
        try:
            x = np.stack([batch[i].scorer.load(batch[i].windows[k]) for i in members])
            state = np.concatenate([batch[i].scorer.state for i in members], axis=1)
            probs, new_state = self._model.run_batch(x, state, rate)
            for j, i in enumerate(members):
                prob = float(probs[j])
                batch[i].scorer.accept(prob, new_state[:, j : j + 1, :].copy())
                out[i].append(prob)
        finally:
            for lock in locks:
                lock.release()
        self.stats.runs += 1
        self.stats.windows += len(members)
