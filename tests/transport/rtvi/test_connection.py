"""run_rtvi_call over a scripted WsPeer on virtual time: the engine gets the call at client-ready
(or a handshake-less client's first audio), marks are acknowledged from the playout estimate, bot
speaking is told, a clear cuts the estimate."""

from __future__ import annotations

import asyncio
import logging

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.frames import OutputAudioFrame, ReplyMode
from brisvox.transport.events import (
    CallInfo,
    WireAudio,
    WireAudioOut,
    WireClear,
    WireDtmf,
    WireHangup,
    WireHangupOut,
    WireMark,
    WireMarkEcho,
    WireStarted,
    WireText,
)
from brisvox.transport.rtvi import (
    InboundAudio,
    InboundMessage,
    RtviCall,
    RtviConfig,
    decode_frame,
    encode_audio,
    encode_message,
    run_rtvi_call,
)
from brisvox.transport.rtvi.connection import SPEAKING_HANGOVER
from brisvox.transport.websocket import ServerConfig, ServerStats
from tests.transport.websocket.test_connection import ScriptedPeer

READY = encode_message({"type": "client-ready", "id": "r1", "data": {"version": "2.1.0"}})


class Server:
    """One run_rtvi_call on virtual time; ``calls``: what ``deliver`` got (the engine's side)."""

    def __init__(self, peer: ScriptedPeer) -> None:
        self.clock = SimClock()
        self.stats = ServerStats()
        self.calls: list[RtviCall] = []
        self.delivered = asyncio.Event()
        self.task = asyncio.ensure_future(run_rtvi_call(
            peer, clock=self.clock, config=ServerConfig(), rtvi_config=RtviConfig(), deliver=self._deliver,
            shutdown=asyncio.Event(), stats=self.stats))

    async def _deliver(self, call: RtviCall) -> bool:
        self.calls.append(call)
        self.delivered.set()
        return True


async def serve_one(peer: ScriptedPeer) -> tuple[RtviCall, asyncio.Task[None], SimClock]:
    """A call the client made ready (its bot-ready already written and taken off ``peer.sent``)."""
    server = Server(peer)
    peer.incoming.put_nowait(READY)
    await server.delivered.wait()
    while "bot-ready" not in types(peer):
        await server.clock.sleep(0.001)
    peer.sent.clear()
    return server.calls[0], server.task, server.clock


def sent(peer: ScriptedPeer) -> list[InboundAudio | InboundMessage]:
    out: list[InboundAudio | InboundMessage] = []
    for data in peer.sent:
        assert isinstance(data, bytes), "a text frame"
        frame = decode_frame(data)
        assert isinstance(frame, InboundAudio | InboundMessage)
        out.append(frame)
    return out


def types(peer: ScriptedPeer) -> list[str]:
    return [f.type for f in sent(peer) if isinstance(f, InboundMessage)]


async def end(peer: ScriptedPeer, call: RtviCall, task: asyncio.Task[None]) -> None:
    await call.link.out.send(WireHangupOut())
    await asyncio.wait_for(task, 30)
    assert peer.closed_with == 1000


async def test_the_call_starts_at_client_ready_16k_in_24k_out_and_caller_audio_and_dtmf_reach_the_core() -> None:
    peer = ScriptedPeer()
    call, task, _clock = await serve_one(peer)
    started = await call.link.events.recv()
    assert isinstance(started, WireStarted)
    assert started.info.transport == "rtvi"
    assert (started.info.metadata[CallInfo.SAMPLE_RATE_KEY], started.info.metadata[CallInfo.OUTPUT_SAMPLE_RATE_KEY]) \
        == ("16000", "24000")
    peer.incoming.put_nowait(encode_audio(b"\x01\x00" * 320, 16000))
    peer.incoming.put_nowait(encode_message({"type": "dtmf", "id": "k", "data": {"buttons": ["4", "#"]}}))
    audio = await call.link.events.recv()
    assert isinstance(audio, WireAudio) and (audio.pcm, audio.sample_rate) == (b"\x01\x00" * 320, 16000)
    assert [await call.link.events.recv(), await call.link.events.recv()] == [WireDtmf("4", audio.at),
                                                                               WireDtmf("#", audio.at)]
    peer.incoming.put_nowait(encode_message({"type": "disconnect-bot", "id": "d"}))
    assert isinstance(await call.link.events.recv(), WireHangup)
    await end(peer, call, task)


async def test_a_mark_is_echoed_when_the_audio_before_it_has_played_by_the_estimate() -> None:
    peer = ScriptedPeer()
    call, task, clock = await serve_one(peer)
    assert isinstance(await call.link.events.recv(), WireStarted)
    t0 = clock.now()
    await call.link.out.send(WireAudioOut(OutputAudioFrame(pcm=b"\x10\x27" * 12000, sample_rate=24000, epoch=0)))  # 0.5 s
    await call.link.out.send(WireMark("m1"))
    echo = await call.link.events.recv()
    assert echo == WireMarkEcho("m1")
    assert 0.5 <= clock.now() - t0 < 0.55
    while "bot-stopped-speaking" not in types(peer):
        await clock.sleep(0.01)
    assert types(peer) == ["bot-started-speaking", "bot-stopped-speaking"]
    audio = [f for f in sent(peer) if isinstance(f, InboundAudio)]
    assert {a.sample_rate for a in audio} == {24000} and sum(len(a.pcm) for a in audio) == 24000
    await end(peer, call, task)


