from __future__ import annotations

import asyncio
import threading
import time

import pytest

from brisvox.core.clock import SIM_WALL_ORIGIN, SimClock, SystemClock, run_virtual


async def test_a_two_minute_sleep_on_virtual_time_advances_the_clock_exactly() -> None:
    clock = SimClock()
    start = clock.now()
    await clock.sleep(120.0)
    assert clock.now() - start == 120.0


async def test_sleep_until_a_past_deadline_returns_at_once() -> None:
    clock = SimClock()
    start = clock.now()
    await clock.sleep(1.0)
    await clock.sleep_until(start)
    assert clock.now() - start == 1.0


async def test_concurrent_timers_fire_in_deadline_order() -> None:
    clock = SimClock()
    order: list[float] = []

    async def wake(after: float) -> None:
        await clock.sleep(after)
        order.append(after)

    await asyncio.gather(wake(3.0), wake(1.0), wake(2.0))
    assert order == [1.0, 2.0, 3.0]


async def test_a_timeout_fires_at_its_virtual_deadline() -> None:
    clock = SimClock()
    start = clock.now()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(clock.sleep(100.0), timeout=5.0)
    assert clock.now() - start == 5.0


async def test_thread_work_takes_no_virtual_time_and_no_timer_fires_during_it() -> None:
    clock = SimClock()
    start = clock.now()
    loop = asyncio.get_running_loop()
    fired = False

    async def guard() -> None:
        nonlocal fired
        await clock.sleep(0.01)
        fired = True

    guard_task = asyncio.create_task(guard())
    await loop.run_in_executor(None, time.sleep, 0.05)
    assert clock.now() == start
    assert not fired
    await guard_task
    assert fired


async def test_the_sim_wall_clock_starts_at_its_fixed_origin() -> None:
    clock = SimClock()
    assert clock.wall() == SIM_WALL_ORIGIN
    await clock.sleep(2.5)
    assert (clock.wall() - SIM_WALL_ORIGIN).total_seconds() == 2.5


def test_run_virtual_returns_the_coroutine_result() -> None:
    async def main() -> float:
        clock = SimClock()
        await clock.sleep(3600)
        return clock.now()

    assert run_virtual(main) == 3600.0


def test_run_virtual_cancels_tasks_the_coroutine_left_behind() -> None:
    cancelled = threading.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def main() -> None:
        asyncio.get_running_loop().create_task(forever())
        await asyncio.sleep(0)

    run_virtual(main)
    assert cancelled.is_set()


def test_the_system_clock_follows_real_time() -> None:
    async def main() -> float:
        clock = SystemClock()
        start = clock.now()
        await clock.sleep(0.02)
        return clock.now() - start

    assert asyncio.run(main()) >= 0.019


def test_a_deadlocked_virtual_loop_raises_instead_of_hanging() -> None:
    from brisvox.core.clock import VirtualTimeDeadlock, VirtualTimeLoop

    async def main() -> None:
        await asyncio.Event().wait()

    loop = VirtualTimeLoop(deadlock_after=0.05)
    try:
        with pytest.raises(VirtualTimeDeadlock, match="no timer, thread or socket"):
            loop.run_until_complete(main())
    finally:
        for t in asyncio.all_tasks(loop):
            t.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


def test_a_loop_that_re_arms_timers_forever_stops_at_its_virtual_time_limit() -> None:
    from brisvox.core.clock import VirtualTimeDeadlock, VirtualTimeLoop

    async def keepalive_forever() -> None:
        while True:  # noqa: ASYNC110 - the point is a loop of timers that never ends
            await asyncio.sleep(4.0)

    loop = VirtualTimeLoop(max_time=3600.0)
    try:
        with pytest.raises(VirtualTimeDeadlock, match="re-arming a timer"):
            loop.run_until_complete(keepalive_forever())
        assert 3600.0 < loop.time() <= 3604.0
    finally:
        for t in asyncio.all_tasks(loop):
            t.cancel()
        loop.run_until_complete(asyncio.sleep(0))
        loop.close()


def test_call_at_runs_its_callback_at_the_clock_instant_and_a_cancelled_one_never() -> None:
    from brisvox.core.clock import call_at

    async def main() -> tuple[list[float], list[float]]:
        clock = SimClock()
        fired: list[float] = []
        cancelled: list[float] = []
        start = clock.now()
        call_at(clock, start + 2.5, lambda: fired.append(clock.now() - start))
        call_at(clock, start + 1.0, lambda: cancelled.append(clock.now())).cancel()
        await clock.sleep(3.0)
        return fired, cancelled

    fired, cancelled = run_virtual(main)
    assert fired == [2.5] and cancelled == []
