"""Small processors and sinks shared by the core tests."""

from __future__ import annotations

import asyncio

from brisvox.core.frames import Direction, Frame, LlmTextFrame
from brisvox.core.inbox import PutOutcome
from brisvox.core.processor import Processor, ProcessorContext


class Collect:
    """An edge sink that records every frame (optionally blocking until released)."""

    def __init__(self) -> None:
        self.frames: list[Frame] = []
        self.arrived = asyncio.Event()
        self.gate: asyncio.Event | None = None

    async def put(self, frame: Frame, direction: Direction) -> PutOutcome:
        if self.gate is not None:
            await self.gate.wait()
        self.frames.append(frame)
        self.arrived.set()
        return PutOutcome.QUEUED

    def of(self, kind: type[Frame]) -> list[Frame]:
        return [f for f in self.frames if isinstance(f, kind)]

    def texts(self) -> list[str]:
        return [f.text for f in self.frames if isinstance(f, LlmTextFrame)]


class Passthrough(Processor):
    def __init__(self, label: str = "pass") -> None:
        self.label = label

    @property
    def name(self) -> str:
        return self.label


class Gate(Processor):
    """Holds every data frame until ``release`` is set (to build queues behind it)."""

    def __init__(self, label: str = "gate") -> None:
        self.label = label
        self.release = asyncio.Event()
        self.seen: list[Frame] = []

    @property
    def name(self) -> str:
        return self.label

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if frame.frame_class.value == "data":
            await self.release.wait()
        self.seen.append(frame)
        await ctx.push(frame, direction)


class Failing(Processor):
    def __init__(self, on: type[Frame]) -> None:
        self.on = on

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if isinstance(frame, self.on):
            raise RuntimeError("processor blew up")
        await ctx.push(frame, direction)


class Swallow(Processor):
    """Consumes frames of one type instead of forwarding them (breaks the contract on purpose)."""

    def __init__(self, kind: type[Frame]) -> None:
        self.kind = kind

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if not isinstance(frame, self.kind):
            await ctx.push(frame, direction)


def text(epoch: int, t: str) -> LlmTextFrame:
    return LlmTextFrame(epoch=epoch, text=t)
