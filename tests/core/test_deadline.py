"""The one deadline helper (brisvox.core.clock): deadline / deadline_at / bounded, on the injected clock."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from datetime import datetime

import pytest

from brisvox.core.clock import Clock, SimClock, bounded, deadline, deadline_at
from brisvox.core.errors import DeadlineExceeded


async def test_work_that_finishes_in_time_gives_its_result() -> None:
    clock = SimClock()

    async def work() -> str:
        await clock.sleep(0.5)
        return "done"

    assert await bounded(clock, 1.0, work(), "work") == "done"


async def test_work_past_the_bound_is_cancelled_and_the_error_names_the_wait_at_exactly_the_bound() -> None:
    clock = SimClock()
    ended: list[str] = []

    async def work() -> None:
        try:
            await clock.sleep(10.0)
        except asyncio.CancelledError:
            ended.append("cancelled")
            raise

    t0 = clock.now()
    with pytest.raises(DeadlineExceeded) as info:
        await bounded(clock, 2.0, work(), "wire write")
    assert (info.value.what, info.value.seconds) == ("wire write", 2.0)
    assert clock.now() - t0 == pytest.approx(2.0)
    assert ended == ["cancelled"]


async def test_a_timeout_the_work_raises_itself_is_not_taken_for_the_bound() -> None:
    clock = SimClock()

    async def work() -> None:
        raise TimeoutError("the vendor's own")

    with pytest.raises(TimeoutError, match="the vendor's own") as info:
        await bounded(clock, 5.0, work(), "vendor")
    assert not isinstance(info.value, DeadlineExceeded)


async def test_an_inner_bound_that_runs_out_is_reported_by_its_own_name() -> None:
    clock = SimClock()
    with pytest.raises(DeadlineExceeded) as info:
        await bounded(clock, 5.0, bounded(clock, 1.0, clock.sleep(3.0), "inner"), "outer")
    assert info.value.what == "inner"


async def test_cancelling_the_waiter_cancels_a_task_it_waits_on_and_the_task_has_ended() -> None:
    clock = SimClock()
    task = asyncio.ensure_future(clock.sleep(10.0))
    waiter = asyncio.ensure_future(bounded(clock, 5.0, task, "task"))
    await clock.sleep(1.0)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert task.cancelled()


async def test_a_zero_bound_still_lets_work_that_needs_no_wait_finish() -> None:
    clock = SimClock()

    async def ready() -> int:
        return 7

    assert await bounded(clock, 0.0, ready(), "ready") == 7


class _OffsetClock:
    """A clock that is not the loop's own: the deadline must use a watchdog on it."""

    def __init__(self) -> None:
        self._inner = SimClock()

    def now(self) -> float:
        return self._inner.now() + 1000.0

    def wall(self) -> datetime:
        return self._inner.wall()

    async def sleep_until(self, deadline: float) -> None:
        await self._inner.sleep_until(deadline - 1000.0)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@pytest.mark.parametrize("make_clock", [SimClock, _OffsetClock], ids=["loop clock", "foreign clock"])
async def test_a_deadline_cancels_the_body_at_its_bound_on_the_injected_clock(make_clock: Callable[[], Clock]) -> None:
    # The loop clocks get a loop timer; any other clock a watchdog task sleeping on it.
    clock = make_clock()
    t0 = clock.now()
    with pytest.raises(DeadlineExceeded) as info:
        async with deadline(clock, 5.0, "connect"):
            await clock.sleep(60)
    assert clock.now() - t0 == pytest.approx(5.0)
    assert (info.value.what, info.value.seconds) == ("connect", 5.0)
    async with deadline(clock, 2.0, "fast"):
        await clock.sleep(0.5)
    with pytest.raises(DeadlineExceeded):
        await bounded(clock, 1.0, clock.sleep(5.0), "bounded")


async def test_a_deadline_at_an_instant_ends_there_and_names_the_bound_left() -> None:
    clock = SimClock()
    t0 = clock.now()
    with pytest.raises(DeadlineExceeded) as info:
        async with deadline_at(clock, t0 + 3.0, "idle"):
            await clock.sleep(60)
    assert clock.now() - t0 == pytest.approx(3.0)
    assert info.value.seconds == pytest.approx(3.0)
    async with deadline_at(clock, clock.now() + 3.0, "fast"):
        await clock.sleep(1.0)


async def test_cancelling_a_task_inside_a_foreign_clock_deadline_is_a_cancel_not_a_deadline() -> None:
    clock = _OffsetClock()

    async def body() -> None:
        async with deadline(clock, 5.0, "long"):
            await asyncio.sleep(10)

    task = asyncio.ensure_future(body())
    await asyncio.sleep(1.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
