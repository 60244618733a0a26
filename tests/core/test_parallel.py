from __future__ import annotations

import asyncio

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.errors import PipelineError
from brisvox.core.frames import (
    CancelFrame,
    Direction,
    Frame,
    InterruptFrame,
    LlmTextFrame,
    StartFrame,
    StopFrame,
    UserTurnStarted,
)
from brisvox.core.parallel import BroadcastLedger, LedgerVerdict
from brisvox.core.pipeline import Links, Pipeline
from brisvox.core.processor import Processor, ProcessorContext
from brisvox.core.tasks import live_tasks, wait_for_task_baseline
from tests.core.helpers import Collect, Gate, Passthrough, Swallow, text

DOWN, UP = Direction.DOWNSTREAM, Direction.UPSTREAM


async def settle() -> None:
    for _ in range(30):
        await asyncio.sleep(0)


def branches(n: int) -> list[Pipeline]:
    return [Pipeline(f"b{i}").then(Passthrough(f"b{i}")) for i in range(n)]


async def test_data_reaches_the_merge_once_per_branch_and_broadcasts_once() -> None:
    clock = SimClock()
    sink = Collect()
    pipeline = Pipeline("p").then(Passthrough("head")).then_parallel(branches(3)).then(Passthrough("tail"))
    async with pipeline.start(clock, Links(downstream=sink)) as running:
        await running.send(text(0, "hello"))
        await running.send(UserTurnStarted(epoch=0, at=0.0))
        await running.stop(1.0)
    assert sink.texts() == ["hello"] * 3
    assert len(sink.of(StartFrame)) == 1
    assert len(sink.of(UserTurnStarted)) == 1
    assert len(sink.of(StopFrame)) == 1


async def test_stop_leaves_the_merge_only_after_every_branch_passed_it() -> None:
    clock = SimClock()
    sink = Collect()
    slow = Gate("slow")
    fast = Pipeline("fast").then(Passthrough("fast"))
    block = [fast, Pipeline("slow").then(slow)]
    running = Pipeline("p").then_parallel(block).start(clock, Links(downstream=sink))
    await running.send(text(0, "x"))
    running.try_send(StopFrame())
    await settle()
    assert not sink.of(StopFrame)
    slow.release.set()
    await running.wait()
    assert sink.texts() == ["x", "x"]
    assert isinstance(sink.frames[-1], StopFrame)


async def test_an_interrupt_is_forwarded_on_the_first_copy_not_held_back_by_a_slow_branch() -> None:
    clock = SimClock()
    sink = Collect()
    slow = Gate("slow")
    block = [Pipeline("fast").then(Passthrough("fast")), Pipeline("slow").then(slow)]
    async with Pipeline("p").then_parallel(block).start(clock, Links(downstream=sink)) as running:
        await running.send(text(0, "held"))
        await settle()
        await running.send(InterruptFrame(new_epoch=1))
        await settle()
        assert len(sink.of(InterruptFrame)) == 1
        slow.release.set()
        await settle()
    assert len(sink.of(InterruptFrame)) == 1


async def test_a_branch_that_swallows_a_broadcast_cannot_hide_a_later_equal_one() -> None:
    clock = SimClock()
    sink = Collect()
    swallow_first = SwallowOnce(UserTurnStarted)
    block = [Pipeline("a").then(swallow_first), Pipeline("b").then(Passthrough("b"))]
    frame = UserTurnStarted(epoch=0, at=1.0)
    async with Pipeline("p").then_parallel(block).start(clock, Links(downstream=sink)) as running:
        await running.send(frame)
        await settle()
        await running.send(frame)
        await running.stop(1.0)
    # Two broadcasts went in; each must come out exactly once.
    assert len(sink.of(UserTurnStarted)) == 2


class SwallowOnce(Processor):
    def __init__(self, kind: type[Frame]) -> None:
        self.kind = kind
        self.done = False

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if isinstance(frame, self.kind) and not self.done:
            self.done = True
            return
        await ctx.push(frame, direction)


class Emit(Processor):
    """Emits its own control frame on Start (originating inside a branch)."""

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        await ctx.push(frame, direction)
        if isinstance(frame, StartFrame):
            await ctx.push(UserTurnStarted(epoch=0, at=5.0), DOWN)


