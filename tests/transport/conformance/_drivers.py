"""One driver per transport for the conformance suite.

A driver opens one call and returns a :class:`Caller` (the client's side, the same five
verbs for every transport) and the engine's :class:`TransportSession`.  The caller
records what it heard (bot audio as PCM16 at the call's rate, with the time), the marks
and clears it received, and echoes every mark as soon as it arrives (after the audio
before it, as a carrier does when it has played it).  A new transport (Telnyx, WebRTC,
RTVI) joins the suite by adding a driver to :data:`DRIVERS`; ``fuzz_frames`` gives
hypothesis the strategy for that transport's inbound messages.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any, Protocol

from hypothesis import strategies as st

from brisvox.audio.g711 import ulaw_decode, ulaw_encode
from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed
from brisvox.core.tasks import TaskScope
from brisvox.transport import LoopbackClient, LoopbackTransport, TransportSession
from brisvox.transport.events import WireAudioOut, WireClear, WireHangupOut, WireMark
from brisvox.transport.link import CallLink
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
from brisvox.transport.telephony import b64decode, b64encode
from brisvox.transport.telnyx import CallRegistry, TelnyxConfig, TelnyxStats
from brisvox.transport.telnyx import run_call as run_telnyx_call
from brisvox.transport.twilio import TwilioConfig, TwilioStats
from brisvox.transport.twilio import run_call as run_twilio_call
from brisvox.transport.websocket import ServerConfig, ServerStats
from brisvox.transport.websocket import run_call as run_ws_call
from tests.transport.conformance._peer import MemoryPeer
from tests.transport.telnyx import sim as telnyx_sim


@dataclass
class Caller:
    """The client's side of one call, whatever the transport."""

    rate: int
    send_audio: Callable[[bytes], Coroutine[Any, Any, None]]
    send_dtmf: Callable[[str], Coroutine[Any, Any, None]]
    hangup: Callable[[], Coroutine[Any, Any, None]]
    disconnect: Callable[[], None]
    send_raw: Callable[[bytes | str], Coroutine[Any, Any, None]]
    heard: list[tuple[float, bytes]] = field(default_factory=list)
    marks: list[str] = field(default_factory=list)
    clears: list[float] = field(default_factory=list)
    ended: asyncio.Event = field(default_factory=asyncio.Event)

    def heard_pcm(self) -> bytes:
        return b"".join(pcm for _, pcm in self.heard)


class Driver(Protocol):
    name: str
    rate: int  # the caller's audio
    out_rate: int  # the bot's audio

    def open(self, clock: SimClock) -> Any:  # an async context manager of (Caller, TransportSession)
        ...

    def fuzz_frames(self) -> st.SearchStrategy[Any]: ...


async def _session(clock: SimClock, link: asyncio.Future[CallLink]) -> TransportSession:
    return await TransportSession.open(clock, await link)


# --- loopback ------------------------------------------------------------------------------


class LoopbackDriver:
    name = "loopback"
    rate = out_rate = 16000

    @asynccontextmanager
    async def open(self, clock: SimClock) -> AsyncIterator[tuple[Caller, TransportSession]]:
        async with LoopbackTransport(clock) as transport, TaskScope("loopback-caller") as scope:
            client = await transport.connect()
            session = await TransportSession.open(clock, await transport.accept())
            caller = Caller(self.rate, lambda pcm: client.send_audio(pcm, self.rate), client.send_dtmf, client.hangup,
                            client.disconnect, lambda raw: _loopback_raw(client, raw))
            scope.spawn(self._read(clock, client, caller), name="caller")
            try:
                yield caller, session
            finally:
                await session.close()
                scope.cancel()

    async def _read(self, clock: SimClock, client: LoopbackClient, caller: Caller) -> None:
        try:
            while True:
                h = await client.recv()
                if isinstance(h.item, WireAudioOut):
                    caller.heard.append((h.at, h.item.frame.pcm))
                elif isinstance(h.item, WireMark):
                    caller.marks.append(h.item.id)
                    await client.echo_mark(h.item.id)
                elif isinstance(h.item, WireClear):
                    caller.clears.append(h.at)
                elif isinstance(h.item, WireHangupOut):
                    break
        except ChannelClosed:
            pass
        caller.ended.set()

    def fuzz_frames(self) -> st.SearchStrategy[Any]:
        return st.one_of(st.binary(max_size=700), st.text(max_size=40))


