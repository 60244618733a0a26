"""Processors: one task each, reading its inbox and pushing frames to its neighbours.

A processor implements ``process(frame, direction, ctx)`` and forwards what it does not
consume with ``ctx.push``.  The task loop around it (:func:`run_processor`) applies the
epoch rules, so a processor never sees a frame from an interrupted turn:

1. *Gate on dequeue*: an interrupt newer than the task's epoch advances it; one that is
   not newer is a duplicate and dropped; any other stale frame is dropped before
   ``process``.
2. *Purge on advance*: stale frames still queued in the inbox are dropped.
3. *Outgoing*: ``push`` drops frames older than the task's epoch, and older than the
   newest interrupt already waiting in the task's own inbox.
4. *Blocked push*: a push waiting for room in a full neighbour also watches the task's
   own inbox and gives up as soon as an interrupt makes its frame stale.
5. *Originating*: pushing a newer interrupt advances the pusher's own epoch.

The layers overlap on purpose; the :class:`EpochLayers` a pipeline is started with
(``Pipeline.start(..., layers=...)``, all on by default) lets a test switch each one off
to show that every path is covered by more than one.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from dataclasses import dataclass
from typing import ClassVar, Protocol

from brisvox.core.clock import Clock
from brisvox.core.errors import ChannelClosed
from brisvox.core.frames import CancelFrame, Direction, Frame, InterruptFrame, StopFrame
from brisvox.core.inbox import DEFAULT_POLICIES, Inbox, InboxState, OverflowPolicies, PutOutcome, QueueConfig

__all__ = [
    "ALL_LAYERS",
    "EpochLayers",
    "EpochPolicy",
    "FrameSink",
    "Processor",
    "ProcessorContext",
    "ProcessorStats",
    "run_processor",
]

log = logging.getLogger(__name__)


class EpochPolicy(enum.Enum):
    DROP_STALE = "drop_stale"
    KEEP_ALL = "keep_all"  # recorders and the user side of a call keep every frame


@dataclass(frozen=True, slots=True)
class EpochLayers:
    """Switches for the redundant epoch layers.  Always all on, except in mutation tests,
    which inject a copy with some off through ``Pipeline.start(..., layers=...)``."""

    gate: bool = True
    purge: bool = True
    push_check: bool = True
    push_watch: bool = True
    originate: bool = True


ALL_LAYERS = EpochLayers()


class FrameSink(Protocol):
    """Where frames go past a pipeline's edge."""

    async def put(self, frame: Frame, direction: Direction) -> PutOutcome: ...


@dataclass(slots=True)
class ProcessorStats:
    processed: int = 0
    stale_dropped_in: int = 0
    stale_dropped_out: int = 0
    duplicate_interrupts: int = 0
    abandoned_pushes: int = 0


class Processor:
    """Base of every processor.  Override ``process``; the default forwards every frame.

    Class attributes configure the task around it: ``epoch_policy``, ``queue_config`` and
    ``overflow``.  There is no constructor to call from a subclass.
    """

    epoch_policy: ClassVar[EpochPolicy] = EpochPolicy.DROP_STALE
    queue_config: ClassVar[QueueConfig] = QueueConfig()
    overflow: ClassVar[OverflowPolicies] = DEFAULT_POLICIES

    @property
    def name(self) -> str:
        return type(self).__name__

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        await ctx.push(frame, direction)


