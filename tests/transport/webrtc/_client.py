"""An aiortc peer playing the browser, on 127.0.0.1 (the tests' stand-in for Chromium)."""

from __future__ import annotations

import asyncio
import fractions
from collections import deque
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

import av
import numpy as np
from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from brisvox.audio.resample import ResampleStream
from brisvox.core.clock import Clock
from brisvox.transport.webrtc import host_addresses

RATE = 48000
FRAME = 960


class FeedTrack(MediaStreamTrack):
    """A microphone: plays queued 48 kHz mono PCM16 in 20 ms frames, silence in between."""

    kind = "audio"

    def __init__(self, clock: Clock) -> None:
        super().__init__()
        self.clock = clock
        self.queue: deque[bytes] = deque()
        self._next: float | None = None
        self._pts = 0

    def play(self, pcm48: bytes) -> None:
        for i in range(0, len(pcm48), FRAME * 2):
            chunk = pcm48[i:i + FRAME * 2]
            self.queue.append(chunk + bytes(FRAME * 2 - len(chunk)))

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        now = self.clock.now()
        if self._next is None or now - self._next > 0.02:
            self._next = now
        else:
            await self.clock.sleep_until(self._next)
        self._next += 0.02
        pcm = self.queue.popleft() if self.queue else bytes(FRAME * 2)
        frame = av.AudioFrame.from_ndarray(np.frombuffer(pcm, dtype="<i2").reshape(1, -1), format="s16",
                                           layout="mono")
        frame.sample_rate = RATE
        frame.pts = self._pts
        frame.time_base = fractions.Fraction(1, RATE)
        self._pts += FRAME
        return frame


@dataclass
class BrowserPeer:
    """One client peer connection: ``offer()``, then ``accept(answer)``; ``heard`` holds what it
    received as (time, 48 kHz mono PCM16)."""

    clock: Clock
    relay: RTCIceServer | None = None
    pc: RTCPeerConnection = field(init=False)
    mic: FeedTrack = field(init=False)
    heard: list[tuple[float, bytes]] = field(default_factory=list)
    on_track: Callable[[MediaStreamTrack], Coroutine[Any, Any, None]] | None = None
    """Reads the server's track instead of recording it in ``heard``."""
    _reader: asyncio.Task[None] | None = None

    def __post_init__(self) -> None:
        servers = [self.relay] if self.relay is not None else []
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=servers))
        self.mic = FeedTrack(self.clock)
        self.pc.addTrack(self.mic)

        @self.pc.on("track")
        def on_track(track: MediaStreamTrack) -> None:
            reader = self._read(track) if self.on_track is None else self.on_track(track)
            self._reader = asyncio.ensure_future(reader)

    async def offer(self) -> str:
        with host_addresses(("127.0.0.1",)):
            await self.pc.setLocalDescription(await self.pc.createOffer())
        return self.pc.localDescription.sdp

    async def accept(self, answer: str) -> None:
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))

    async def _read(self, track: MediaStreamTrack) -> None:
        try:
            while True:
                frame = await track.recv()
                channels = len(frame.layout.channels)
                samples = np.frombuffer(bytes(frame.planes[0])[:frame.samples * channels * 2], dtype="<i2")
                mono = samples.reshape(-1, channels)[:, 0].astype("<i2").tobytes()
                self.heard.append((self.clock.now(), mono))
        except MediaStreamError:
            pass

    def heard_pcm(self) -> bytes:
        return b"".join(pcm for _, pcm in self.heard)

    async def close(self) -> None:
        await self.pc.close()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)


def tone(rate: int, seconds: float, freq: float = 440.0, amplitude: int = 8000) -> bytes:
    t = np.arange(int(rate * seconds)) / rate
    return (np.sin(2 * np.pi * freq * t) * amplitude).astype("<i2").tobytes()


def rms(pcm: bytes) -> float:
    samples = np.frombuffer(pcm, dtype="<i2").astype(np.float64)
    return float(np.sqrt(np.mean(samples ** 2))) if samples.size else 0.0


def to_rate(pcm: bytes, src: int, dst: int) -> bytes:
    return ResampleStream(src, dst).process(pcm)