async def test_frames_originating_inside_a_branch_pass_through_the_merge() -> None:
    clock = SimClock()
    sink = Collect()
    block = [Pipeline("a").then(Emit()), Pipeline("b").then(Passthrough("b"))]
    async with Pipeline("p").then_parallel(block).start(clock, Links(downstream=sink)) as running:
        await running.stop(1.0)
    assert [f.at for f in sink.of(UserTurnStarted)] == [5.0]  # type: ignore[attr-defined]


async def test_cancel_is_forwarded_once_and_every_task_ends() -> None:
    clock = SimClock()
    baseline = live_tasks()
    sink = Collect()
    running = Pipeline("p").then_parallel(branches(4)).start(clock, Links(downstream=sink))
    await running.send(CancelFrame())
    await running.wait()
    assert len(sink.of(CancelFrame)) == 1
    await wait_for_task_baseline(clock, baseline)


async def test_upstream_broadcasts_are_collapsed_at_the_fan_out() -> None:
    clock = SimClock()
    up = Collect()
    pipeline = Pipeline("p").then(Passthrough("head")).then_parallel(branches(3)).then(Passthrough("tail"))
    async with pipeline.start(clock, Links(upstream=up)) as running:
        await running.send(InterruptFrame(new_epoch=1), UP)
        await running.send(text(1, "up-data"), UP)
        await settle()
        await running.stop(1.0)
    assert len(up.of(InterruptFrame)) == 1
    assert [f.text for f in up.of(LlmTextFrame)] == ["up-data"] * 3  # type: ignore[attr-defined]


async def test_nested_parallel_blocks_start_and_stop() -> None:
    clock = SimClock()
    sink = Collect()
    inner = Pipeline("inner").then_parallel(branches(2))
    block = [inner, Pipeline("plain").then(Passthrough("plain"))]
    async with Pipeline("p").then_parallel(block).start(clock, Links(downstream=sink)) as running:
        await running.send(text(0, "n"))
        await running.stop(1.0)
    assert sink.texts() == ["n"] * 3
    assert len(sink.of(StopFrame)) == 1
    assert len(sink.of(StartFrame)) == 1


def test_an_empty_branch_or_block_or_too_many_branches_is_an_error() -> None:
    with pytest.raises(PipelineError, match="at least one branch"):
        Pipeline("p").then_parallel([])
    with pytest.raises(PipelineError, match="branch 1"):
        Pipeline("p").then_parallel([Pipeline("a").then(Passthrough()), Pipeline("empty")]).flatten()
    with pytest.raises(PipelineError, match="at most 64"):
        Pipeline("p").then_parallel(branches(65))


def test_the_ledger_forwards_first_copies_and_stop_only_when_complete() -> None:
    ledger = BroadcastLedger(branches=3)
    start, stop = StartFrame(), StopFrame()
    ledger.record(start)
    ledger.record(stop)
    assert ledger.arrive(start, 1) == LedgerVerdict.FORWARD
    assert ledger.arrive(start, 0) == LedgerVerdict.SWALLOW
    assert ledger.arrive(stop, 2) == LedgerVerdict.SWALLOW
    assert ledger.arrive(stop, 0) == LedgerVerdict.SWALLOW
    assert ledger.arrive(start, 2) == LedgerVerdict.SWALLOW
    assert ledger.arrive(stop, 1) == LedgerVerdict.FORWARD
    assert len(ledger) == 0
    assert ledger.arrive(StartFrame(), 0) == LedgerVerdict.PASS_THROUGH


def test_a_full_ledger_evicts_its_oldest_entry() -> None:
    ledger = BroadcastLedger(branches=2, capacity=2)
    for i in range(3):
        ledger.record(UserTurnStarted(epoch=0, at=float(i)))
    assert ledger.evicted == 1
    assert ledger.arrive(UserTurnStarted(epoch=0, at=0.0), 0) == LedgerVerdict.PASS_THROUGH


async def test_a_swallowing_branch_still_lets_the_others_copies_through_once() -> None:
    clock = SimClock()
    sink = Collect()
    block = [Pipeline("a").then(Swallow(UserTurnStarted)), Pipeline("b").then(Passthrough("b"))]
    async with Pipeline("p").then_parallel(block).start(clock, Links(downstream=sink)) as running:
        for i in range(3):
            await running.send(UserTurnStarted(epoch=0, at=float(i)))
        await running.stop(1.0)
    assert [f.at for f in sink.of(UserTurnStarted)] == [0.0, 1.0, 2.0]  # type: ignore[attr-defined]
