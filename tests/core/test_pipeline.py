from __future__ import annotations

import asyncio

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.errors import PipelineError, ProcessorFailed, StopTimeout
from brisvox.core.frames import (
    CancelFrame,
    Direction,
    Frame,
    InterruptFrame,
    LlmTextFrame,
    StartFrame,
    StopFrame,
    WordTiming,
    WordTimingsFrame,
)
from brisvox.core.inbox import PutOutcome, QueueConfig
from brisvox.core.pipeline import Links, Pipeline
from brisvox.core.processor import EpochPolicy, Processor, ProcessorContext
from brisvox.core.tasks import live_tasks, wait_for_task_baseline
from tests.core.helpers import Collect, Failing, Gate, Passthrough, text

DOWN, UP = Direction.DOWNSTREAM, Direction.UPSTREAM


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


async def test_frames_cross_five_processors_in_order_after_start() -> None:
    clock = SimClock()
    sink = Collect()
    pipeline = Pipeline("p")
    for i in range(5):
        pipeline.then(Passthrough(f"p{i}"))
    async with pipeline.start(clock, Links(downstream=sink)) as running:
        for i in range(10):
            await running.send(text(0, str(i)))
        await running.stop(timeout=1.0)
    assert isinstance(sink.frames[0], StartFrame)
    assert sink.texts() == [str(i) for i in range(10)]
    assert isinstance(sink.frames[-1], StopFrame)


async def test_nested_pipelines_are_flattened_into_one_task_per_processor() -> None:
    clock = SimClock()
    baseline = live_tasks()
    inner = Pipeline("inner").then(Passthrough("b")).then(Passthrough("c"))
    empty = Pipeline("empty")
    outer = Pipeline("outer").then(Passthrough("a")).then_pipeline(inner).then_pipeline(empty).then(Passthrough("d"))
    assert [p.name for p in outer.flatten()] == ["a", "b", "c", "d"]  # type: ignore[union-attr]
    sink = Collect()
    running = outer.start(clock, Links(downstream=sink))
    assert live_tasks() == baseline + 4
    await running.send(text(0, "x"))
    await running.stop(1.0)
    assert sink.texts() == ["x"]
    await wait_for_task_baseline(clock, baseline)


async def test_an_interrupt_drops_frames_queued_behind_it_unlike_pipecat() -> None:
    # Pipecat 1.14 delivers [INTERRUPTION, stale-0, stale-1, stale-2]; here the stale
    # frames queued in the next processor are purged when the interrupt overtakes them.
    clock = SimClock()
    sink = Collect()
    gate = Gate("slow")
    async with Pipeline("p").then(Passthrough("a")).then(gate).start(clock, Links(downstream=sink)) as running:
        for i in range(4):
            await running.send(text(0, f"stale-{i}"))
        await settle()
        await running.send(InterruptFrame(new_epoch=1))
        await running.send(text(1, "fresh"))
        await settle()
        gate.release.set()
        await settle()
        await running.stop(1.0)
    # stale-0 was already inside process() when the interrupt came; the push drops it.
    assert sink.texts() == ["fresh"]
    assert len(sink.of(InterruptFrame)) == 1


async def test_what_was_heard_of_an_interrupted_turn_still_reaches_the_end() -> None:
    clock = SimClock()
    sink = Collect()
    gate = Gate("slow")
    async with Pipeline("p").then(gate).then(Passthrough("b")).start(clock, Links(downstream=sink)) as running:
        await running.send(text(0, "stale"))
        await running.send(WordTimingsFrame(epoch=0, utterance=1, words=(WordTiming(word="hi", start=0.0, end=0.2),)))
        await settle()
        await running.send(InterruptFrame(new_epoch=1))
        await settle()
        gate.release.set()
        await running.stop(1.0)
    assert [f.utterance for f in sink.of(WordTimingsFrame)] == [1]  # type: ignore[attr-defined]
    assert sink.texts() == []