async def test_a_mark_is_echoed_at_the_moment_its_audio_has_played_not_on_a_later_tick() -> None:
    # the monitor used to look every 20 ms (50 task wake-ups a second per call, speaking or not);
    # it now wakes when the estimate says, so the echo and bot-stopped-speaking come on time
    peer = ScriptedPeer()
    call, task, clock = await serve_one(peer)
    assert isinstance(await call.link.events.recv(), WireStarted)
    t0 = clock.now()
    await call.link.out.send(WireAudioOut(OutputAudioFrame(pcm=bytes(12240 * 2), sample_rate=24000, epoch=0)))  # 0.51 s
    await call.link.out.send(WireMark("m1"))
    assert await call.link.events.recv() == WireMarkEcho("m1")
    assert clock.now() - t0 == pytest.approx(0.51, abs=1e-6)
    while "bot-stopped-speaking" not in types(peer):
        await clock.sleep(0.001)
    assert clock.now() - t0 == pytest.approx(0.51 + SPEAKING_HANGOVER, abs=0.0011)
    await end(peer, call, task)


async def test_a_clear_cuts_the_estimate_its_marks_are_not_echoed_and_later_audio_is_not_of_a_cut_epoch() -> None:
    peer = ScriptedPeer()
    call, task, clock = await serve_one(peer)
    assert isinstance(await call.link.events.recv(), WireStarted)
    await call.link.out.send(WireAudioOut(OutputAudioFrame(pcm=bytes(48000 * 2), sample_rate=24000, epoch=0)))  # 2 s
    await call.link.out.send(WireMark("cut"))
    await clock.sleep(0.1)
    await call.link.out.send(WireClear(1))
    await call.link.out.send(WireAudioOut(OutputAudioFrame(pcm=bytes(480), sample_rate=24000, epoch=0)))  # epoch 0: stale
    await clock.sleep(0.1)
    assert types(peer) == ["bot-started-speaking", "bot-stopped-speaking"]
    await clock.sleep(3.0)
    assert call.link.events.try_recv() is None  # no echo of the cut mark
    assert sum(len(f.pcm) for f in sent(peer) if isinstance(f, InboundAudio)) == 96000
    await end(peer, call, task)


async def test_bot_audio_paced_frame_by_frame_is_one_bot_speaking_span_not_one_per_frame() -> None:
    # main flapped: real-time pacing leaves the estimate empty between frames, and the client
    # got bot-started-speaking / bot-stopped-speaking every 20 ms.
    peer = ScriptedPeer()
    call, task, clock = await serve_one(peer)
    assert isinstance(await call.link.events.recv(), WireStarted)
    t0 = clock.now()
    for i in range(25):  # 0.5 s in 20 ms frames, each sent when the one before has played
        await clock.sleep_until(t0 + i * 0.02)
        await call.link.out.send(WireAudioOut(OutputAudioFrame(pcm=bytes(960), sample_rate=24000, epoch=0)))
    await clock.sleep(0.3)
    assert types(peer) == ["bot-started-speaking"]
    await clock.sleep(0.1)
    assert types(peer) == ["bot-started-speaking", "bot-stopped-speaking"]
    assert 0.5 + SPEAKING_HANGOVER <= clock.now() - t0 < 0.5 + SPEAKING_HANGOVER + 0.1
    await end(peer, call, task)


async def test_a_clear_says_bot_stopped_speaking_at_once() -> None:
    peer = ScriptedPeer()
    call, task, clock = await serve_one(peer)
    assert isinstance(await call.link.events.recv(), WireStarted)
    await call.link.out.send(WireAudioOut(OutputAudioFrame(pcm=bytes(48000), sample_rate=24000, epoch=0)))
    await clock.sleep(0.2)
    await call.link.out.send(WireClear(1))
    for _ in range(5):
        await asyncio.sleep(0)  # no virtual time passes
    assert types(peer) == ["bot-started-speaking", "bot-stopped-speaking"]
    await end(peer, call, task)