class ProcessorContext:
    """What a processor sees of its task: its epoch, its clock, and ``push``."""

    __slots__ = ("clock", "downstream", "epoch", "inbox", "layers", "name", "stats", "upstream")

    def __init__(self, name: str, clock: Clock, inbox: Inbox, layers: EpochLayers = ALL_LAYERS) -> None:
        self.name = name
        self.clock = clock
        self.inbox = inbox
        self.layers = layers
        self.epoch = 0
        self.stats = ProcessorStats()
        # (target, source tag) of each neighbour; None past the pipeline's edge.
        self.downstream: tuple[Inbox | FrameSink, int] | None = None
        self.upstream: tuple[Inbox | FrameSink, int] | None = None

    async def push(self, frame: Frame, direction: Direction = Direction.DOWNSTREAM) -> bool:
        """Send ``frame`` to the neighbour in ``direction``.  False when it was dropped as stale."""
        if isinstance(frame, InterruptFrame):
            if self.layers.originate and frame.new_epoch > self.epoch:
                self.epoch = frame.new_epoch
        elif self.is_stale_outgoing(frame):
            self.stats.stale_dropped_out += 1
            return False
        neighbour = self.downstream if direction is Direction.DOWNSTREAM else self.upstream
        if neighbour is None:
            return True  # past the pipeline's edge
        return await self.push_to(neighbour[0], neighbour[1], frame, direction)

    def is_stale_outgoing(self, frame: Frame) -> bool:
        if not self.layers.push_check:
            return False
        current = self.epoch
        if self.inbox.newest_interrupt > current:
            current = self.inbox.newest_interrupt
        return frame.is_stale(current)

    async def push_to(self, target: Inbox | FrameSink, source: int, frame: Frame, direction: Direction) -> bool:
        """Put ``frame`` into ``target``, waiting on backpressure but giving up once it is stale."""
        if not isinstance(target, Inbox):
            await target.put(frame, direction)
            return True
        outcome = target.try_put(frame, direction, source)
        if outcome is PutOutcome.FULL:
            return await self._blocked_push(target, source, frame, direction)
        if outcome is PutOutcome.DISCARDED:
            log.debug("%s: %r pushed %s into a stopped neighbour; discarded", self.name, frame, direction.value)
        return True

    async def _blocked_push(self, target: Inbox, source: int, frame: Frame, direction: Direction) -> bool:
        while True:
            space = target.space_waiter(frame, direction)
            watch = self.inbox.interrupt_watcher() if self.layers.push_watch else None
            try:
                if watch is None:
                    await space
                else:
                    await asyncio.wait((space, watch), return_when=asyncio.FIRST_COMPLETED)
            except BaseException:
                target.release_space(space, frame, direction)
                raise
            finally:
                space.cancel()
                target.forget_space_waiter(space, frame, direction)
                if watch is not None:
                    watch.cancel()
                    self.inbox.forget_watcher(watch)
            if self.layers.push_watch and frame.is_stale(max(self.epoch, self.inbox.newest_interrupt)):
                self.stats.abandoned_pushes += 1
                target.release_space(space, frame, direction)
                return False
            outcome = target.try_put(frame, direction, source)
            if outcome is not PutOutcome.FULL:
                return True


async def run_processor(processor: Processor, ctx: ProcessorContext) -> None:
    """The task loop of one processor; returns after a Stop or Cancel, or when the inbox ends."""
    inbox = ctx.inbox
    keep_all = processor.epoch_policy is EpochPolicy.KEEP_ALL
    stats = ctx.stats
    layers = ctx.layers
    try:
        while True:
            item = inbox.get_nowait()
            if item is None:
                item = await inbox.get()
                if item is None:
                    return
            frame, direction, _ = item
            if isinstance(frame, InterruptFrame):
                if frame.new_epoch > ctx.epoch:
                    _advance(ctx, frame.new_epoch, keep_all)
                elif layers.gate:
                    # Not newer than this task's epoch: a copy that arrived from the other
                    # side, or the echo of an interrupt this task originated.
                    stats.duplicate_interrupts += 1
                    continue
            elif isinstance(frame, StopFrame) and direction is Direction.DOWNSTREAM:
                await _drain_then_stop(processor, ctx, frame)
                return
            elif isinstance(frame, CancelFrame):
                inbox.drop_all()
                await processor.process(frame, direction, ctx)
                return
            elif layers.gate and not keep_all and frame.is_stale(ctx.epoch):
                stats.stale_dropped_in += 1
                continue
            stats.processed += 1
            before = ctx.epoch
            await processor.process(frame, direction, ctx)
            if ctx.epoch > before and layers.originate:
                _advance(ctx, ctx.epoch, keep_all)  # this processor originated an interrupt
    finally:
        if inbox.state is InboxState.OPEN:
            inbox.close(InboxState.CLOSED)


def _advance(ctx: ProcessorContext, epoch: int, keep_all: bool) -> None:
    ctx.epoch = epoch
    if ctx.layers.purge and not keep_all:
        ctx.inbox.purge_stale(epoch)


async def _drain_then_stop(processor: Processor, ctx: ProcessorContext, stop: StopFrame) -> None:
    """Handle everything already queued (receive order), then forward the Stop."""
    inbox = ctx.inbox
    keep_all = processor.epoch_policy is EpochPolicy.KEEP_ALL
    while (item := inbox.get_nowait()) is not None:
        frame, direction, _ = item
        if isinstance(frame, CancelFrame):
            inbox.drop_all()
            await processor.process(frame, direction, ctx)
            inbox.close(InboxState.STOPPED)
            return
        if isinstance(frame, InterruptFrame):
            if frame.new_epoch <= ctx.epoch:
                ctx.stats.duplicate_interrupts += 1
                continue
            _advance(ctx, frame.new_epoch, keep_all)
        elif not keep_all and frame.is_stale(ctx.epoch):
            ctx.stats.stale_dropped_in += 1
            continue
        ctx.stats.processed += 1
        await processor.process(frame, direction, ctx)
    # Frames pushed upstream into this task from now on are discarded, not errors.
    inbox.close(InboxState.STOPPED)
    try:
        await processor.process(stop, Direction.DOWNSTREAM, ctx)
    except ChannelClosed:
        log.debug("%s: the next stage was gone when Stop was forwarded", ctx.name)