async def _loopback_raw(client: LoopbackClient, raw: bytes | str) -> None:
    """The loopback's inbound "messages" are wire events: audio of any length, any DTMF text, any echo."""
    if isinstance(raw, bytes):
        await client.send_audio(raw, 16000)
    elif raw[:1] == "d":
        await client.send_dtmf(raw[1:])
    else:
        await client.echo_mark(raw)


# --- over a WebSocket (generic and Twilio) -------------------------------------------------


class _WsLike:
    name = ""
    rate = out_rate = 0

    def _run(self, clock: SimClock, peer: MemoryPeer, deliver: Callable[[CallLink], Coroutine[Any, Any, bool]],
             shutdown: asyncio.Event) -> Coroutine[Any, Any, None]:
        raise NotImplementedError

    def _start(self, peer: MemoryPeer) -> None:
        raise NotImplementedError

    async def _on_message(self, clock: SimClock, peer: MemoryPeer, caller: Caller, msg: bytes | str) -> None:
        raise NotImplementedError

    def _caller(self, peer: MemoryPeer) -> Caller:
        raise NotImplementedError

    @asynccontextmanager
    async def open(self, clock: SimClock) -> AsyncIterator[tuple[Caller, TransportSession]]:
        peer = MemoryPeer()
        got: asyncio.Future[CallLink] = asyncio.get_running_loop().create_future()

        async def deliver(link: CallLink) -> bool:
            got.set_result(link)
            return True

        async with TaskScope(f"{self.name}-call") as scope:
            shutdown = asyncio.Event()
            scope.spawn(self._run(clock, peer, deliver, shutdown), name="adapter")
            self._start(peer)
            session = await _session(clock, got)
            caller = self._caller(peer)
            scope.spawn(self._read(clock, peer, caller), name="caller")
            scope.spawn(self._playout(clock, peer), name="playout")
            try:
                yield caller, session
            finally:
                await session.close()
                peer.client_vanish()
                scope.cancel()

    async def _playout(self, clock: SimClock, peer: MemoryPeer) -> None:
        """A client that plays what it receives (Twilio) echoes marks from here."""

    async def _read(self, clock: SimClock, peer: MemoryPeer, caller: Caller) -> None:
        while (msg := await peer.pull()) is not None:
            await self._on_message(clock, peer, caller, msg)
        caller.ended.set()


class WebSocketDriver(_WsLike):
    name = "websocket"
    rate = out_rate = 16000

    def _run(self, clock: SimClock, peer: MemoryPeer, deliver: Callable[[CallLink], Coroutine[Any, Any, bool]],
             shutdown: asyncio.Event) -> Coroutine[Any, Any, None]:
        return run_ws_call(peer, clock=clock, config=ServerConfig(), deliver=deliver, shutdown=shutdown,
                           stats=ServerStats())

    def _start(self, peer: MemoryPeer) -> None:
        peer.push(json.dumps({"type": "start", "sample_rate": self.rate}))

    def _caller(self, peer: MemoryPeer) -> Caller:
        async def audio(pcm: bytes) -> None:
            peer.push(pcm)

        async def dtmf(digit: str) -> None:
            peer.push(json.dumps({"type": "dtmf", "digit": digit}))

        async def hangup() -> None:
            peer.push('{"type":"stop"}')

        async def raw(data: bytes | str) -> None:
            peer.push(data)

        return Caller(self.rate, audio, dtmf, hangup, peer.client_vanish, raw)

    async def _on_message(self, clock: SimClock, peer: MemoryPeer, caller: Caller, msg: bytes | str) -> None:
        if isinstance(msg, bytes):
            caller.heard.append((clock.now(), msg))
            return
        body = json.loads(msg)
        if body["type"] == "mark":
            caller.marks.append(body["id"])
            peer.push(json.dumps({"type": "mark", "id": body["id"]}))
        elif body["type"] == "clear":
            caller.clears.append(clock.now())

    def fuzz_frames(self) -> st.SearchStrategy[Any]:
        control = st.fixed_dictionaries({"type": st.sampled_from(["dtmf", "mark", "stop", "start", "x", ""])},
                                        optional={"digit": st.text(max_size=3), "id": st.text(max_size=300)})
        return st.one_of(st.binary(max_size=700), st.text(max_size=80), control.map(json.dumps))