async def test_a_duplicate_interrupt_is_dropped_by_the_gate() -> None:
    clock = SimClock()
    sink = Collect()
    async with Pipeline("p").then(Passthrough("a")).start(clock, Links(downstream=sink)) as running:
        await running.send(InterruptFrame(new_epoch=1))
        await running.send(InterruptFrame(new_epoch=1))
        await running.send(InterruptFrame(new_epoch=0))
        await running.stop(1.0)
        stats = next(iter(running.stats().values()))
    assert len(sink.of(InterruptFrame)) == 1
    assert stats.duplicate_interrupts == 2


class Originator(Processor):
    """Turns a text 'barge' into an interrupt of the next epoch, like a turn driver."""

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if isinstance(frame, LlmTextFrame) and frame.text == "barge":
            await ctx.push(InterruptFrame(new_epoch=ctx.epoch + 1), DOWN)
            await ctx.push(text(ctx.epoch, "new-turn"), DOWN)
            return
        await ctx.push(frame, direction)


async def test_a_processor_that_originates_an_interrupt_adopts_its_epoch_and_drops_older_output() -> None:
    clock = SimClock()
    sink = Collect()
    async with Pipeline("p").then(Originator()).start(clock, Links(downstream=sink)) as running:
        await running.send(text(0, "before"))
        await running.send(text(0, "barge"))
        await running.send(text(0, "queued-old"))
        await running.stop(1.0)
    assert sink.texts() == ["before", "new-turn"]


class UpstreamTalker(Processor):
    """Pushes its frames upstream too (to check that Stop discards them quietly)."""

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        await ctx.push(frame, direction)
        if isinstance(frame, LlmTextFrame | StopFrame):
            await ctx.push(text(0, "echo-up"), UP)


async def test_graceful_stop_drains_queued_frames_in_order_and_upstream_pushes_are_discarded() -> None:
    clock = SimClock()
    sink = Collect()
    up = Collect()
    pipeline = Pipeline("p").then(Passthrough("a")).then(UpstreamTalker())
    running = pipeline.start(clock, Links(downstream=sink, upstream=up), QueueConfig(data=64))
    for i in range(20):
        running.try_send(text(0, str(i)))
    await running.stop(timeout=1.0)
    assert sink.texts() == [str(i) for i in range(20)]
    assert running.failure is None


async def test_a_stop_that_cannot_finish_in_time_cancels_the_pipeline() -> None:
    clock = SimClock()
    sink = Collect()
    gate = Gate("stuck")
    running = Pipeline("p").then(gate).start(clock, Links(downstream=sink))
    await running.send(text(0, "never"))
    started = clock.now()
    with pytest.raises(StopTimeout):
        await running.stop(timeout=2.0)
    assert clock.now() - started == pytest.approx(2.0)
    assert not running.running or running.failure is None


async def test_a_cancel_frame_is_forwarded_at_once_and_queued_frames_are_dropped() -> None:
    clock = SimClock()
    sink = Collect()
    gate = Gate("g")
    running = Pipeline("p").then(gate).then(Passthrough("b")).start(clock, Links(downstream=sink))
    await running.send(text(0, "held"))
    await settle()
    running.try_send(text(0, "queued"))
    running.try_send(CancelFrame())
    gate.release.set()
    await running.wait()
    assert "queued" not in sink.texts()
    assert len(sink.of(CancelFrame)) == 1


async def test_a_failing_processor_fails_its_pipeline_with_its_name_and_spares_another() -> None:
    clock = SimClock()
    baseline = live_tasks()
    ok_sink = Collect()
    bad = Pipeline("bad").then(Passthrough("a")).then(Failing(LlmTextFrame)).then(Passthrough("c")).start(clock)
    good = Pipeline("good").then(Passthrough("x")).start(clock, Links(downstream=ok_sink))
    await bad.send(text(0, "boom"))
    with pytest.raises(ProcessorFailed) as info:
        await bad.wait()
    assert info.value.stage == "Failing"
    assert isinstance(info.value.cause, RuntimeError)
    await good.send(text(0, "still fine"))
    await good.stop(1.0)
    assert ok_sink.texts() == ["still fine"]
    await wait_for_task_baseline(clock, baseline)


