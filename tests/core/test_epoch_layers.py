"""The epoch layers are redundant on purpose: switching one off never lets a stale frame
through, switching off every layer that covers a path does.  Each test below names a
path, shows it is safe with all layers on and with each single covering layer off, and
shows it breaks when all its covering layers are off (so the test can fail)."""

from __future__ import annotations

import asyncio
import dataclasses

import pytest

from brisvox.core.clock import SimClock, run_virtual
from brisvox.core.frames import Direction, Frame, InterruptFrame, LlmTextFrame
from brisvox.core.pipeline import Links, Pipeline
from brisvox.core.processor import ALL_LAYERS, EpochLayers, Processor, ProcessorContext
from tests.core.helpers import Collect, Gate, Passthrough, text

DOWN = Direction.DOWNSTREAM
ALL = ("gate", "purge", "push_check", "push_watch", "originate")


def layers_off(*names: str) -> EpochLayers:
    """The layers a pipeline is started with, ``names`` switched off."""
    assert set(names) <= set(ALL)
    return dataclasses.replace(ALL_LAYERS, **dict.fromkeys(names, False))


async def settle() -> None:
    for _ in range(30):
        await asyncio.sleep(0)


# --- path 1: stale frames queued in a processor's inbox when the interrupt arrives -----


async def _queued_behind_interrupt(layers: EpochLayers = ALL_LAYERS) -> list[str]:
    clock = SimClock()
    sink = Collect()
    gate = Gate("slow")
    async with Pipeline("p").then(gate).start(clock, Links(downstream=sink), layers=layers) as running:
        await running.send(text(2, "in-process"))  # of the new epoch: never dropped
        await settle()
        for i in range(3):
            await running.send(text(1, f"stale-{i}"))
        await running.send(InterruptFrame(new_epoch=2))
        await settle()
        gate.release.set()
        await settle()
        await running.stop(1.0)
    return [t for t in sink.texts() if t.startswith("stale")]


@pytest.mark.parametrize("off", [(), ("gate",), ("purge",), ("push_check",), ("gate", "purge")])
def test_queued_stale_frames_are_dropped_with_any_single_layer_off(off: tuple[str, ...]) -> None:
    assert run_virtual(lambda: _queued_behind_interrupt(layers_off(*off))) == []


def test_queued_stale_frames_leak_when_gate_purge_and_push_check_are_all_off() -> None:
    off = layers_off("gate", "purge", "push_check")
    assert run_virtual(lambda: _queued_behind_interrupt(off)) == ["stale-0", "stale-1", "stale-2"]


# --- path 2: a frame inside process() when the interrupt reaches the processor's inbox --


class Slow(Processor):
    """Takes 1 s per text frame, then pushes it (the interrupt arrives meanwhile)."""

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if isinstance(frame, LlmTextFrame):
            await ctx.clock.sleep(1.0)
        await ctx.push(frame, direction)


async def _inside_process(next_is_slow: bool, layers: EpochLayers = ALL_LAYERS) -> list[str]:
    clock = SimClock()
    sink = Collect()
    nxt: Processor = Gate("next") if next_is_slow else Passthrough("next")
    async with Pipeline("p").then(Slow()).then(nxt).start(clock, Links(downstream=sink), layers=layers) as running:
        await running.send(text(0, "stale"))
        await clock.sleep(0.5)
        await running.send(InterruptFrame(new_epoch=1))
        await clock.sleep(2.0)
        if isinstance(nxt, Gate):
            nxt.release.set()
        await settle()
        await running.stop(1.0)
    return sink.texts()


def test_a_frame_finished_after_the_interrupt_arrived_is_dropped_by_the_push_check() -> None:
    assert run_virtual(lambda: _inside_process(False)) == []


def test_without_the_push_check_a_slow_next_stage_still_purges_it() -> None:
    assert run_virtual(lambda: _inside_process(True, layers_off("push_check"))) == []


def test_without_push_check_gate_and_purge_the_stale_frame_reaches_the_end() -> None:
    assert run_virtual(lambda: _inside_process(True, layers_off("push_check", "gate", "purge"))) == ["stale"]


# --- path 3: a push blocked on a full neighbour when the interrupt arrives -------------


async def _blocked_push(layers: EpochLayers = ALL_LAYERS) -> tuple[int, int]:
    clock = SimClock()
    sink = Collect()
    first = Passthrough("first")
    gate = Gate("next")
    pipeline = Pipeline("p").then(first).then(gate)
    from brisvox.core.inbox import QueueConfig

    async with pipeline.start(clock, Links(downstream=sink), QueueConfig(data=1), layers=layers) as running:
        await running.send(text(0, "a"))  # taken by the gate, held
        await running.send(text(0, "b"))  # fills the gate's inbox
        await running.send(text(0, "c"))  # "first" blocks pushing it
        await settle()
        await running.send(InterruptFrame(new_epoch=1))
        await settle()
        ctx = next(c for n, c in running.contexts().items() if n.endswith(":first"))
        epoch_while_blocked = ctx.epoch
        abandoned = ctx.stats.abandoned_pushes
        gate.release.set()
        await settle()
        await running.stop(1.0)
    return epoch_while_blocked, abandoned


def test_a_blocked_push_is_abandoned_at_once_when_an_interrupt_makes_it_stale() -> None:
    assert run_virtual(_blocked_push) == (1, 1)


def test_without_the_push_watch_the_interrupt_waits_behind_backpressure() -> None:
    assert run_virtual(lambda: _blocked_push(layers_off("push_watch"))) == (0, 0)


# --- path 4: a processor that originates an interrupt ----------------------------------


class Barge(Processor):
    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if isinstance(frame, LlmTextFrame) and frame.text == "barge":
            await ctx.push(InterruptFrame(new_epoch=ctx.epoch + 1), DOWN)
            return
        await ctx.push(frame, direction)


async def _originated(with_next: bool, layers: EpochLayers = ALL_LAYERS) -> list[str]:
    clock = SimClock()
    sink = Collect()
    pipeline = Pipeline("p").then(Barge())
    if with_next:
        pipeline.then(Passthrough("next"))
    async with pipeline.start(clock, Links(downstream=sink), layers=layers) as running:
        await running.send(text(0, "barge"))
        await running.send(text(0, "old"))
        await running.stop(1.0)
    return sink.texts()


def test_an_originated_interrupt_drops_the_originators_queued_old_frames() -> None:
    assert run_virtual(lambda: _originated(False)) == []


def test_without_originate_the_next_stages_gate_still_drops_them() -> None:
    assert run_virtual(lambda: _originated(True, layers_off("originate"))) == []


def test_without_originate_and_with_no_next_stage_the_old_frame_escapes() -> None:
    assert run_virtual(lambda: _originated(False, layers_off("originate"))) == ["old"]