class TwilioDriver(_WsLike):
    name = "twilio"
    rate = out_rate = 8000
    stream_sid = "MZ00000000000000000000000000000001"

    def __init__(self, twilio: TwilioConfig | None = None, *, buffer: float = 0.0) -> None:
        self.twilio = twilio or TwilioConfig()
        self.stats = TwilioStats()
        self.chunk = 0
        # Twilio's side: audio plays in real time, ``buffer`` seconds after it arrives (the
        # phone network's buffer); a mark is echoed when the audio before it has played, and a
        # clear flushes the unplayed audio (``flushed``: its seconds, per clear) and echoes
        # every pending mark at once.
        self.buffer = buffer
        self.played_until = 0.0
        self.pending: list[tuple[float, str]] = []
        self.flushed: list[float] = []

    async def _playout(self, clock: SimClock, peer: MemoryPeer) -> None:
        while True:
            await clock.sleep(0.005)
            while self.pending and self.pending[0][0] <= clock.now():
                self._echo(peer, self.pending.pop(0)[1])

    def _echo(self, peer: MemoryPeer, name: str) -> None:
        peer.push(json.dumps({"event": "mark", "streamSid": self.stream_sid, "sequenceNumber": "5",
                              "mark": {"name": name}}))

    def _run(self, clock: SimClock, peer: MemoryPeer, deliver: Callable[[CallLink], Coroutine[Any, Any, bool]],
             shutdown: asyncio.Event) -> Coroutine[Any, Any, None]:
        return run_twilio_call(peer, clock=clock, config=ServerConfig(), twilio=self.twilio, deliver=deliver,
                               shutdown=shutdown, stats=self.stats)

    def _start(self, peer: MemoryPeer) -> None:
        peer.push(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
        peer.push(json.dumps(start_message(self.stream_sid)))

    def _caller(self, peer: MemoryPeer) -> Caller:
        async def audio(pcm: bytes) -> None:
            mulaw = ulaw_encode(pcm)
            for i in range(0, len(mulaw), 160):
                self.chunk += 1
                peer.push(media_message(self.stream_sid, mulaw[i:i + 160], self.chunk))

        async def dtmf(digit: str) -> None:
            peer.push(json.dumps({"event": "dtmf", "streamSid": self.stream_sid, "sequenceNumber": "9",
                                  "dtmf": {"track": "inbound_track", "digit": digit}}))

        async def hangup() -> None:
            peer.push(json.dumps({"event": "stop", "streamSid": self.stream_sid, "sequenceNumber": "99",
                                  "stop": {"accountSid": "AC1", "callSid": "CA1"}}))

        async def raw(data: bytes | str) -> None:
            peer.push(data)

        return Caller(self.rate, audio, dtmf, hangup, peer.client_vanish, raw)

    async def _on_message(self, clock: SimClock, peer: MemoryPeer, caller: Caller, msg: bytes | str) -> None:
        assert isinstance(msg, str), "Twilio takes text frames only"
        body = json.loads(msg)
        assert body["streamSid"] == self.stream_sid
        if body["event"] == "media":
            pcm = ulaw_decode(b64decode(body["media"]["payload"]))
            caller.heard.append((clock.now(), pcm))
            self.played_until = max(self.played_until, clock.now() + self.buffer) + len(pcm) / 2 / self.rate
        elif body["event"] == "mark":
            caller.marks.append(body["mark"]["name"])
            self.pending.append((max(self.played_until, clock.now()), body["mark"]["name"]))
        elif body["event"] == "clear":
            caller.clears.append(clock.now())
            self.flushed.append(max(0.0, self.played_until - clock.now()))
            self.played_until = clock.now()
            for _, name in self.pending:
                self._echo(peer, name)  # Twilio echoes the flushed marks too
            self.pending.clear()
        else:
            raise AssertionError(f"Twilio takes no {body['event']!r} message")

    def fuzz_frames(self) -> st.SearchStrategy[Any]:
        numbers = st.one_of(st.integers(-5, 10**12), st.text(max_size=6), st.none(), st.booleans())
        media = st.fixed_dictionaries({"event": st.just("media"), "media": st.fixed_dictionaries(
            {"payload": st.one_of(st.binary(max_size=400).map(b64encode), st.text(max_size=40))},
            optional={"chunk": numbers, "timestamp": numbers, "track": st.sampled_from(["inbound", "outbound", 3])})})
        other = st.fixed_dictionaries(
            {"event": st.sampled_from(["mark", "dtmf", "stop", "start", "connected", "clear", "x"])},
            optional={"mark": st.fixed_dictionaries({}, optional={"name": st.one_of(st.text(max_size=300), numbers)}),
                      "dtmf": st.fixed_dictionaries({}, optional={"digit": st.text(max_size=2)}),
                      "start": st.just(start_message(self.stream_sid)["start"])})
        return st.one_of(media.map(json.dumps), other.map(json.dumps), st.text(max_size=80), st.binary(max_size=40))


def start_message(stream_sid: str, params: dict[str, str] | None = None, call_sid: str = "CA1") -> dict[str, Any]:
    """Twilio's ``start`` as its docs show it (numbers as strings, except sampleRate and channels)."""
    return {"event": "start", "sequenceNumber": "1", "streamSid": stream_sid,
            "start": {"accountSid": "AC1", "streamSid": stream_sid, "callSid": call_sid, "tracks": ["inbound"],
                      "customParameters": params or {},
                      "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}


def media_message(stream_sid: str, mulaw: bytes, chunk: int) -> str:
    return json.dumps({"event": "media", "sequenceNumber": str(chunk + 1), "streamSid": stream_sid,
                       "media": {"track": "inbound", "chunk": str(chunk), "timestamp": str(chunk * 20),
                                 "payload": b64encode(mulaw)}})


class TelnyxDriver(TwilioDriver):
    """Telnyx over the simulator (tests/transport/telnyx/sim.py): it plays what it receives and
    echoes marks after the audio before them, like Twilio; caller audio is shuffled and
    duplicated (the adapter's reorder buffer puts it back in order)."""

    name = "telnyx"

    def __init__(self, telnyx: TelnyxConfig | None = None, shuffle: bool = True, *, buffer: float = 0.0) -> None:
        super().__init__(buffer=buffer)
        self.telnyx = telnyx or TelnyxConfig()
        self.telnyx_stats = TelnyxStats()
        self.registry = CallRegistry()
        self.sim = telnyx_sim.Caller(shuffle=shuffle)

    def _echo(self, peer: MemoryPeer, name: str) -> None:
        peer.push(telnyx_sim.mark(name, self.sim.next_sequence()))

    def _run(self, clock: SimClock, peer: MemoryPeer, deliver: Callable[[CallLink], Coroutine[Any, Any, bool]],
             shutdown: asyncio.Event) -> Coroutine[Any, Any, None]:
        return run_telnyx_call(peer, clock=clock, config=ServerConfig(), telnyx=self.telnyx, deliver=deliver,
                               shutdown=shutdown, stats=self.telnyx_stats, registry=self.registry)

    def _start(self, peer: MemoryPeer) -> None:
        peer.push(telnyx_sim.connected())
        peer.push(telnyx_sim.start())

    def _caller(self, peer: MemoryPeer) -> Caller:
        async def audio(pcm: bytes) -> None:
            for frame in self.sim.audio(pcm):
                peer.push(frame)

        async def dtmf(digit: str) -> None:
            peer.push(telnyx_sim.dtmf(digit, self.sim.next_sequence()))

        async def hangup() -> None:
            peer.push(telnyx_sim.stop(self.sim.next_sequence()))

        async def raw(data: bytes | str) -> None:
            peer.push(data)

        return Caller(self.rate, audio, dtmf, hangup, peer.client_vanish, raw)

    async def _on_message(self, clock: SimClock, peer: MemoryPeer, caller: Caller, msg: bytes | str) -> None:
        assert isinstance(msg, str), "Telnyx takes text frames only"
        body = json.loads(msg)
        assert "stream_id" not in body, "Telnyx's schemas forbid extra properties"
        if body["event"] == "media":
            assert 160 <= len(b64decode(body["media"]["payload"])) <= 240000, "Telnyx takes 20 ms to 30 s"
            body["streamSid"] = self.stream_sid
        elif body["event"] in ("mark", "clear"):
            body["streamSid"] = self.stream_sid
        await super()._on_message(clock, peer, caller, json.dumps(body))

    def fuzz_frames(self) -> st.SearchStrategy[Any]:
        numbers = st.one_of(st.integers(-5, 10**12), st.text(max_size=6), st.none(), st.booleans())
        media = st.fixed_dictionaries({"event": st.just("media"), "media": st.fixed_dictionaries(
            {"payload": st.one_of(st.binary(max_size=400).map(b64encode), st.text(max_size=40))},
            optional={"chunk": numbers, "timestamp": numbers, "track": st.sampled_from(["inbound", "outbound", 3])})},
            optional={"sequence_number": numbers})
        other = st.fixed_dictionaries(
            {"event": st.sampled_from(["mark", "dtmf", "stop", "start", "connected", "clear", "error", "x"])},
            optional={"mark": st.fixed_dictionaries({}, optional={"name": st.one_of(st.text(max_size=300), numbers)}),
                      "dtmf": st.fixed_dictionaries({}, optional={"digit": st.text(max_size=2)}),
                      "sequence_number": numbers,
                      "payload": st.fixed_dictionaries({}, optional={"code": numbers, "title": numbers}),
                      "start": st.just(json.loads(telnyx_sim.start())["start"])})
        return st.one_of(media.map(json.dumps), other.map(json.dumps), st.text(max_size=80), st.binary(max_size=40))


class RtviDriver(_WsLike):
    """Pipecat's JS client as the conformance suite sees it: one protobuf Frame per binary
    message, caller audio at 16 kHz, bot audio at 24 kHz.  RTVI has no marks and no clear on
    the wire: the adapter acknowledges marks from its playout estimate, and a clear shows as
    ``bot-stopped-speaking`` sooner than ``SPEAKING_HANGOVER`` after the audio received has
    played (what this client records as a clear)."""

    name = "rtvi"
    rate = 16000
    out_rate = 24000

    def __init__(self) -> None:
        self.played_until = 0.0

    def _run(self, clock: SimClock, peer: MemoryPeer, deliver: Callable[[CallLink], Coroutine[Any, Any, bool]],
             shutdown: asyncio.Event) -> Coroutine[Any, Any, None]:
        async def take(call: RtviCall) -> bool:
            return await deliver(call.link)

        return run_rtvi_call(peer, clock=clock, config=ServerConfig(), rtvi_config=RtviConfig(), deliver=take,
                             shutdown=shutdown, stats=ServerStats())

    def _start(self, peer: MemoryPeer) -> None:
        peer.push(encode_message({"type": "client-ready", "id": "r1", "data": {"version": "2.1.0"}}))

    def _caller(self, peer: MemoryPeer) -> Caller:
        async def audio(pcm: bytes) -> None:
            peer.push(encode_audio(pcm, self.rate))

        async def dtmf(digit: str) -> None:
            peer.push(encode_message({"type": "dtmf", "id": "d", "data": {"buttons": [digit]}}))

        async def hangup() -> None:
            peer.push(encode_message({"type": "disconnect-bot", "id": "bye"}))

        async def raw(data: bytes | str) -> None:
            peer.push(data)

        return Caller(self.rate, audio, dtmf, hangup, peer.client_vanish, raw)

    async def _on_message(self, clock: SimClock, peer: MemoryPeer, caller: Caller, msg: bytes | str) -> None:
        assert isinstance(msg, bytes), "the JS client throws on a text frame"
        frame = decode_frame(msg)
        if isinstance(frame, InboundAudio):
            assert frame.sample_rate == self.out_rate
            caller.heard.append((clock.now(), frame.pcm))
            self.played_until = max(self.played_until, clock.now()) + len(frame.pcm) / 2 / frame.sample_rate
            return
        assert isinstance(frame, InboundMessage), f"a frame kind the JS client does not know: {frame!r}"
        if frame.type == "bot-stopped-speaking" and clock.now() < self.played_until + SPEAKING_HANGOVER - 1e-6:
            caller.clears.append(clock.now())
            self.played_until = clock.now()

    def fuzz_frames(self) -> st.SearchStrategy[Any]:
        json_ = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                             lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids,
                                                                                        max_size=3), max_leaves=8)
        types = st.sampled_from(["client-ready", "disconnect-bot", "client-message", "send-text", "dtmf", "ui-event",
                                 "x"])
        message = st.fixed_dictionaries({"type": types}, optional={"id": json_, "data": json_}).map(encode_message)
        audio = st.builds(encode_audio, st.binary(max_size=640), st.sampled_from([16000, 24000, 0, 8000]))
        return st.one_of(message, audio, st.binary(max_size=80), st.text(max_size=40))


DRIVERS: dict[str, Callable[[], Driver]] = {
    "loopback": LoopbackDriver,
    "websocket": WebSocketDriver,
    "twilio": TwilioDriver,
    "telnyx": TelnyxDriver,
    "rtvi": RtviDriver,
}

# The WebRTC driver imports Caller from this module, so it joins last.
from tests.transport.conformance._webrtc import WebRtcDriver  # noqa: E402

DRIVERS["webrtc"] = WebRtcDriver
