"""bounded(): a wait on the injected clock that ends the work it gave up on."""

from __future__ import annotations

import asyncio

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.errors import DeadlineExceeded
from brisvox.transport._timeout import bounded


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
