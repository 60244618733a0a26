"""run_rtvi_call over a scripted WsPeer on virtual time: the call starts at connect, marks are
acknowledged from the playout estimate, bot speaking is told, a clear cuts the estimate."""

from __future__ import annotations

import asyncio

from brisvox.core.clock import SimClock
from brisvox.core.frames import OutputAudioFrame
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


async def serve_one(peer: ScriptedPeer) -> tuple[RtviCall, asyncio.Task[None], SimClock]:
    clock = SimClock()
    calls: list[RtviCall] = []
    delivered = asyncio.Event()

    async def deliver(call: RtviCall) -> bool:
        calls.append(call)
        delivered.set()
        return True

    task = asyncio.ensure_future(run_rtvi_call(peer, clock=clock, config=ServerConfig(), rtvi_config=RtviConfig(),
                                               deliver=deliver, shutdown=asyncio.Event(), stats=ServerStats()))
    await delivered.wait()
    return calls[0], task, clock


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


async def test_the_call_starts_at_connect_16k_in_24k_out_and_caller_audio_and_dtmf_reach_the_core() -> None:
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


async def test_send_text_is_a_typed_turn_and_a_text_only_request_is_told_it_will_be_spoken() -> None:
    peer = ScriptedPeer()
    call, task, _clock = await serve_one(peer)
    assert isinstance(await call.link.events.recv(), WireStarted)
    peer.incoming.put_nowait(encode_message({"type": "send-text", "id": "t1",
                                             "data": {"content": "hello", "options": {"audio_response": False}}}))
    typed = await call.link.events.recv()
    assert isinstance(typed, WireText) and typed.text == "hello"
    (answer,) = [f for f in sent(peer) if isinstance(f, InboundMessage)]
    assert answer.type == "error-response" and answer.id == "t1" and "audio_response" in answer.data["error"]
    assert answer.data["fatal"] is False
    await end(peer, call, task)
