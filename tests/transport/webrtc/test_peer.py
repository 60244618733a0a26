"""The WebRTC transport against an aiortc client peer on 127.0.0.1 (real sockets, real time)."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from brisvox.core.clock import SystemClock, bounded
from brisvox.core.frames import OutputAudioFrame
from brisvox.core.tasks import TaskScope
from brisvox.transport import (
    CallerAudio,
    Clear,
    Mark,
    MarkCleared,
    MarkPlayed,
    SendAudio,
    Started,
    Stopped,
    StopReason,
    TransportError,
    TransportEvent,
    TransportSession,
)
from brisvox.transport.link import CallLink
from brisvox.transport.webrtc import (
    EndReason,
    OfferRejected,
    WebRtcCall,
    WebRtcConfig,
    WebRtcStats,
    answer_offer,
)
from tests.transport.webrtc._client import BrowserPeer, rms, tone

pytestmark = pytest.mark.realtime


@asynccontextmanager
async def webrtc_call(config: WebRtcConfig | None = None
                      ) -> AsyncIterator[tuple[BrowserPeer, WebRtcCall, TransportSession, asyncio.Future[EndReason]]]:
    clock = SystemClock()
    cfg = config or WebRtcConfig()
    browser = BrowserPeer(clock)
    call = await answer_offer(await browser.offer(), clock=clock, config=cfg, stats=WebRtcStats(), call_id="c1")
    await browser.accept(call.answer_sdp)
    got: asyncio.Future[CallLink] = asyncio.get_running_loop().create_future()

    async def deliver(link: CallLink) -> bool:
        got.set_result(link)
        return True

    async with TaskScope("webrtc-test") as scope:
        shutdown = asyncio.Event()
        ran = scope.spawn(call.run(deliver, shutdown), name="call")
        session = await TransportSession.open(clock, await bounded(clock, 10.0, got, "connected"))
        try:
            yield browser, call, session, ran
        finally:
            await session.close()
            await browser.close()
            await bounded(clock, 5.0, asyncio.shield(ran), "call end")


async def events_until(session: TransportSession, stop: type, within: float = 5.0) -> list[TransportEvent]:
    got: list[TransportEvent] = []

    async def read() -> None:
        while not any(isinstance(e, stop) for e in got):
            got.append(await session.recv())

    await bounded(SystemClock(), within, read(), "events")
    return got


async def test_caller_audio_reaches_the_engine_at_the_input_rate_and_bot_audio_reaches_the_browser() -> None:
    async with webrtc_call() as (browser, _, session, _ran):
        first = await bounded(SystemClock(), 2.0, session.recv(), "started")
        assert isinstance(first, Started)
        assert first.info.sample_rate() is not None and first.info.sample_rate().input == 16000
        browser.mic.play(tone(48000, 1.0))
        heard = b""
        clock = SystemClock()
        end = clock.now() + 3.0
        while clock.now() < end and rms(heard) < 1000:
            ev = await bounded(clock, 3.0, session.recv(), "caller audio")
            if isinstance(ev, CallerAudio):
                assert ev.frame.sample_rate == 16000
                heard += ev.frame.pcm
        assert rms(heard[-16000:]) > 1000, "the tone reached the engine"
        bot = tone(24000, 0.6, freq=300.0)
        for i in range(0, len(bot), 960):
            await session.send(SendAudio(OutputAudioFrame(epoch=0, pcm=bot[i:i + 960], sample_rate=24000)))
        await clock.sleep(1.2)
        assert rms(browser.heard_pcm()) > 500, "the bot's audio reached the browser"


async def test_a_mark_is_acknowledged_after_its_audio_and_a_clear_cuts_the_rest() -> None:
    async with webrtc_call() as (_, _call, session, _ran):
        await bounded(SystemClock(), 2.0, session.recv(), "started")
        bot = tone(24000, 0.2)
        await session.send(SendAudio(OutputAudioFrame(epoch=0, pcm=bot, sample_rate=24000, utterance=0)))
        await session.send(Mark("short"))
        for _ in range(5):
            await session.send(SendAudio(OutputAudioFrame(epoch=0, pcm=tone(24000, 1.0), sample_rate=24000,
                                                          utterance=1)))
        await session.send(Mark("long"))
        got = await events_until(session, MarkPlayed)
        assert [e.id for e in got if isinstance(e, MarkPlayed)] == ["short"]
        await session.send(Clear(1))
        got = await events_until(session, MarkCleared)
        assert [e.id for e in got if isinstance(e, MarkCleared)] == ["long"]


async def test_delete_is_a_hang_up() -> None:
    async with webrtc_call() as (_, call, session, ran):
        await bounded(SystemClock(), 2.0, session.recv(), "started")
        call.hang_up()
        got = await events_until(session, Stopped)
        assert [e.reason for e in got if isinstance(e, Stopped)] == [StopReason.PEER_HANGUP]
        assert await bounded(SystemClock(), 3.0, asyncio.shield(ran), "end") is EndReason.HANGUP


async def test_the_browsers_close_is_a_hang_up() -> None:
    async with webrtc_call() as (browser, _call, session, ran):
        await bounded(SystemClock(), 2.0, session.recv(), "started")
        await browser.close()
        got = await events_until(session, Stopped)
        assert [e.reason for e in got if isinstance(e, Stopped)] == [StopReason.PEER_HANGUP]
        assert await bounded(SystemClock(), 3.0, asyncio.shield(ran), "end") is EndReason.HANGUP


async def test_a_browser_that_stops_sending_is_a_lost_peer_after_the_idle_timeout() -> None:
    async with webrtc_call(WebRtcConfig(idle_timeout=0.5)) as (browser, call, session, ran):
        await bounded(SystemClock(), 2.0, session.recv(), "started")
        browser.mic.stop()
        got = await events_until(session, Stopped)
        assert [e.reason for e in got if isinstance(e, Stopped)] == [StopReason.PEER_DISCONNECTED]
        assert await bounded(SystemClock(), 3.0, asyncio.shield(ran), "end") is EndReason.LOST
        assert call.stats.idle_timeouts == 1


async def test_an_offer_that_never_connects_is_abandoned_unseen_by_the_engine() -> None:
    clock = SystemClock()
    browser = BrowserPeer(clock)
    stats = WebRtcStats()
    call = await answer_offer(await browser.offer(), clock=clock, config=WebRtcConfig(connect_timeout=0.5),
                              stats=stats, call_id="c2")
    delivered: list[CallLink] = []

    async def deliver(link: CallLink) -> bool:
        delivered.append(link)
        return True

    try:
        assert await bounded(clock, 3.0, call.run(deliver, asyncio.Event()), "abandon") is EndReason.ABANDONED
    finally:
        await browser.close()
    assert not delivered and stats.abandoned == 1 and stats.calls_started == 0


@pytest.mark.parametrize(("offer", "why"), [("v=0\r\n", "no audio section"), ("garbage", "no audio section")])
async def test_a_bad_offer_is_rejected_with_a_reason(offer: str, why: str) -> None:
    with pytest.raises(OfferRejected, match=why):
        await answer_offer(offer, clock=SystemClock(), config=WebRtcConfig(), stats=WebRtcStats(), call_id="c3")



async def test_rtp_past_the_packet_rate_is_dropped_before_decoding_and_a_flood_ends_the_call() -> None:
    config = WebRtcConfig(max_audio_packets_per_sec=10, packet_burst=0.1)
    async with webrtc_call(config) as (_, call, session, ran):
        await bounded(SystemClock(), 2.0, session.recv(), "started")
        got = await events_until(session, Stopped, within=15.0)
        assert call.stats.packets_dropped > call.stats.packets_in // 2, "50 packets a second against 10"
        assert any(isinstance(e, TransportError) and e.kind == "audio_flood" and e.fatal for e in got)
        assert await bounded(SystemClock(), 3.0, asyncio.shield(ran), "end") is EndReason.LIMIT


async def test_the_answer_offers_only_the_configured_addresses() -> None:
    clock = SystemClock()
    browser = BrowserPeer(clock)
    call = await answer_offer(await browser.offer(), clock=clock, config=WebRtcConfig(hosts=("127.0.0.1",)),
                              stats=WebRtcStats(), call_id="c4")
    try:
        candidates = [line.split()[4] for line in call.answer_sdp.splitlines() if line.startswith("a=candidate:")]
        assert candidates and set(candidates) == {"127.0.0.1"}, candidates
    finally:
        await call.close_peer()
        await browser.close()


async def test_rtp_timestamps_run_on_across_a_clear_and_the_new_encoders_audio_plays() -> None:
    async with webrtc_call() as (browser, call, session, _ran):
        await bounded(SystemClock(), 2.0, session.recv(), "started")
        (receiver,) = browser.pc.getReceivers()
        handle = receiver._handle_rtp_packet
        stamps: list[tuple[int, int]] = []

        async def record(packet: Any, arrival_time_ms: int) -> None:
            stamps.append((packet.sequence_number, packet.timestamp))
            await handle(packet, arrival_time_ms=arrival_time_ms)

        setattr(receiver, "_handle_rtp_packet", record)  # noqa: B010 - an instance override of aiortc's method
        clock = SystemClock()
        await session.send(SendAudio(OutputAudioFrame(epoch=0, pcm=tone(24000, 0.4), sample_rate=24000)))
        await clock.sleep(0.2)
        await session.send(Clear(1))
        await clock.sleep(0.1)
        heard_before = len(browser.heard)
        await session.send(SendAudio(OutputAudioFrame(epoch=1, pcm=tone(24000, 0.4, freq=300.0), sample_rate=24000)))
        await clock.sleep(0.6)
        assert call.track.encoder_resets == 1
        assert len(stamps) > 30
        for (seq0, ts0), (seq1, ts1) in itertools.pairwise(stamps):
            frames = (seq1 - seq0) % 2**16
            assert (ts1 - ts0) % 2**32 == frames * 960, "the timestamps advance 960 a packet, across the clear too"
        after = b"".join(pcm for _, pcm in browser.heard[heard_before:])
        assert rms(after) > 500, "the new encoder's audio reaches the browser"
