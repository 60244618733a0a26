"""One Telnyx stream over an in-memory WebSocket, driven by the simulator: the adapter's own
rules (the conformance suite covers what every transport shares)."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from brisvox.audio.g711 import ulaw_decode
from brisvox.core.clock import SimClock, bounded
from brisvox.core.errors import ChannelClosed
from brisvox.core.frames import OutputAudioFrame
from brisvox.core.secret import Secret
from brisvox.core.tasks import TaskScope
from brisvox.transport.events import (
    WireAudio,
    WireAudioOut,
    WireClear,
    WireDtmf,
    WireEvent,
    WireFault,
    WireHangup,
    WireHangupOut,
    WireMark,
    WireStarted,
)
from brisvox.transport.link import CallLink
from brisvox.transport.telephony import b64decode
from brisvox.transport.telnyx import CallRegistry, TelnyxConfig, TelnyxStats, run_call
from brisvox.transport.websocket import ServerConfig
from tests.transport.conformance._peer import MemoryPeer
from tests.transport.telnyx import sim


class Stream:
    def __init__(self, clock: SimClock, peer: MemoryPeer, stats: TelnyxStats, task: asyncio.Task[None],
                 links: list[CallLink]) -> None:
        self.clock, self.peer, self.stats, self.task, self.links = clock, peer, stats, task, links

    @property
    def link(self) -> CallLink:
        return self.links[0]

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

    async def settle(self, seconds: float = 0.3) -> None:
        await self.clock.sleep(seconds)

    async def ended(self) -> None:
        await bounded(self.clock, 10.0, asyncio.shield(self.task), "adapter end")


@asynccontextmanager
async def stream(*frames: str, telnyx: TelnyxConfig | None = None, registry: CallRegistry | None = None,
                 header_ok: bool = False, accept: bool = True,
                 stats: TelnyxStats | None = None) -> AsyncIterator[Stream]:
    clock, peer = SimClock(), MemoryPeer()
    stats = stats if stats is not None else TelnyxStats()
    links: list[CallLink] = []

    async def deliver(link: CallLink) -> bool:
        links.append(link)
        return accept

    async with TaskScope("telnyx-test") as scope:
        task = scope.spawn(run_call(peer, clock=clock, config=ServerConfig(), telnyx=telnyx or TelnyxConfig(),
                                    deliver=deliver, shutdown=asyncio.Event(), stats=stats,
                                    registry=registry if registry is not None else CallRegistry(),
                                    header_ok=header_ok), name="adapter")
        for frame in frames:
            peer.push(frame)
        await clock.sleep(0.05)
        try:
            yield Stream(clock, peer, stats, task, links)
        finally:
            for link in links:
                link.ended.set()
                link.out.wake()
            peer.client_vanish()
            await bounded(clock, 10.0, task, "adapter end")


def _frame_pcm(value: int) -> bytes:
    """20 ms whose every sample is ``value`` (so a frame is recognisable after the codec)."""
    return value.to_bytes(2, "little", signed=True) * 160


def _bot(pcm: bytes, epoch: int = 0) -> WireAudioOut:
    return WireAudioOut(OutputAudioFrame(epoch=epoch, pcm=pcm, sample_rate=8000))


async def test_shuffled_and_duplicated_media_reaches_the_engine_in_order() -> None:
    caller = sim.Caller(shuffle=True, seed=3)
    values = [1000 * (i + 1) for i in range(12)]
    frames = caller.audio(b"".join(_frame_pcm(v) for v in values))
    async with stream(sim.connected(), sim.start(), *frames) as s:
        await s.settle()
        audio = [ev for ev in s.events() if isinstance(ev, WireAudio)]
        got = [int.from_bytes(ev.pcm[:2], "little", signed=True) for ev in audio]
        assert [round(g / 1000) for g in got] == [round(v / 1000) for v in values]
        s.peer.push(sim.stop(caller.next_sequence()))
        await s.settle()
    assert s.stats.media_duplicate == caller.duplicated > 0
    assert s.stats.media_reordered > 0 and s.stats.media_lost == 0


async def test_call_metadata_names_the_carrier_and_call() -> None:
    async with stream(sim.connected(), sim.start()) as s:
        started = s.events()[0]
        assert isinstance(started, WireStarted)
        meta = started.info.metadata
        assert meta["carrier"] == "telnyx" and meta["carrier_call_id"] == sim.CALL_CONTROL_ID
        assert started.info.call_id == sim.CALL_CONTROL_ID


async def test_a_gap_is_given_up_after_the_reorder_timeout_on_the_injected_clock() -> None:
    caller = sim.Caller()
    frames = caller.audio(_frame_pcm(1000) * 3)
    async with stream(sim.connected(), sim.start(), frames[0], frames[2],
                      telnyx=TelnyxConfig(reorder_timeout=0.2)) as s:
        audio = [ev for ev in s.events() if isinstance(ev, WireAudio)]
        assert len(audio) == 1  # chunk 3 waits for 2
        await s.settle(0.3)
        assert len([ev for ev in s.events() if isinstance(ev, WireAudio)]) == 1
        s.peer.push(frames[1])  # too late now
        await s.settle(0.05)
        assert s.events() == []
        s.peer.push(sim.stop(9))
        await s.settle()
    assert s.stats.media_late == 1 and s.stats.media_lost == 1


async def test_dtmf_reaches_the_engine_in_sequence_order() -> None:
    async with stream(sim.connected(), sim.start(), sim.dtmf("2", 8), sim.dtmf("1", 7), sim.dtmf("3", 9)) as s:
        await s.settle()
        assert [ev.digit for ev in s.events() if isinstance(ev, WireDtmf)] == ["1", "2", "3"]
        s.peer.push(sim.stop(10))
        await s.settle()
    assert s.stats.dtmf_reordered == 1


async def test_unsupported_codec_is_refused_before_the_engine_and_the_call_hung_up() -> None:
    hung: list[str] = []

    async def hangup(call_control_id: str) -> None:
        hung.append(call_control_id)

    async with stream(sim.connected(), sim.start(encoding="L16", sample_rate=16000),
                      telnyx=TelnyxConfig(hangup=hangup)) as s:
        await s.ended()
        assert s.links == [] and s.peer.close_code == 1008
    assert hung == [sim.CALL_CONTROL_ID]


async def test_a_wrong_auth_token_in_connected_is_refused_and_the_engine_never_sees_it() -> None:
    config = TelnyxConfig(auth_token=Secret("right-token"))
    async with stream(sim.connected("wrong-token"), sim.start(), telnyx=config) as s:
        await s.ended()
        assert s.links == [] and s.peer.close_code == 1008 and s.stats.refused_auth == 1
    async with stream(sim.connected(), sim.start(), telnyx=config) as s:
        await s.ended()
        assert s.links == []


async def test_the_auth_token_in_connected_or_the_upgrade_header_admits_the_stream() -> None:
    config = TelnyxConfig(auth_token=Secret("right-token"))
    async with stream(sim.connected("right-token"), sim.start(), telnyx=config) as s:
        assert len(s.links) == 1
    async with stream(sim.connected(), sim.start(), telnyx=config, header_ok=True) as s:
        assert len(s.links) == 1


async def test_a_second_stream_for_the_same_call_is_refused_even_after_the_first_ended() -> None:
    registry = CallRegistry()
    stats = TelnyxStats()
    async with stream(sim.connected(), sim.start(), registry=registry, stats=stats) as first:
        async with stream(sim.connected(), sim.start(), registry=registry, stats=stats) as second:
            await second.ended()
            assert second.links == [] and second.peer.close_code == 1008
        assert len(first.links) == 1
    async with stream(sim.connected(), sim.start(), registry=registry, stats=stats) as third:
        await third.ended()
        assert third.links == []
    assert stats.duplicate_calls_refused == 2


async def test_a_busy_engine_lets_the_retry_in() -> None:
    registry = CallRegistry()
    async with stream(sim.connected(), sim.start(), registry=registry, accept=False) as s:
        await s.ended()
        assert s.peer.close_code == 1013
    async with stream(sim.connected(), sim.start(), registry=registry) as s:
        assert s.peer.close_code is None and len(s.links) == 1


async def test_engine_hangup_calls_the_hook_before_the_close_frame() -> None:
    order: list[str] = []

    async def hangup(call_control_id: str) -> None:
        order.append(f"hangup {call_control_id} close={s.peer.close_code}")

    async with stream(sim.connected(), sim.start(), telnyx=TelnyxConfig(hangup=hangup)) as s:
        s.link.out.try_send(WireHangupOut())
        await s.ended()
        assert s.peer.close_code == 1000
    assert order == [f"hangup {sim.CALL_CONTROL_ID} close=None"]
    assert s.stats.hangups_requested == 1


async def test_no_hangup_after_telnyx_stop() -> None:
    calls: list[str] = []

    async def hangup(call_control_id: str) -> None:
        calls.append(call_control_id)

    async with stream(sim.connected(), sim.start(), sim.stop(3), telnyx=TelnyxConfig(hangup=hangup)) as s:
        await s.settle()
        assert any(isinstance(ev, WireHangup) for ev in s.events())
    assert calls == [] and s.stats.hangups_requested == 0


async def test_a_stuck_hangup_hook_is_bounded_and_counted() -> None:
    async def hangup(call_control_id: str) -> None:
        await asyncio.Event().wait()

    async def failing(call_control_id: str) -> None:
        raise RuntimeError("telnyx api down")

    for hook in (hangup, failing):
        hook_fn: Callable[[str], Awaitable[None]] = hook
        async with stream(sim.connected(), sim.start(), telnyx=TelnyxConfig(hangup=hook_fn, hangup_timeout=1.0)) as s:
            s.link.out.try_send(WireHangupOut())
            await s.ended()
            assert s.peer.close_code == 1000
        assert s.stats.hangups_failed == 1


async def test_a_tail_under_20ms_is_carried_padded_before_a_mark_and_dropped_by_clear() -> None:
    async with stream(sim.connected(), sim.start()) as s:
        s.link.out.try_send(_bot((_frame_pcm(2000) * 2)[: 250 * 2]))  # 31.25 ms
        await s.settle(0.05)
        sent = s.sent()
        assert [len(b64decode(m["media"]["payload"])) for m in sent] == [160]
        s.link.out.try_send(WireMark("m1"))
        await s.settle(0.05)
        media, mark = s.sent()
        padded = b64decode(media["media"]["payload"])
        assert len(padded) == 160 and padded[90:] == b"\xff" * 70
        assert abs(int.from_bytes(ulaw_decode(padded[:1]), "little", signed=True)) > 1000
        assert mark["event"] == "mark"
        s.link.out.try_send(_bot(_frame_pcm(2000)[: 100 * 2]))
        s.link.out.try_send(WireClear(1))
        s.link.out.try_send(_bot(_frame_pcm(2000)[: 100 * 2], epoch=1))
        await s.settle(0.05)
        assert [m["event"] for m in s.sent()] == ["clear"]  # the carried 100 was dropped; 100 new is carried


async def test_a_carried_tail_goes_out_in_front_of_the_next_audio_in_20ms_pieces() -> None:
    async with stream(sim.connected(), sim.start()) as s:
        for _ in range(3):  # 30 ms each: 160 out + 80 carried, then 160 + 160, then 160 + 80 carried
            s.link.out.try_send(_bot((_frame_pcm(2000) * 2)[: 240 * 2]))
        await s.settle(0.05)
        assert [len(b64decode(m["media"]["payload"])) for m in s.sent()] == [160, 160, 160, 160]
        assert not s.task.done()


async def test_telnyx_error_frames_are_faults_that_do_not_end_the_call() -> None:
    errors = [sim.error(100003, 3 + i) for i in range(40)]
    async with stream(sim.connected(), sim.start(), *errors) as s:
        await s.settle()
        faults = [ev for ev in s.events() if isinstance(ev, WireFault)]
        assert len(faults) == 40 and not any(f.fatal for f in faults)
        assert s.peer.close_code is None
    assert s.stats.telnyx_errors == 40


async def test_caller_media_faster_than_real_time_is_dropped_in_its_place_then_ends_the_call() -> None:
    caller = sim.Caller()
    frames = caller.audio(b"".join(_frame_pcm(100) for _ in range(600)))  # 12 s at once
    async with stream(sim.connected(), sim.start(), *frames) as s:
        await s.settle()
        assert s.stats.audio_dropped > 0 and s.stats.audio_floods >= 1
        assert s.stats.media_lost == 0  # a dropped chunk still fills its place: no gap is waited for
        assert s.peer.close_code == 1008
