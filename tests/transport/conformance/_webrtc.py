"""The conformance driver for WebRTC: an aiortc client peer on 127.0.0.1 plays the browser.

Real sockets, so its tests run on the standard loop in real time (``marks``).  Opus is lossy:
the driver says so (``lossy``), and the suite then recognizes a frame by its tone instead of
its sample values.  The browser gets no clear or mark message (marks are acknowledged from the
server's playout estimate; a clear drops what the server buffered), and aiortc has no DTMF
sender, so the driver has no ``clears`` and no DTMF.  A client that stops sending is a lost
peer after ``idle_timeout`` (1 s here).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import pytest
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack
from hypothesis import strategies as st

from brisvox.audio.resample import ResampleStream
from brisvox.core.clock import SimClock, bounded
from brisvox.core.tasks import TaskScope
from brisvox.transport import TransportSession
from brisvox.transport.link import CallLink
from brisvox.transport.webrtc import WebRtcConfig, WebRtcStats, answer_offer
from tests.transport.conformance._drivers import Caller
from tests.transport.webrtc._client import BrowserPeer

SILENCE_PEAK = 300  # a received frame whose peak is below this is the track's silence


class WebRtcDriver:
    name = "webrtc"
    rate = out_rate = 16000
    lossy = True
    clear_messages = False
    dtmf = False
    fuzzed = False  # the inbound wire is SRTP from aiortc; the signaling parser has its own fuzz test
    marks = (pytest.mark.realtime,)

    def __init__(self) -> None:
        self.config = WebRtcConfig(input_rate=self.rate, output_rate=self.rate, idle_timeout=1.0)

    @asynccontextmanager
    async def open(self, clock: SimClock) -> AsyncIterator[tuple[Caller, TransportSession]]:
        browser = BrowserPeer(clock)
        call = await answer_offer(await browser.offer(), clock=clock, config=self.config, stats=WebRtcStats(),
                                  call_id="conformance")
        got: asyncio.Future[CallLink] = asyncio.get_running_loop().create_future()

        async def deliver(link: CallLink) -> bool:
            got.set_result(link)
            return True

        up = ResampleStream(self.rate, 48000)

        async def audio(pcm: bytes) -> None:
            browser.mic.play(up.process(pcm))

        async def no_dtmf(digit: str) -> None:
            raise NotImplementedError("aiortc has no DTMF sender")

        async def hangup() -> None:
            call.hang_up()

        async def raw(data: bytes | str) -> None:
            raise NotImplementedError("no raw messages over WebRTC")

        caller = Caller(self.rate, audio, no_dtmf, hangup, browser.mic.stop, raw)
        browser.on_track = lambda track: self._read(clock, track, caller)
        await browser.accept(call.answer_sdp)

        @browser.pc.on("connectionstatechange")
        def on_state() -> None:
            if browser.pc.connectionState in ("closed", "failed"):
                caller.ended.set()

        async with TaskScope("webrtc-conformance") as scope:
            scope.spawn(call.run(deliver, asyncio.Event()), name="call")
            session = await TransportSession.open(clock, await bounded(clock, 10.0, got, "connected"))
            try:
                yield caller, session
            finally:
                await session.close()
                await browser.close()

    async def _read(self, clock: SimClock, track: MediaStreamTrack, caller: Caller) -> None:
        down = ResampleStream(48000, self.rate)
        try:
            while True:
                frame = await track.recv()
                channels = len(frame.layout.channels)
                samples = np.frombuffer(bytes(frame.planes[0])[:frame.samples * channels * 2], dtype="<i2")
                pcm = down.process(samples.reshape(-1, channels)[:, 0].astype("<i2").tobytes())
                if samples.size and int(np.abs(samples).max()) >= SILENCE_PEAK:
                    caller.heard.append((clock.now(), pcm))
        except MediaStreamError:
            caller.ended.set()

    def fuzz_frames(self) -> st.SearchStrategy[Any]:
        return st.nothing()
