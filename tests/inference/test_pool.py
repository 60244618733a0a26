from __future__ import annotations

import asyncio
import threading

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.tasks import TaskScope
from brisvox.inference.errors import InferenceFailed, PoolClosed, PoolFull
from brisvox.inference.pool import InferencePool, Lane, PoolConfig, default_threads, start_turn_executor


def one_thread(jobs_per_thread: int = 32) -> InferencePool:
    return InferencePool(PoolConfig(name="test", threads=1, jobs_per_thread=jobs_per_thread))


def blocker(started: threading.Event, release: threading.Event) -> str:
    started.set()
    release.wait(10)
    return "blocker"


async def wait_started(started: threading.Event) -> None:
    # Real-time wait for the pool thread, without blocking the loop for long.
    await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)


async def test_vad_windows_run_before_queued_work_of_the_other_lane() -> None:
    async with one_thread() as pool:
        started, release = threading.Event(), threading.Event()
        order: list[str] = []
        first = pool.submit(blocker, started, release)
        await wait_started(started)
        normal = [pool.submit(order.append, f"n{i}") for i in range(2)]
        vad = [pool.submit(order.append, f"v{i}", lane=Lane.VAD) for i in range(2)]
        release.set()
        await asyncio.gather(first, *normal, *vad)
        assert order == ["v0", "v1", "n0", "n1"]


async def test_a_full_lane_refuses_the_newest_job_and_the_other_lane_still_accepts() -> None:
    async with one_thread(jobs_per_thread=2) as pool:
        started, release = threading.Event(), threading.Event()
        first = pool.submit(blocker, started, release)
        await wait_started(started)
        queued = [pool.submit(int, "1"), pool.submit(int, "2")]
        with pytest.raises(PoolFull, match="normal lane is full") as err:
            pool.submit(int, "3")
        assert err.value.capacity == 2
        vad = pool.submit(int, "4", lane=Lane.VAD)
        release.set()
        assert await asyncio.gather(first, *queued, vad) == ["blocker", 1, 2, 4]
        assert pool.stats().refused_full == 1


async def test_a_closed_pool_refuses_jobs_and_fails_the_queued_ones() -> None:
    pool = one_thread()
    started, release = threading.Event(), threading.Event()
    running = pool.submit(blocker, started, release)
    await wait_started(started)
    queued = pool.submit(int, "1")
    pool.close()
    with pytest.raises(PoolClosed):
        await queued
    with pytest.raises(ChannelClosed):  # PoolClosed is a ChannelClosed
        pool.submit(int, "2")
    release.set()
    assert await running == "blocker"  # a running job finishes
    await pool.aclose()
    assert pool.stats().refused_closed == 1


async def test_an_exception_in_a_job_reaches_the_caller_as_inference_failed() -> None:
    async with one_thread() as pool:
        with pytest.raises(InferenceFailed, match="ValueError") as err:
            await pool.run(int, "not a number")
        assert isinstance(err.value.__cause__, ValueError)
        assert pool.stats().failed == 1


async def test_a_job_cancelled_before_it_starts_is_skipped() -> None:
    async with one_thread() as pool:
        started, release = threading.Event(), threading.Event()
        ran: list[int] = []
        first = pool.submit(blocker, started, release)
        await wait_started(started)
        doomed = pool.submit(ran.append, 1)
        doomed.cancel()
        release.set()
        await first
        await pool.run(ran.append, 2)
        assert ran == [2]
        assert pool.stats().skipped_cancelled == 1


async def test_virtual_time_stands_still_while_a_model_computes() -> None:
    clock = SimClock()
    async with one_thread() as pool, TaskScope("t") as scope:
        fired: list[float] = []

        async def timer() -> None:
            await clock.sleep(0.5)
            fired.append(clock.now())

        scope.spawn(timer(), name="timer")
        t0 = clock.now()
        # 200 ms of real work: without the hold, the loop would jump to the timer meanwhile.
        await pool.run(threading.Event().wait, 0.2)
        assert clock.now() == t0
        assert fired == []
    assert fired == [t0 + 0.5]


async def test_threads_are_named_after_the_pool() -> None:
    async with InferencePool(PoolConfig(name="named", threads=2)) as pool:
        names = {await pool.run(lambda: threading.current_thread().name) for _ in range(8)}
        assert names <= {"named-0", "named-1"}
        assert pool.threads == 2


def test_the_default_is_half_the_logical_cores_and_at_least_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert default_threads() == 4
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert default_threads() == 1
    with pytest.raises(ConfigError, match="at least 1"):
        InferencePool(PoolConfig(threads=0))


def test_the_turn_executor_is_a_separate_pool_sized_like_the_vad_pool_by_default() -> None:
    with InferencePool(PoolConfig(threads=2)) as vad:
        with start_turn_executor(vad, env={}) as turn:
            assert turn is not vad
            assert turn.threads == 2
            assert turn.lane_capacity == 64  # 32 jobs per thread
            assert turn.name == "brisvox-turn"
        with start_turn_executor(vad, env={"BRISVOX_SMART_TURN_THREADS": "1"}) as turn:
            assert turn.threads == 1
        assert start_turn_executor(vad, env={"BRISVOX_SMART_TURN_THREADS": "0"}) is vad
        with pytest.raises(ConfigError, match="BRISVOX_SMART_TURN_THREADS"):
            start_turn_executor(vad, env={"BRISVOX_SMART_TURN_THREADS": "many"})


def test_a_synchronous_owner_can_close_and_join() -> None:
    pool = one_thread()
    pool.close()
    pool.join(5)
    assert pool.closed
    assert "closed" in repr(pool)
