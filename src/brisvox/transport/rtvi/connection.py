"""One RTVI call over one accepted WebSocket connection.

:func:`run_rtvi_call` is the RTVI twin of :func:`brisvox.transport.websocket.run_call`: the
same :class:`~brisvox.transport.websocket.WsPeer`, :class:`ServerConfig` limits and
:class:`ServerStats`, the same three tasks in one :class:`~brisvox.core.tasks.TaskScope`
(reader, writer, monitor), but Pipecat's framing: every WebSocket message is one binary
protobuf ``Frame`` (:mod:`~brisvox.transport.rtvi.wire`), and the client never sends a
``start``.  The call starts when the socket opens: caller audio at
:attr:`RtviConfig.input_rate` (16 kHz), bot audio at :attr:`RtviConfig.output_rate` (24 kHz:
the JS client plays at 24 kHz whatever the frame says), both in the call metadata.

What the transport answers itself: ``client-ready`` (``bot-ready`` with the request id; a
client on another major version gets a warning in the log), ``disconnect-bot`` (the
caller hangs up), ``dtmf`` (one WireDtmf per key), ``send-text`` and Pipecat's text frames
(a WireText: the engine takes it as a typed turn), a malformed or unknown message
(``error-response``).  The application's messages (``client-message``, ``ui-event``) go to :attr:`RtviCall.requests` (bounded; a full queue answers
``error-response``).  The application sends RTVI messages with :meth:`RtviCall.send`.

Browsers report no playout, so marks are acknowledged from a playout estimate on the
injected clock: bot audio is taken to play in real time from when it was written (after
what was already queued), and a mark is echoed when the audio before it has played.  The
same estimate gives ``bot-started-speaking`` (first audio after silence) and
``bot-stopped-speaking`` (:data:`SPEAKING_HANGOVER` after the estimate ran out, or at once when
a clear cut it).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from brisvox.core.channel import WAKE, Channel
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import ChannelClosed, DeadlineExceeded
from brisvox.core.tasks import TaskScope
from brisvox.transport.events import (
    CallInfo,
    WireAudio,
    WireAudioOut,
    WireClear,
    WireDtmf,
    WireEvent,
    WireFault,
    WireHangup,
    WireHangupOut,
    WireMark,
    WireMarkEcho,
    WireNote,
    WireStarted,
    WireText,
)
from brisvox.transport.link import CallEnds, CallLink, call_pair
from brisvox.transport.rtvi import protocol as rtvi
from brisvox.transport.rtvi.wire import (
    InboundAudio,
    InboundMessage,
    WireError,
    decode_frame,
    encode_audio,
    encode_message,
)
from brisvox.transport.websocket.config import ServerConfig
from brisvox.transport.websocket.connection import PeerClosed, WsPeer
from brisvox.transport.websocket.protocol import CloseCode, ErrorCode
from brisvox.transport.websocket.stats import ServerStats

__all__ = ["REQUESTS_CAPACITY", "SPEAKING_HANGOVER", "RtviCall", "RtviConfig", "run_rtvi_call"]

log = logging.getLogger(__name__)

REQUESTS_CAPACITY = 16
OUTBOX_CAPACITY = 64
MARK_TICK = 0.02  # seconds between checks of the playout estimate
SPEAKING_HANGOVER = 0.35
"""Seconds past the playout estimate before ``bot-stopped-speaking`` (as Pipecat's server waits):
bot audio paced in real time would otherwise start and stop the bot every frame."""
AUDIO_CHUNK_SAMPLES = 24_000 // 10 * 4  # bot audio goes out in frames of at most this many samples

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class RtviConfig:
    input_rate: int = 16_000
    output_rate: int = 24_000
    about: dict[str, Any] = field(default_factory=lambda: {"library": "brisvox"})


@dataclass(frozen=True, slots=True, eq=False)
class RtviCall:
    """What the application gets for one RTVI call besides the link."""

    link: CallLink
    requests: Channel[rtvi.RtviRequest]
    send: Callable[[dict[str, Any]], Awaitable[None]]
    post: Callable[[dict[str, Any]], bool]  # queue without waiting: False when full, ChannelClosed when over
    note: Callable[[str], Awaitable[None]]  # a note for the model's context that opens no turn (WireNote)


async def run_rtvi_call(
    peer: WsPeer,
    *,
    clock: Clock,
    config: ServerConfig,
    rtvi_config: RtviConfig,
    deliver: Callable[[RtviCall], Awaitable[bool]],
    shutdown: asyncio.Event,
    stats: ServerStats,
    register: Callable[[CallEnds], Callable[[], None]] | None = None,
) -> None:
    """Serve one RTVI call over ``peer`` until it ends (see the module docs)."""
    call_id = f"rtvi-{next(_ids)}-{uuid.uuid4().hex[:8]}"
    info = CallInfo(call_id=call_id, transport="rtvi", metadata={
        CallInfo.SAMPLE_RATE_KEY: str(rtvi_config.input_rate),
        CallInfo.OUTPUT_SAMPLE_RATE_KEY: str(rtvi_config.output_rate),
        "encoding": "pcm16",
        "peer_addr": peer.remote,
    })
    link, ends = call_pair(info)
    ends.events.try_send(WireStarted(info))
    call = _Call(peer, clock, config, rtvi_config, ends, shutdown, stats)
    try:
        if not await deliver(RtviCall(link, call.requests, call.send, call.post, call.note)):
            stats.refused_busy += 1
            await call.goodbye(CloseCode.TRY_AGAIN, rtvi.error("the server cannot take the call now", fatal=True))
            return
        unregister = register(ends) if register is not None else None
        stats.calls_started += 1
        try:
            await call.run()
        finally:
            ends.events.close()
            ends.out.close()
            call.requests.close()
            if unregister is not None:
                unregister()
    except (PeerClosed, DeadlineExceeded, ChannelClosed):
        pass


@dataclass(slots=True)
class _Fatal:
    close: CloseCode
    code: ErrorCode
    message: str


class _Call:
    def __init__(self, peer: WsPeer, clock: Clock, config: ServerConfig, rtvi_config: RtviConfig, ends: CallEnds,
                 shutdown: asyncio.Event, stats: ServerStats) -> None:
        self.peer, self.clock, self.cfg, self.rcfg = peer, clock, config, rtvi_config
        self.ends, self.shutdown, self.stats = ends, shutdown, stats
        self.requests: Channel[rtvi.RtviRequest] = Channel(REQUESTS_CAPACITY, name="rtvi requests")
        self.outbox: Channel[bytes] = Channel(OUTBOX_CAPACITY, name="rtvi outbox")
        self.last_seen = self.last_audio = self.started_at = clock.now()
        self.seq = itertools.count()
        self.faults = 0
        self.feeding = True
        self.peer_gone = False
        self.fatal: _Fatal | None = None
        self.writing_since: float | None = None
        # the playout estimate: when the audio written so far will have played, and the marks behind it
        self.play_end = self.last_seen
        self.speaking = False
        self.marks: deque[tuple[float, str]] = deque()

    async def send(self, message: dict[str, Any]) -> None:
        """Queue one RTVI message for the writer; raises PeerClosed when the call is over or the
        writer stays blocked for ``write_timeout``."""
        data = encode_message(message)
        try:
            if not self.outbox.try_send(data):
                await bounded(self.clock, self.cfg.write_timeout, self.outbox.send(data), "rtvi message")
        except (ChannelClosed, DeadlineExceeded):
            raise PeerClosed(by_peer=False) from None
        self.ends.out.wake()

    def post(self, message: dict[str, Any]) -> bool:
        """Queue one message without waiting: False when the outbox is full; raises ChannelClosed
        when the call is over."""
        queued = self.outbox.try_send(encode_message(message))
        self.ends.out.wake()
        return queued

    async def note(self, text: str) -> None:
        await self._lossless(WireNote(text, self.clock.now()))

    def _reply(self, message: dict[str, Any]) -> None:
        if not self.post(message):
            log.info("rtvi call %s: a reply was dropped (outbox full)", self.ends.info.call_id)

    async def run(self) -> None:
        async with TaskScope(f"rtvi[{self.ends.info.call_id}]") as scope:
            reader = scope.spawn(self._reader(), name="reader")
            writer = scope.spawn(self._writer(), name="writer")
            scope.spawn(self._monitor(), name="monitor")
            await writer
            self.outbox.close()
            if not reader.done():
                with contextlib.suppress(DeadlineExceeded):
                    await bounded(self.clock, self.cfg.close_grace, asyncio.shield(reader), "close handshake")
            scope.cancel()

    # --- reader ----------------------------------------------------------------------------

    async def _reader(self) -> None:
        limit = self.cfg.max_audio_bytes + self.cfg.max_control_bytes
        while True:
            try:
                msg = await self.peer.recv()
            except PeerClosed as exc:
                self._peer_closed(exc)
                return
            self.last_seen = self.clock.now()
            if not self.feeding:
                continue
            self.stats.frames_in += 1
            if isinstance(msg, str):
                await self._fault(ErrorCode.MALFORMED_MESSAGE, "RTVI messages travel in binary protobuf frames")
                continue
            if len(msg) > limit:
                self._request_fatal(CloseCode.TOO_BIG, ErrorCode.MESSAGE_TOO_BIG, f"a frame is over {limit} bytes")
                continue
            try:
                frame = decode_frame(msg)
            except WireError as exc:
                await self._fault(ErrorCode.MALFORMED_MESSAGE, exc.message)
                continue
            if isinstance(frame, InboundAudio):
                self.last_audio = self.last_seen
                if not self.ends.events.closed:
                    self.ends.events.try_send(WireAudio(frame.pcm, frame.sample_rate, next(self.seq), self.last_seen))
            elif isinstance(frame, InboundMessage):
                await self._request(frame)
            elif frame.text.strip():  # a TextFrame/TranscriptionFrame: what a Python Pipecat client types
                await self._lossless(WireText(frame.text[:4096], self.last_seen))

    async def _request(self, msg: InboundMessage) -> None:
        try:
            req = rtvi.parse_request(msg)
        except rtvi.RtviViolation as exc:
            self._reply(rtvi.error_response(exc.request_id, exc.message))
            await self._fault(ErrorCode.UNKNOWN_TYPE, exc.message, notify=False)
            return
        if isinstance(req, rtvi.ClientReady):
            if not rtvi.compatible(req.version):
                log.warning("rtvi call %s: the client speaks RTVI %s, this server %s; compatibility issues may occur",
                            self.ends.info.call_id, req.version[:32], rtvi.PROTOCOL_VERSION)
            self._reply(rtvi.bot_ready(req.id, self.rcfg.about))
        elif isinstance(req, rtvi.DisconnectBot):
            await self._lossless(WireHangup())
            self.feeding = False
            self.ends.events.close()
        elif isinstance(req, rtvi.DtmfKeys):
            for key in req.buttons:
                await self._lossless(WireDtmf(key, self.last_seen))
        elif isinstance(req, rtvi.SendText):
            if not req.audio_response:  # told, not silently ignored: the answer is still spoken
                self._reply(rtvi.error_response(req.id, "send-text: audio_response false is not supported; "
                                                        "the answer is spoken"))
            if req.content.strip():
                await self._lossless(WireText(req.content, self.last_seen))
        else:
            await self._queue_request(req)

    async def _queue_request(self, req: rtvi.RtviRequest) -> None:
        if not self.requests.try_send(req):
            self._reply(rtvi.error_response(getattr(req, "id", None), "the server is busy: request dropped"))

    def _peer_closed(self, exc: PeerClosed) -> None:
        self.peer_gone = True
        events = self.ends.events
        if self.feeding and not events.closed:
            if exc.code in (CloseCode.PROTOCOL_ERROR, 1007, CloseCode.TOO_BIG):
                self.stats.faults += 1
                events.try_send(WireFault(ErrorCode.PROTOCOL_ERROR.value,
                                          f"the WebSocket layer closed the connection ({exc.code})", True))
            elif exc.by_peer:
                events.try_send(WireHangup())
        self.feeding = False
        events.close()
        self.ends.out.wake()

    async def _lossless(self, ev: WireEvent) -> None:
        events = self.ends.events
        if events.closed:
            return
        try:
            if not events.try_send(ev):
                await bounded(self.clock, self.cfg.send_timeout, events.send(ev), "event hand-off")
        except DeadlineExceeded:
            self._request_fatal(CloseCode.TRY_AGAIN, ErrorCode.OVERLOADED, "the engine does not keep up")
        except ChannelClosed:
            pass

    async def _fault(self, code: ErrorCode, message: str, *, notify: bool = True) -> None:
        self.faults += 1
        self.stats.faults += 1
        if self.faults > self.cfg.max_faults:
            self._request_fatal(CloseCode.POLICY, ErrorCode.TOO_MANY_FAULTS,
                                f"more than {self.cfg.max_faults} faults in this call")
            return
        if notify:
            self._reply(rtvi.error(message, fatal=False))
        await self._lossless(WireFault(code.value, message, False))

    def _request_fatal(self, close: CloseCode, code: ErrorCode, message: str) -> None:
        if self.fatal is not None:
            return
        self.fatal = _Fatal(close, code, message)
        self.stats.faults += 1
        log.info("rtvi call %s: closing with %s (%d): %s", self.ends.info.call_id, code.value, int(close), message)
        events = self.ends.events
        if self.feeding and not events.closed:
            events.try_send(WireFault(code.value, message, True))
        self.feeding = False
        events.close()
        self.ends.out.wake()

    # --- writer ----------------------------------------------------------------------------

    async def _write(self, data: bytes) -> None:
        self.writing_since = self.clock.now()
        try:
            await self.peer.send(data)
        finally:
            self.writing_since = None

    async def goodbye(self, close: CloseCode, last: dict[str, Any] | None = None) -> None:
        self.stats.closes[int(close)] = self.stats.closes.get(int(close), 0) + 1
        try:
            if last is not None:
                await self._write(encode_message(last))
            await bounded(self.clock, self.cfg.close_grace * 2, self.peer.close(close, ""), "close")
        except (PeerClosed, DeadlineExceeded):
            self.peer.abort()

    async def _writer(self) -> None:
        out, ended = self.ends.out, self.ends.ended
        floor = 0
        try:
            while True:
                while (data := self.outbox.try_recv()) is not None:
                    await self._write(data)
                if self.fatal is not None:
                    await self.goodbye(self.fatal.close, rtvi.error(self.fatal.message, fatal=True))
                    return
                if self.peer_gone:
                    return
                if self.shutdown.is_set():
                    await self.goodbye(CloseCode.GOING_AWAY, rtvi.error("the server shuts down", fatal=True))
                    return
                if ended.is_set() and not out:
                    await self.goodbye(CloseCode.NORMAL)
                    return
                try:
                    got = await out.recv_or_wake()
                except ChannelClosed:
                    return
                if got is WAKE:
                    continue
                if isinstance(got, WireAudioOut):
                    if got.frame.epoch >= floor:
                        await self._audio(got.frame.pcm, got.frame.sample_rate)
                elif isinstance(got, WireClear):
                    floor = max(floor, got.epoch)
                    self._cut()
                elif isinstance(got, WireMark):
                    self.marks.append((self.play_end, got.id))
                elif isinstance(got, WireHangupOut):
                    while (data := self.outbox.try_recv()) is not None:
                        await self._write(data)
                    if got.failure is None:
                        await self.goodbye(CloseCode.NORMAL)
                    else:
                        self.stats.faults += 1
                        await self.goodbye(CloseCode.INTERNAL_ERROR, rtvi.error(got.failure.message, fatal=True))
                    return
        except PeerClosed:
            self.peer_gone = True

    async def _audio(self, pcm: bytes, rate: int) -> None:
        now = self.clock.now()
        if not self.speaking:
            self.speaking = True
            await self._write(encode_message(rtvi.message("bot-started-speaking")))
        step = AUDIO_CHUNK_SAMPLES * 2
        for i in range(0, len(pcm), step):
            await self._write(encode_audio(pcm[i:i + step], rate))
        self.play_end = max(self.play_end, now) + len(pcm) / 2 / rate
        self.stats.frames_out += 1

    def _cut(self) -> None:
        """A clear: the client dropped what it queued (on ``user-started-speaking``); the cut marks
        are the session's to report."""
        self.marks.clear()
        self.play_end = self.clock.now()
        if self.speaking:  # said now, not at the next tick: the client's player is cut now
            self.speaking = False
            self._reply(rtvi.message("bot-stopped-speaking"))

    # --- monitor ---------------------------------------------------------------------------

    async def _monitor(self) -> None:
        cfg, clock = self.cfg, self.clock
        next_ping = clock.now() + cfg.ping_interval
        while True:
            await clock.sleep(MARK_TICK)
            now = clock.now()
            await self._playout(now)
            since = self.writing_since
            if since is not None and now - since > cfg.write_timeout:
                log.info("rtvi call %s: a write was blocked for %.1f s; dropping the client",
                         self.ends.info.call_id, now - since)
                self.stats.write_timeouts += 1
                self.peer.abort()
                return
            if self.shutdown.is_set():
                self.ends.out.wake()
            if self.fatal is None and now - self.last_seen > cfg.ping_timeout:
                self.stats.ping_timeouts += 1
                self._request_fatal(CloseCode.POLICY, ErrorCode.PING_TIMEOUT,
                                    f"nothing from the client for {cfg.ping_timeout:g} s")
            elif self.fatal is None and now - self.last_audio > cfg.idle_timeout:
                self.stats.idle_timeouts += 1
                self._request_fatal(CloseCode.POLICY, ErrorCode.IDLE_TIMEOUT, f"no caller audio for {cfg.idle_timeout:g} s")
            elif self.fatal is None and now - self.started_at > cfg.max_call_duration:
                self.stats.duration_limits += 1
                self._request_fatal(CloseCode.POLICY, ErrorCode.MAX_DURATION,
                                    f"the call reached its maximum duration of {cfg.max_call_duration:g} s")
            elif now >= next_ping:
                next_ping = now + cfg.ping_interval
                try:
                    pong = await bounded(clock, MARK_TICK * 5, self.peer.ping(), "ping")
                except (PeerClosed, DeadlineExceeded):
                    continue
                asyncio.ensure_future(pong).add_done_callback(self._on_pong)

    async def _playout(self, now: float) -> None:
        """Echo the marks whose audio has played; say when the bot's audio ran out."""
        while self.marks and self.marks[0][0] <= now:
            await self._lossless(WireMarkEcho(self.marks.popleft()[1]))
        if self.speaking and now >= self.play_end + SPEAKING_HANGOVER:
            self.speaking = False
            self._reply(rtvi.message("bot-stopped-speaking"))

    def _on_pong(self, fut: asyncio.Future[object]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self.last_seen = self.clock.now()
