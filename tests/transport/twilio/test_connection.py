"""One Twilio call over an in-memory WebSocket: the adapter's own rules (the conformance suite
covers what every transport shares)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from brisvox.audio.g711 import ulaw_encode
from brisvox.core.clock import SimClock, bounded
from brisvox.core.errors import ChannelClosed
from brisvox.core.frames import OutputAudioFrame
from brisvox.core.tasks import TaskScope
from brisvox.transport.events import (
    CallFailure,
    FailureKind,
    WireAudio,
    WireAudioOut,
    WireClear,
    WireEvent,
    WireFault,
    WireHangupOut,
    WireLead,
    WireMark,
    WireMarkEcho,
    WireStarted,
)
from brisvox.transport.link import CallLink
from brisvox.transport.twilio import TwilioConfig, TwilioStats, run_call
from brisvox.transport.websocket import ServerConfig
from tests.transport.conformance._drivers import media_message, start_message
from tests.transport.conformance._peer import MemoryPeer

SID = "MZ1"


class Call:
    def __init__(self, clock: SimClock, peer: MemoryPeer, link: CallLink, stats: TwilioStats) -> None:
        self.clock, self.peer, self.link, self.stats = clock, peer, link, stats

    def events(self) -> list[WireEvent]:
        out: list[WireEvent] = []
        with contextlib.suppress(ChannelClosed):  # closed once the adapter stopped feeding
            while (ev := self.link.events.try_recv()) is not None:
                out.append(ev)
        return out

    def sent(self) -> list[dict[str, Any]]:
        out = []
        while self.peer.outbox:
            msg = self.peer.outbox.popleft()
            assert isinstance(msg, str)
            out.append(json.loads(msg))
        return out

    def echo(self, name: str) -> None:
        self.peer.push(json.dumps({"event": "mark", "streamSid": SID, "mark": {"name": name}}))


@asynccontextmanager
async def twilio_call(config: ServerConfig | None = None, twilio: TwilioConfig | None = None,
                      params: dict[str, str] | None = None) -> AsyncIterator[Call]:
    clock, peer, stats = SimClock(), MemoryPeer(), TwilioStats()
    got: asyncio.Future[CallLink] = asyncio.get_running_loop().create_future()

    async def deliver(link: CallLink) -> bool:
        got.set_result(link)
        return True

    async with TaskScope("twilio-test") as scope:
        task = scope.spawn(run_call(peer, clock=clock, config=config or ServerConfig(), twilio=twilio or TwilioConfig(),
                                    deliver=deliver, shutdown=asyncio.Event(), stats=stats), name="adapter")
        peer.push('{"event":"connected","protocol":"Call","version":"1.0.0"}')
        peer.push(json.dumps(start_message(SID, params, call_sid="CA9")))
        link = await bounded(clock, 1.0, got, "link")
        try:
            yield Call(clock, peer, link, stats)
        finally:
            link.ended.set()
            link.out.wake()
            peer.client_vanish()
            await bounded(clock, 5.0, task, "adapter end")


def bot(pcm: bytes, epoch: int = 0) -> WireAudioOut:
    return WireAudioOut(OutputAudioFrame(epoch=epoch, pcm=pcm, sample_rate=8000))


async def test_custom_parameters_reach_the_metadata_and_the_server_keys_win() -> None:
    params = {"agent": "demo", "carrier": "spoofed", "transport": "x", "sample_rate": "16000"}
    async with twilio_call(params=params) as call:
        started = call.events()[0]
        assert isinstance(started, WireStarted)
        info = started.info
        assert info.call_id == "CA9" and info.transport == "twilio"
        meta = dict(info.metadata)
        assert meta["agent"] == "demo"
        assert (meta["carrier"], meta["carrier_call_id"], meta["transport"]) == ("twilio", "CA9", "twilio")
        assert meta["stream_sid"] == SID and meta["sample_rate"] == "8000"


async def test_bot_audio_goes_out_in_160_byte_media_messages_with_progress_marks() -> None:
    async with twilio_call(twilio=TwilioConfig(progress_interval=0.1)) as call:
        call.events()
        pcm = b"\x10\x00" * 8000  # 1 s at 8 kHz
        await call.link.out.send(bot(pcm))
        await call.clock.sleep(0.01)
        sent = call.sent()
        media = [m for m in sent if m["event"] == "media"]
        assert len(media) == 50
        assert all(m["streamSid"] == SID for m in sent)
        assert "".join(m["media"]["payload"] for m in media[:1]) and all(
            len(m["media"]["payload"]) == 216 for m in media)  # base64 of 160 bytes
        marks = [m["mark"]["name"] for m in sent if m["event"] == "mark"]
        assert len(marks) == 10 and all(name.startswith("p") for name in marks)
        # Twilio played the first 0.5 s: the lead is the other 0.5 s.
        call.echo(marks[4])
        await call.clock.sleep(0.01)
        leads = [e.lead for e in call.events() if isinstance(e, WireLead)]
        assert leads == [0.5]
        assert call.stats.marks_echoed == 1 and call.stats.max_unplayed == 0.5


async def test_an_engine_mark_is_echoed_by_its_engine_id_and_a_flushed_one_never() -> None:
    async with twilio_call() as call:
        call.events()
        await call.link.out.send(bot(b"\x00\x00" * 160))
        await call.link.out.send(WireMark("first"))
        await call.link.out.send(WireMark("second"))
        await call.clock.sleep(0.01)
        names = [m["mark"]["name"] for m in call.sent() if m["event"] == "mark"]
        assert len(names) == 2 and not any("first" in n or "second" in n for n in names)
        call.echo(names[0])
        await call.clock.sleep(0.01)
        assert [e.id for e in call.events() if isinstance(e, WireMarkEcho)] == ["first"]
        await call.link.out.send(WireClear(1))
        await call.clock.sleep(0.01)
        assert [m["event"] for m in call.sent()] == ["clear"]
        call.echo(names[1])  # Twilio echoes the marks a clear flushed
        await call.clock.sleep(0.01)
        assert not [e for e in call.events() if isinstance(e, WireMarkEcho)]
        assert call.stats.marks_cut == 1 and call.stats.clears == 1


async def test_old_epoch_audio_after_a_clear_is_dropped() -> None:
    async with twilio_call() as call:
        await call.link.out.send(WireClear(2))
        await call.link.out.send(bot(b"\x00\x00" * 160, epoch=1))
        await call.link.out.send(bot(b"\x00\x00" * 160, epoch=2))
        await call.clock.sleep(0.01)
        assert [m["event"] for m in call.sent()] == ["clear", "media"]


async def test_caller_media_is_decoded_and_lost_chunks_are_counted() -> None:
    async with twilio_call() as call:
        call.events()
        for chunk in (1, 2, 5):
            call.peer.push(media_message(SID, ulaw_encode(b"\x00\x04" * 160), chunk))
        await call.clock.sleep(0.01)
        audio = [e for e in call.events() if isinstance(e, WireAudio)]
        assert [len(a.pcm) for a in audio] == [320] * 3 and all(a.sample_rate == 8000 for a in audio)
        assert call.stats.lost_chunks == 2 and call.stats.media_in == 3


async def test_bad_frames_are_faults_and_the_seventeenth_closes_the_call() -> None:
    async with twilio_call() as call:
        call.events()
        call.peer.push(b"\x00\x01")
        call.peer.push('{"event":"media","media":{"payload":"!!"}}')
        for _ in range(15):
            call.peer.push("not json")
        await call.clock.sleep(0.01)
        faults = [e for e in call.events() if isinstance(e, WireFault)]
        assert [f.kind for f in faults[:2]] == ["binary_frame", "invalid_media"]
        assert [f.fatal for f in faults] == [False] * 16 + [True]
        assert faults[-1].kind == "too_many_faults"
        assert call.peer.close_code == 1008


async def test_an_oversized_frame_closes_the_call_with_1009() -> None:
    async with twilio_call(config=ServerConfig(max_control_bytes=1024)) as call:
        call.events()
        call.peer.push(media_message(SID, b"\xff" * 1000, 1))
        await call.clock.sleep(0.01)
        assert [e.kind for e in call.events() if isinstance(e, WireFault)] == ["message_too_big"]
        assert call.peer.close_code == 1009


async def test_stop_is_a_hang_up_and_an_engine_hang_up_closes_normally() -> None:
    async with twilio_call() as call:
        call.events()
        call.peer.push('{"event":"dtmf","dtmf":{"digit":"7"}}')
        call.peer.push('{"event":"stop","stop":{}}')
        await call.clock.sleep(0.01)
        kinds = [type(e).__name__ for e in call.events()]
        assert kinds == ["WireDtmf", "WireHangup"]
    async with twilio_call() as call:
        await call.link.out.send(WireHangupOut())
        await call.clock.sleep(0.01)
        assert call.peer.close_code == 1000
    async with twilio_call() as call:
        await call.link.out.send(WireHangupOut(failure=CallFailure(FailureKind.INTERNAL_ERROR, "tts failed")))
        await call.clock.sleep(0.01)
        assert call.peer.close_code == 1011


async def test_bot_audio_at_another_rate_is_dropped_with_one_fault() -> None:
    async with twilio_call() as call:
        call.events()
        for _ in range(3):
            await call.link.out.send(WireAudioOut(OutputAudioFrame(epoch=0, pcm=b"\x00\x00" * 320, sample_rate=16000)))
        await call.clock.sleep(0.01)
        assert not call.sent()
        assert [e.kind for e in call.events() if isinstance(e, WireFault)] == ["output_rate_mismatch"]
        assert call.stats.output_rate_mismatches == 3


async def test_silence_from_twilio_past_the_idle_timeout_ends_the_call() -> None:
    async with twilio_call(config=ServerConfig(ping_interval=1.0, ping_timeout=3.0)) as call:
        call.events()
        await call.clock.sleep(4.0)
        assert [e.kind for e in call.events() if isinstance(e, WireFault)] == ["idle_timeout"]
        assert call.peer.close_code == 1008 and call.stats.idle_timeouts == 1


async def test_an_engine_that_reads_no_events_ends_the_call_as_overloaded() -> None:
    async with twilio_call(config=ServerConfig(send_timeout=2.0, ping_timeout=60.0)) as call:
        for _ in range(70):  # more key presses than the event queue holds, and nobody reads them
            call.peer.push('{"event":"dtmf","dtmf":{"digit":"1"}}')
        await call.clock.sleep(1.0)
        assert call.peer.close_code is None
        await call.clock.sleep(1.5)
        assert call.peer.close_code == 1013 and call.stats.faults == 1
        assert len(call.events()) == 64, "the queue the engine never read, then closed"


async def test_a_call_past_the_maximum_duration_is_closed() -> None:
    async with twilio_call(config=ServerConfig(max_call_duration=10.0, ping_timeout=60.0)) as call:
        call.events()
        for _ in range(12):
            call.peer.push(media_message(SID, b"\xff" * 160, 1))
            await call.clock.sleep(1.0)
        assert [e.kind for e in call.events() if isinstance(e, WireFault)] == ["max_duration"]
        assert call.peer.close_code == 1008


async def test_a_write_blocked_past_the_write_timeout_drops_the_connection() -> None:
    async with twilio_call(config=ServerConfig(write_timeout=2.0, ping_timeout=60.0, ping_interval=5.0)) as call:
        call.peer.unstalled.clear()
        await call.link.out.send(bot(b"\x00\x00" * 160))
        for _ in range(30):  # keep Twilio's side alive while the write is stuck
            call.peer.push(media_message(SID, b"\xff" * 160, 1))
            await call.clock.sleep(0.1)
        assert call.peer.aborted and call.stats.write_timeouts == 1


async def test_no_start_within_the_start_timeout_closes_with_1008() -> None:
    clock, peer, stats = SimClock(), MemoryPeer(), TwilioStats()

    async def deliver(link: CallLink) -> bool:
        raise AssertionError("no call without a start")

    await run_call(peer, clock=clock, config=ServerConfig(start_timeout=2.0), twilio=TwilioConfig(), deliver=deliver,
                   shutdown=asyncio.Event(), stats=stats)
    assert peer.close_code == 1008 and stats.refused_start == 1
    assert clock.now() >= 2.0


async def test_a_start_in_another_format_is_refused_before_the_engine_sees_it() -> None:
    clock, peer, stats = SimClock(), MemoryPeer(), TwilioStats()
    msg = start_message(SID)
    msg["start"]["mediaFormat"]["sampleRate"] = 16000
    peer.push(json.dumps(msg))

    async def deliver(link: CallLink) -> bool:
        raise AssertionError("refused before the engine")

    await run_call(peer, clock=clock, config=ServerConfig(), twilio=TwilioConfig(), deliver=deliver,
                   shutdown=asyncio.Event(), stats=stats)
    assert peer.close_code == 1008 and stats.refused_start == 1


async def test_an_engine_that_cannot_take_the_call_gets_1013() -> None:
    clock, peer, stats = SimClock(), MemoryPeer(), TwilioStats()
    peer.push(json.dumps(start_message(SID)))

    async def deliver(link: CallLink) -> bool:
        return False

    await run_call(peer, clock=clock, config=ServerConfig(), twilio=TwilioConfig(), deliver=deliver,
                   shutdown=asyncio.Event(), stats=stats)
    assert peer.close_code == 1013 and stats.refused_busy == 1


async def test_shutdown_closes_with_1001() -> None:
    clock, peer, stats = SimClock(), MemoryPeer(), TwilioStats()
    peer.push(json.dumps(start_message(SID)))
    shutdown = asyncio.Event()
    links: list[CallLink] = []

    async def deliver(link: CallLink) -> bool:
        links.append(link)
        shutdown.set()
        return True

    await bounded(clock, 5.0, run_call(peer, clock=clock, config=ServerConfig(), twilio=TwilioConfig(),
                                       deliver=deliver, shutdown=shutdown, stats=stats), "shutdown")
    assert peer.close_code == 1001 and links
    assert isinstance(links[0].events.try_recv(), WireStarted)


async def test_caller_media_faster_than_real_time_is_dropped_then_ends_the_call_as_a_flood() -> None:
    async with twilio_call() as call:
        call.events()
        frame = ulaw_encode(b"\x00\x04" * 160)  # 20 ms
        for chunk in range(600):  # 12 s of audio at once: the 2 s burst passes, the rest is over the rate
            call.peer.push(media_message(SID, frame, chunk))
        await call.clock.sleep(0.01)
        assert call.stats.audio_dropped > 0 and call.stats.audio_floods >= 1
        assert call.peer.close_code == 1008


async def test_caller_media_in_real_time_is_never_dropped() -> None:
    async with twilio_call() as call:
        frame = ulaw_encode(b"\x00\x04" * 160)
        for chunk in range(200):  # 4 s, one message every 20 ms
            call.peer.push(media_message(SID, frame, chunk))
            await call.clock.sleep(0.02)
        assert call.stats.media_in == 200 and call.stats.audio_dropped == 0 and call.peer.close_code is None