async def test_a_neighbours_channel_closed_is_not_reported_as_the_root_cause() -> None:
    clock = SimClock()
    # "a" will be blocked pushing into the failing stage's full inbox when it dies.
    running = Pipeline("p").then(Passthrough("a")).then(Failing(StopFrame)).start(clock, queue=QueueConfig(data=1))
    for i in range(5):
        running.try_send(text(0, str(i)))
    await settle()
    running.try_send(StopFrame())
    with pytest.raises(ProcessorFailed) as info:
        await running.wait()
    assert info.value.stage == "Failing"


async def test_keep_all_processors_see_stale_frames() -> None:
    class Recorder(Processor):
        epoch_policy = EpochPolicy.KEEP_ALL

        def __init__(self) -> None:
            self.seen: list[str] = []

        async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
            if isinstance(frame, LlmTextFrame):
                self.seen.append(frame.text)

    clock = SimClock()
    rec = Recorder()
    async with Pipeline("p").then(rec).start(clock) as running:
        await running.send(InterruptFrame(new_epoch=2))
        await running.send(text(0, "old"))
        await running.stop(1.0)
    assert rec.seen == ["old"]


def test_building_an_empty_pipeline_is_an_error() -> None:
    with pytest.raises(PipelineError, match="no processors"):
        Pipeline("nothing").start(SimClock())


def test_then_refuses_what_is_not_a_processor() -> None:
    with pytest.raises(PipelineError, match="takes a Processor"):
        Pipeline("p").then("not a processor")  # type: ignore[arg-type]


async def test_cancel_and_stop_leave_no_task_behind() -> None:
    clock = SimClock()
    baseline = live_tasks()
    for end in ("stop", "cancel"):
        running = Pipeline("p").then(Passthrough("a")).then(Gate("g")).start(clock)
        await running.send(text(0, "x"))
        if end == "stop":
            with pytest.raises(StopTimeout):
                await running.stop(0.5)
        else:
            await running.aclose()
        await wait_for_task_baseline(clock, baseline)


async def test_send_to_puts_a_frame_into_one_stage_skipping_the_stages_between() -> None:
    clock = SimClock()
    up = Collect()
    first, middle = Passthrough("first"), Gate("middle")  # the gate would hold it had it passed there
    async with Pipeline("p").then(first).then(middle).then(Passthrough("last")).start(
            clock, Links(upstream=up)) as running:
        await running.send_to(first, text(0, "fact"), Direction.UPSTREAM)
        await settle()
        assert up.texts() == ["fact"] and not [f for f in middle.seen if isinstance(f, LlmTextFrame)]
        with pytest.raises(PipelineError, match="held 0 times"):
            await running.send_to(Passthrough("stranger"), text(0, "x"), Direction.UPSTREAM)
        await running.stop(1.0)
    # After a graceful stop the stage's inbox discards late frames quietly, as pushes.
    assert await running.send_to(first, text(0, "late"), Direction.UPSTREAM) is PutOutcome.DISCARDED


async def test_on_end_calls_back_once_every_task_ended_with_the_failure_already_known() -> None:
    clock = SimClock()
    seen: list[BaseException | None] = []
    running = Pipeline("p").then(Passthrough("a")).then(Failing(LlmTextFrame)).start(clock)
    running.on_end(lambda: seen.append(running.failure))
    await running.send(text(0, "boom"))
    await settle()
    with pytest.raises(ProcessorFailed):
        await running.wait()
    assert len(seen) == 1 and isinstance(seen[0], ProcessorFailed)
    running.on_end(lambda: seen.append(None))  # already ended: called soon
    await settle()
    assert len(seen) == 2
