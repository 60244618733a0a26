from __future__ import annotations

import asyncio

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.errors import DeadlineExceeded
from brisvox.core.tasks import ScopeClosed, TaskScope, live_tasks, wait_for_task_baseline


async def test_a_scope_waits_for_its_children_on_exit() -> None:
    clock = SimClock()
    done: list[str] = []

    async def child(name: str, after: float) -> None:
        await clock.sleep(after)
        done.append(name)

    async with TaskScope("s") as scope:
        scope.spawn(child("a", 2.0), name="a")
        scope.spawn(child("b", 1.0), name="b")
    assert done == ["b", "a"]
    assert clock.now() == 2.0


async def test_the_first_failure_cancels_the_siblings_and_is_raised() -> None:
    clock = SimClock()
    cancelled = asyncio.Event()

    async def sibling() -> None:
        try:
            await clock.sleep(100)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def failing() -> None:
        await clock.sleep(1)
        raise ValueError("boom")

    with pytest.raises(ValueError, match="boom"):
        async with TaskScope("s") as scope:
            scope.spawn(sibling(), name="sibling")
            scope.spawn(failing(), name="failing")
    assert cancelled.is_set()
    assert clock.now() == 1.0


async def test_aclose_cancels_a_long_lived_scope_and_leaves_no_task() -> None:
    clock = SimClock()
    baseline = live_tasks()
    scope = TaskScope("session")
    for i in range(5):
        scope.spawn(clock.sleep(1000), name=f"t{i}")
    assert live_tasks() == baseline + 5
    await scope.aclose()
    assert live_tasks() == baseline
    with pytest.raises(ScopeClosed, match="session"):
        scope.spawn(clock.sleep(1), name="late")


async def test_child_names_carry_the_scope_name() -> None:
    scope = TaskScope("call-7")
    task = scope.spawn(asyncio.Event().wait(), name="reader")
    assert task.get_name() == "call-7/reader"
    await scope.aclose()


async def test_the_leak_check_waits_on_the_clock_until_tasks_end() -> None:
    clock = SimClock()
    baseline = live_tasks()
    scope = TaskScope("s")
    scope.spawn(clock.sleep(0.5), name="short")
    await wait_for_task_baseline(clock, baseline, timeout=1.0)
    assert clock.now() >= 0.5
    await scope.aclose()


async def test_the_leak_check_names_the_leaked_task_when_it_times_out() -> None:
    clock = SimClock()
    baseline = live_tasks()
    scope = TaskScope("s")
    scope.spawn(clock.sleep(60), name="stuck")
    with pytest.raises(DeadlineExceeded, match="s/stuck"):
        await wait_for_task_baseline(clock, baseline, timeout=2.0)
    assert clock.now() == pytest.approx(2.0, abs=0.02)
    await scope.aclose()


async def test_two_concurrent_waits_on_a_scope_both_return_when_the_children_end() -> None:
    clock = SimClock()
    scope = TaskScope("s")
    scope.spawn(clock.sleep(1.0), name="child")
    waits = [asyncio.ensure_future(scope.wait()) for _ in range(2)]
    done, pending = await asyncio.wait(waits, timeout=10.0)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
    await scope.aclose()
    assert len(done) == 2 and not pending