async def test_send_text_is_a_typed_turn_and_audio_response_false_asks_for_a_text_only_answer() -> None:
    peer = ScriptedPeer()
    call, task, clock = await serve_one(peer)
    assert isinstance(await call.link.events.recv(), WireStarted)
    for i, options in enumerate(({"audio_response": False}, {}, {"audio_response": True, "run_immediately": True})):
        peer.incoming.put_nowait(encode_message({"type": "send-text", "id": f"t{i}",
                                                 "data": {"content": f"hello {i}", "options": options}}))
    typed = [await call.link.events.recv() for _ in range(3)]
    assert [(t.text, t.reply) for t in typed if isinstance(t, WireText)] == [
        ("hello 0", ReplyMode.TEXT), ("hello 1", ReplyMode.SPOKEN), ("hello 2", ReplyMode.SPOKEN)]
    await clock.sleep(0.1)
    assert types(peer) == []  # taken, not answered with an error-response
    await end(peer, call, task)


async def test_send_text_that_asks_not_to_run_now_is_refused_with_an_error_response_and_is_no_turn() -> None:
    peer = ScriptedPeer()
    call, task, clock = await serve_one(peer)
    assert isinstance(await call.link.events.recv(), WireStarted)
    peer.incoming.put_nowait(encode_message({"type": "send-text", "id": "later",
                                             "data": {"content": "x", "options": {"run_immediately": False}}}))
    while not types(peer):
        await clock.sleep(0.01)
    (answer,) = [f for f in sent(peer) if isinstance(f, InboundMessage)]
    assert (answer.type, answer.id) == ("error-response", "later") and "run_immediately" in answer.data["error"]
    assert call.link.events.try_recv() is None
    await end(peer, call, task)


async def test_the_engine_gets_the_call_only_at_client_ready_and_bot_ready_is_written_before_anything_else() -> None:
    peer = ScriptedPeer()
    server = Server(peer)
    await server.clock.sleep(2.0)
    assert not server.calls and server.stats.calls_started == 0  # connected, not ready: no engine yet
    peer.incoming.put_nowait(READY)
    await server.delivered.wait()
    call = server.calls[0]
    assert isinstance(await call.link.events.recv(), WireStarted)
    await call.link.out.send(WireAudioOut(OutputAudioFrame(pcm=bytes(960), sample_rate=24000, epoch=0)))  # a greeting
    while not any(isinstance(f, InboundAudio) for f in sent(peer)):
        await server.clock.sleep(0.01)
    first = sent(peer)[0]
    assert isinstance(first, InboundMessage) and (first.type, first.id) == ("bot-ready", "r1")
    assert server.stats.calls_started == 1
    await end(peer, call, server.task)


async def test_a_client_on_another_major_version_is_answered_bot_ready_and_a_warning_is_logged(
        caplog: pytest.LogCaptureFixture) -> None:
    peer = ScriptedPeer()
    server = Server(peer)
    with caplog.at_level(logging.WARNING, logger="brisvox.transport.rtvi.connection"):
        peer.incoming.put_nowait(encode_message({"type": "client-ready", "id": "old", "data": {"version": "1.4.0"}}))
        await server.delivered.wait()
        while "bot-ready" not in types(peer):
            await server.clock.sleep(0.001)
    ready = next(f for f in sent(peer) if isinstance(f, InboundMessage) and f.type == "bot-ready")
    assert ready.id == "old" and ready.data["version"] == "2.1.0"
    assert any("RTVI 1.4.0" in r.getMessage() and "compatibility" in r.getMessage() for r in caplog.records)
    await end(peer, server.calls[0], server.task)


async def test_a_client_without_the_handshake_starts_the_call_with_its_first_audio_which_reaches_the_engine() -> None:
    peer = ScriptedPeer()
    server = Server(peer)
    peer.incoming.put_nowait(encode_audio(b"\x02\x00" * 320, 16000))  # what the density client sends first
    await server.delivered.wait()
    call = server.calls[0]
    assert isinstance(await call.link.events.recv(), WireStarted)
    audio = await call.link.events.recv()
    assert isinstance(audio, WireAudio) and audio.pcm == b"\x02\x00" * 320
    await end(peer, server.calls[0], server.task)


async def test_a_client_never_ready_is_closed_at_the_start_timeout_and_the_engine_never_sees_it() -> None:
    peer = ScriptedPeer()
    server = Server(peer)
    peer.incoming.put_nowait(encode_message({"type": "client-message", "id": "m", "data": {"t": "x"}}))
    await asyncio.wait_for(server.task, 30)
    assert server.clock.now() >= ServerConfig().start_timeout - 1e-6
    assert not server.calls and server.stats.calls_started == 0 and server.stats.refused_start == 1
    assert peer.closed_with == 1008
    (error,) = [f for f in sent(peer) if isinstance(f, InboundMessage) and f.type == "error"]
    assert error.data["fatal"] is True and "client-ready" in error.data["error"]


async def test_disconnect_bot_before_client_ready_closes_the_connection_normally_without_the_engine() -> None:
    peer = ScriptedPeer()
    server = Server(peer)
    peer.incoming.put_nowait(encode_message({"type": "disconnect-bot", "id": "bye"}))
    await asyncio.wait_for(server.task, 30)
    assert peer.closed_with == 1000 and not server.calls
    assert server.clock.now() < 1.0
