"""Parallel branches: a fan-out unit, N branch chains, and a merge unit.

Every frame entering the block goes to every branch.  Data frames pass through each
branch and arrive at the merge once per branch.  Broadcast system and control frames are
collapsed: the fan-out records each broadcast in a bounded ledger, and the merge forwards
a branch's copy only as the ledger says:

* a copy matches the oldest equal broadcast that branch has not passed yet, so a branch
  that swallows a frame cannot make a later broadcast disappear;
* Stop is forwarded once every branch has passed it;
* Cancel is forwarded on the first copy, after which the merge forwards nothing and ends
  once every branch has cancelled;
* anything else is forwarded on the first copy, so a slow branch never holds back an
  interrupt.

Frames that match no entry originated inside a branch and pass through.  Upstream is the
mirror image: the merge broadcasts to the branch tails and the fan-out collapses.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass
from typing import Final

from brisvox.core.frames import CancelFrame, Direction, Frame, FrameClass, InterruptFrame, StopFrame
from brisvox.core.inbox import Inbox, InboxState
from brisvox.core.processor import FrameSink, ProcessorContext

__all__ = ["MAX_BRANCHES", "BroadcastLedger", "LedgerVerdict", "run_fan_unit"]

log = logging.getLogger(__name__)

MAX_BRANCHES: Final = 64
LEDGER_ENTRIES: Final = 256


@dataclass(slots=True)
class _Entry:
    frame: Frame
    passed: int  # bit mask of the branches whose copy arrived


class LedgerVerdict:
    """What the collapsing side does with one copy."""

    PASS_THROUGH: Final = "pass_through"  # not a broadcast: it originated inside the branch
    FORWARD: Final = "forward"
    SWALLOW: Final = "swallow"


class BroadcastLedger:
    """Which branches have passed each broadcast, for one direction of one block."""

    __slots__ = ("_all", "_entries", "_evicted", "_warned")

    def __init__(self, branches: int, capacity: int = LEDGER_ENTRIES) -> None:
        self._all = (1 << branches) - 1
        self._entries: deque[_Entry] = deque(maxlen=capacity)
        self._warned = False
        self._evicted = 0

    @property
    def evicted(self) -> int:
        return self._evicted

    def record(self, frame: Frame) -> None:
        if len(self._entries) == self._entries.maxlen:
            self._evicted += 1
            if not self._warned:
                self._warned = True
                log.warning(
                    "a parallel branch is not forwarding broadcast frames; its oldest ledger entries "
                    "are being evicted (each processor must forward the system and control frames it gets)"
                )
        self._entries.append(_Entry(frame, 0))

    def __len__(self) -> int:
        return len(self._entries)

    def arrive(self, frame: Frame, branch: int) -> str:
        bit = 1 << branch
        for entry in self._entries:
            if entry.passed & bit or not (entry.frame is frame or entry.frame == frame):
                continue
            first = entry.passed == 0
            entry.passed |= bit
            complete = entry.passed == self._all
            if complete:
                self._entries.remove(entry)
            if isinstance(frame, StopFrame):
                return LedgerVerdict.FORWARD if complete else LedgerVerdict.SWALLOW
            return LedgerVerdict.FORWARD if first else LedgerVerdict.SWALLOW
        return LedgerVerdict.PASS_THROUGH


def _broadcastable(frame: Frame) -> bool:
    return frame.frame_class is not FrameClass.DATA


async def run_fan_unit(
    ctx: ProcessorContext,
    branches: list[tuple[Inbox | FrameSink, int]],
    spread: Direction,
    out_ledger: BroadcastLedger,
    in_ledger: BroadcastLedger,
) -> None:
    """The loop of a fan-out (``spread`` = downstream) or a merge (``spread`` = upstream).

    Frames travelling in ``spread`` go to every branch (broadcasts recorded in
    ``out_ledger``); frames travelling the other way come from a branch and are collapsed
    with ``in_ledger`` before they go to the single neighbour on that side.
    """
    unit = _FanUnit(ctx, branches, spread, out_ledger, in_ledger)
    inbox = ctx.inbox
    try:
        while True:
            item = inbox.get_nowait()
            if item is None:
                item = await inbox.get()
                if item is None:
                    return
            if await unit.handle(*item):
                return
    finally:
        if inbox.state is InboxState.OPEN:
            inbox.close(InboxState.CLOSED)


class _FanUnit:
    __slots__ = ("branches", "cancel_forwarded", "cancelled", "collapse", "ctx", "in_ledger", "out_ledger", "spread")

    def __init__(
        self,
        ctx: ProcessorContext,
        branches: list[tuple[Inbox | FrameSink, int]],
        spread: Direction,
        out_ledger: BroadcastLedger,
        in_ledger: BroadcastLedger,
    ) -> None:
        self.ctx = ctx
        self.branches = branches
        self.spread = spread
        self.collapse = spread.reverse
        self.out_ledger = out_ledger
        self.in_ledger = in_ledger
        self.cancelled: set[int] = set()
        self.cancel_forwarded = False

    async def handle(self, frame: Frame, direction: Direction, source: int) -> bool:
        """Route one frame; True when the unit is done."""
        if direction is self.spread:
            return await self._spread(frame, direction)
        return await self._collapse(frame, source)

    async def _spread(self, frame: Frame, direction: Direction) -> bool:
        ctx = self.ctx
        if not _gate(ctx, frame):
            return False
        graceful_end = isinstance(frame, StopFrame) and direction is Direction.DOWNSTREAM
        if graceful_end:
            await self._drain()
        if _broadcastable(frame):
            self.out_ledger.record(frame)
        for target, tag in self.branches:
            await ctx.push_to(target, tag, frame, direction)
        if isinstance(frame, CancelFrame) or graceful_end:
            ctx.inbox.close(InboxState.STOPPED)
            return True
        return False

    async def _collapse(self, frame: Frame, source: int) -> bool:
        ctx = self.ctx
        if isinstance(frame, CancelFrame):
            self.cancelled.add(source)
            if not self.cancel_forwarded:
                self.cancel_forwarded = True
                await ctx.push(frame, self.collapse)
            return len(self.cancelled) == len(self.branches)
        if self.cancel_forwarded:
            return False  # the next stage is shutting down
        if _broadcastable(frame) and self.in_ledger.arrive(frame, source) == LedgerVerdict.SWALLOW:
            return False
        if not _gate(ctx, frame):
            return False
        graceful_end = isinstance(frame, StopFrame) and self.collapse is Direction.DOWNSTREAM
        if graceful_end:
            await self._drain()
        await ctx.push(frame, self.collapse)
        if graceful_end:
            ctx.inbox.close(InboxState.STOPPED)
        return graceful_end

    async def _drain(self) -> None:
        """Route everything already queued before a graceful stop goes on."""
        while (item := self.ctx.inbox.get_nowait()) is not None:
            frame, direction, source = item
            if isinstance(frame, StopFrame | CancelFrame):
                continue
            await self.handle(frame, direction, source)


def _gate(ctx: ProcessorContext, frame: Frame) -> bool:
    """The epoch gate of a fan unit; False drops the frame."""
    if isinstance(frame, InterruptFrame):
        if frame.new_epoch > ctx.epoch:
            ctx.epoch = frame.new_epoch
            if ctx.layers.purge:
                ctx.inbox.purge_stale(ctx.epoch)
            return True
        if ctx.layers.gate:
            ctx.stats.duplicate_interrupts += 1
            return False
        return True
    if ctx.layers.gate and frame.is_stale(ctx.epoch):
        ctx.stats.stale_dropped_in += 1
        return False
    return True
