"""Shared helpers of the transport tests."""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from contextvars import ContextVar

from brisvox.audio.pacer import PaceTicker
from brisvox.core.clock import SimClock
from brisvox.core.frames import OutputAudioFrame
from brisvox.transport import (
    LoopbackClient,
    LoopbackConfig,
    LoopbackTransport,
    SendAudio,
    SessionConfig,
    TransportEvent,
    TransportSession,
)
from brisvox.transport.events import WireAudioOut

RATE = 16000
TICKED: ContextVar[bool] = ContextVar("TICKED", default=False)
"""loopback_call's session paces on a shared PaceTicker (as a server's calls do), not on its own."""
FRAME_BYTES = 640  # 20 ms at 16 kHz


def tagged_pcm(tag: int, ms: int = 20, rate: int = RATE) -> bytes:
    """PCM16 whose every sample is ``tag``: the frame can be recognized on the far side."""
    return struct.pack("<h", tag) * (rate * ms // 1000)


def audio(tag: int, *, epoch: int = 0, utterance: int = 0, ms: int = 20) -> SendAudio:
    return SendAudio(OutputAudioFrame(epoch=epoch, pcm=tagged_pcm(tag, ms), sample_rate=RATE, utterance=utterance))


def tag_of(item: object) -> int:
    assert isinstance(item, WireAudioOut)
    return int(struct.unpack_from("<h", item.frame.pcm)[0])


@asynccontextmanager
async def loopback_call(
    config: SessionConfig | None = None, loop_config: LoopbackConfig | None = None
) -> AsyncIterator[tuple[SimClock, LoopbackClient, TransportSession]]:
    clock = SimClock()
    async with LoopbackTransport(clock, loop_config) as transport:
        client = await transport.connect()
        link = await transport.accept()
        ticker = PaceTicker(clock) if TICKED.get() else None
        session = await TransportSession.open(clock, link, config, ticker)
        try:
            yield clock, client, session
        finally:
            await session.close()


def drain_events(session: TransportSession) -> list[TransportEvent]:
    out: list[TransportEvent] = []
    try:
        while (ev := session.try_recv()) is not None:
            out.append(ev)
    except Exception:
        pass
    return out
