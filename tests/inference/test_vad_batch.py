"""SileroBatcher: many calls' windows in one ONNX run, the same probabilities as one stream at a time."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import numpy as np
import pytest

from brisvox.core.clock import SimClock
from brisvox.core.errors import ConfigError
from brisvox.core.frames import VadStartedFrame, VadStoppedFrame
from brisvox.inference.errors import PoolClosed, PoolFull
from brisvox.inference.pool import InferencePool, Lane, PoolConfig
from brisvox.inference.silero import SileroModel
from brisvox.inference.vad import VadParams, silero_vad
from brisvox.inference.vad_batch import SileroBatcher
from tests._speech import espeak_wav

WIN = 512


def _windows(seed: int, n: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal(WIN) * 3000 * (1 + i % 3)).astype(np.int16) for i in range(n)]


async def test_batched_streams_get_the_probabilities_each_would_get_alone(model: SileroModel) -> None:
    streams = [_windows(seed, 6) for seed in range(5)]
    alone = []
    for windows in streams:
        scorer = model.scorer()
        alone.append([scorer.score(w) for w in windows])
    scorers = [model.scorer() for _ in streams]
    locks = [threading.Lock() for _ in streams]
    async with InferencePool(PoolConfig(name="test-vad", threads=1)) as pool:
        batcher = SileroBatcher(model, pool)
        # requests of 1, 2 or 3 windows per stream, all streams asking at once, twice over
        got: list[list[float]] = [[] for _ in streams]
        for lo, hi in ((0, 3), (3, 6)):
            sizes = [1 + (i + lo) % 3 for i in range(len(streams))]
            parts = await asyncio.gather(*(
                batcher.score(s, streams[i][lo : lo + min(sizes[i], hi - lo)], locks[i]) for i, s in enumerate(scorers)))
            for i, part in enumerate(parts):
                got[i] += part
            for i, s in enumerate(scorers):  # the rest of this half, one window at a time
                for w in streams[i][lo + len(parts[i]) : hi]:
                    got[i] += await batcher.score(s, [w], locks[i])
    np.testing.assert_allclose(np.array(got), np.array(alone), atol=1e-5)
    assert batcher.stats.windows == 30 and batcher.stats.runs < 30


async def test_requests_that_arrive_while_a_job_runs_share_the_next_job(model: SileroModel) -> None:
    async with InferencePool(PoolConfig(name="test-vad", threads=1)) as pool:
        gate = threading.Event()
        blocker = pool.submit(gate.wait, lane=Lane.VAD)  # the pool's only thread is busy
        batcher = SileroBatcher(model, pool)
        first = asyncio.ensure_future(batcher.score(model.scorer(), _windows(0, 1), threading.Lock()))
        await asyncio.sleep(0)
        rest = [asyncio.ensure_future(batcher.score(model.scorer(), _windows(i, 1), threading.Lock()))
                for i in range(1, 9)]
        await asyncio.sleep(0)
        gate.set()
        await blocker
        await asyncio.gather(first, *rest)
    assert batcher.stats.jobs == 2 and batcher.stats.requests == 9 and batcher.stats.runs == 2


async def test_a_full_pool_fails_the_requests_and_the_detector_drops_those_windows(model: SileroModel) -> None:
    async with InferencePool(PoolConfig(name="test-vad", threads=1, jobs_per_thread=1)) as pool:
        gate, started = threading.Event(), threading.Event()
        blocker = pool.submit(lambda: (started.set(), gate.wait()), lane=Lane.VAD)
        assert started.wait(10)  # the pool's only thread is busy ...
        queued = pool.submit(lambda: None, lane=Lane.VAD)  # ... and the lane holds one job: now it is full
        batcher = SileroBatcher(model, pool)
        with pytest.raises(PoolFull):
            await batcher.score(model.scorer(), _windows(0, 1), threading.Lock())
        det = silero_vad(model, pool, batcher=batcher)
        noise = _windows(7, 2)  # loud enough for the quiet gate to let them through to the model
        assert await det.process(noise[0].tobytes(), 0.0) == []
        assert det.saturated and det.dropped_windows == 1
        gate.set()
        await asyncio.gather(blocker, queued)
        assert await det.process(noise[1].tobytes(), 0.032) == [] and not det.saturated
    with pytest.raises(PoolClosed):
        await batcher.score(model.scorer(), _windows(0, 1), threading.Lock())


async def test_a_cancelled_callers_request_is_not_scored(model: SileroModel) -> None:
    async with InferencePool(PoolConfig(name="test-vad", threads=1)) as pool:
        gate = threading.Event()
        blocker = pool.submit(gate.wait, lane=Lane.VAD)
        batcher = SileroBatcher(model, pool)
        running = asyncio.ensure_future(batcher.score(model.scorer(), _windows(0, 1), threading.Lock()))
        await asyncio.sleep(0)
        gone = asyncio.ensure_future(batcher.score(model.scorer(), _windows(1, 1), threading.Lock()))
        kept = asyncio.ensure_future(batcher.score(model.scorer(), _windows(2, 1), threading.Lock()))
        await asyncio.sleep(0)
        gone.cancel()
        gate.set()
        await asyncio.gather(blocker, running, kept)
    assert batcher.stats.requests == 2 and batcher.stats.windows == 2


async def test_batched_detectors_find_the_same_speech_as_pooled_ones(model: SileroModel, tmp_path: Path) -> None:
    speech = espeak_wav("what tables do you have tonight", tmp_path).pcm
    async with InferencePool(PoolConfig(name="test-vad", threads=1)) as pool:
        batcher = SileroBatcher(model, pool)
        params = VadParams(min_silence=0.2)
        pooled = [silero_vad(model, pool, params=params) for _ in range(3)]
        batched = [silero_vad(model, pool, params=params, batcher=batcher) for _ in range(3)]
        events: dict[int, list[object]] = {i: [] for i in range(6)}
        for k in range(0, len(speech), 640):
            frame = speech[k : k + 640]
            outs = await asyncio.gather(*(d.process(frame, k / 32000) for d in (*pooled, *batched)))
            for i, out in enumerate(outs):
                events[i] += out
    kinds = [[(type(e).__name__, round(e.at, 3)) for e in events[i]] for i in range(6)]
    assert all(k == kinds[0] for k in kinds) and any(isinstance(e, VadStoppedFrame) for e in events[5])
    assert isinstance(events[5][0], VadStartedFrame)


async def test_with_a_linger_the_requests_of_the_next_moments_share_one_job(model: SileroModel) -> None:
    clock = SimClock()
    async with InferencePool(PoolConfig(name="test-vad", threads=1)) as pool:
        batcher = SileroBatcher(model, pool, clock=clock, linger=0.005)

        async def ask(i: int, after: float) -> list[float]:
            await clock.sleep(after)
            return await batcher.score(model.scorer(), _windows(i, 1), threading.Lock())

        # three calls within the 5 ms, one after it
        await asyncio.gather(ask(0, 0.0), ask(1, 0.002), ask(2, 0.004), ask(3, 0.02))
    assert batcher.stats.jobs == 2 and batcher.stats.requests == 4


@pytest.mark.parametrize("option", ["linger", "period"])
def test_a_linger_or_period_needs_a_clock_and_may_not_be_negative(model: SileroModel, option: str) -> None:
    pool = InferencePool(PoolConfig(name="test-vad", threads=1))
    try:
        with pytest.raises(ConfigError, match=f"a {option} needs the clock"):
            SileroBatcher(model, pool, **{option: 0.01})
        with pytest.raises(ConfigError, match=f"{option} must not be negative"):
            SileroBatcher(model, pool, clock=SimClock(), **{option: -1.0})
    finally:
        pool.close()
        pool.join()


async def test_with_a_period_jobs_start_at_most_that_often_and_an_idle_batcher_starts_at_once(
    model: SileroModel,
) -> None:
    clock = SimClock()
    streams = [_windows(i, 1) for i in range(4)]
    alone = [model.scorer().score(w[0]) for w in streams]
    async with InferencePool(PoolConfig(name="test-vad", threads=1)) as pool:
        batcher = SileroBatcher(model, pool, clock=clock, period=0.01)

        async def ask(i: int, after: float) -> tuple[float, list[float]]:
            await clock.sleep(after)
            probs = await batcher.score(model.scorer(), streams[i], threading.Lock())
            return clock.now(), probs

        # the first at once; two within the period of its start wait for the next start, together;
        # one long after finds the batcher idle and starts at once
        answers = await asyncio.gather(ask(0, 0.0), ask(1, 0.002), ask(2, 0.004), ask(3, 0.05))
    assert [round(at, 6) for at, _ in answers] == [0.0, 0.01, 0.01, 0.05]
    assert batcher.stats.jobs == 3 and batcher.stats.runs == 3
    np.testing.assert_allclose([p[0] for _, p in answers], alone, atol=1e-5)


async def test_detectors_batched_with_a_period_find_the_same_speech_as_pooled_ones(
    model: SileroModel, tmp_path: Path,
) -> None:
    clock = SimClock()
    clean = np.frombuffer(espeak_wav("what tables do you have tonight", tmp_path).pcm, dtype=np.int16)
    noise = np.random.default_rng(1).standard_normal(clean.size) * 32768 * 10 ** (-60 / 20)  # a line never silent
    speech = np.clip(clean + np.round(noise), -32768, 32767).astype(np.int16).tobytes()
    async with InferencePool(PoolConfig(name="test-vad", threads=1)) as pool:
        batcher = SileroBatcher(model, pool, clock=clock, period=0.01)
        params = VadParams(threshold=0.7, min_silence=0.192, skip_silence=False)
        detectors = [silero_vad(model, pool, params=params), *(silero_vad(model, pool, params=params, batcher=batcher)
                                                             for _ in range(3))]
        events: list[list[tuple[str, float]]] = [[] for _ in detectors]

        async def call(i: int) -> None:
            await clock.sleep(0.005 * i)  # the calls' frames staggered, as callers' are
            for k in range(0, len(speech), 640):
                for e in await detectors[i].process(speech[k : k + 640], k / 32000):
                    events[i].append((type(e).__name__, round(e.at, 3)))
                await clock.sleep(0.02)

        await asyncio.gather(*(call(i) for i in range(len(detectors))))
    assert events[1] == events[2] == events[3] == events[0]
    assert [kind for kind, _ in events[0]][:2] == ["VadStartedFrame", "VadStoppedFrame"]
    assert batcher.stats.runs < batcher.stats.windows  # the period made the calls share runs
