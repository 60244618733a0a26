"""One RTVI call over one accepted WebSocket connection.

:func:`run_rtvi_call` is the RTVI twin of :func:`brisvox.transport.websocket.run_call`: the
same :class:`~brisvox.transport.websocket.WsPeer`, :class:`ServerConfig` limits,
:class:`ServerStats` and shared loop (:mod:`brisvox.transport.websocket.loop`: reader,
writer, monitor), but Pipecat's framing: every WebSocket message is one binary
protobuf ``Frame`` (:mod:`~brisvox.transport.rtvi.wire`).  Caller audio at
:attr:`RtviConfig.input_rate` (16 kHz), bot audio at :attr:`RtviConfig.output_rate` (24 kHz:
the JS client plays at 24 kHz whatever the frame says), both in the call metadata.

The engine gets the call (``deliver``) when the client is ready, as Pipecat's bots wait for
it: at ``client-ready`` (after ``bot-ready`` is queued, so the greeting follows it), or at the
first audio or text frame of a client that sends no RTVI handshake (Pipecat's Python clients
and the density client stream audio at once; the JS client queues its microphone until it
sent ``client-ready``).  The loop (reader, writer, monitor and their limits) runs from
connect; a client that is not ready within ``ServerConfig.start_timeout`` (the ``/ws``
route's deadline for its ``start``) is closed with a fatal ``error`` (``start_timeout``,
1008) and counted in ``ServerStats.refused_start``; the engine never saw it.  A
``disconnect-bot`` before that ends the connection (1000).

What the transport answers itself: ``client-ready`` (``bot-ready`` with the request id; a
client on another major version gets a warning in the log), ``disconnect-bot`` (the
caller hangs up), ``dtmf`` (one WireDtmf per key), ``send-text`` and Pipecat's text frames
(a WireText: the engine takes it as a typed turn; ``audio_response: false`` asks for a
text-only answer, ``ReplyMode.TEXT``; ``run_immediately: false`` is refused), a malformed or
unknown message (``error-response``).  The application's messages (``client-message``, ``ui-event``) go to :attr:`RtviCall.requests` (bounded; a full queue answers
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
import enum
import itertools
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from brisvox.core.channel import Channel
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import ChannelClosed, DeadlineExceeded
from brisvox.core.frames import OutputAudioFrame
from brisvox.transport.events import (
    CallFailure,
    CallInfo,
    WireDtmf,
    WireHangup,
    WireMarkEcho,
    WireNote,
    WireText,
)
from brisvox.transport.link import CallEnds, CallLink
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
from brisvox.transport.websocket.loop import Ending, PeerClosed, WsCall, WsPeer
from brisvox.transport.websocket.protocol import CloseCode, ErrorCode
from brisvox.transport.websocket.stats import ServerStats

__all__ = ["REQUESTS_CAPACITY", "SPEAKING_HANGOVER", "RtviCall", "RtviConfig", "run_rtvi_call"]

log = logging.getLogger(__name__)

REQUESTS_CAPACITY = 16
OUTBOX_CAPACITY = 64
PING_BOUND = 0.1  # seconds a ping's write may take
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
    call = _RtviCall(peer, clock, config, info, shutdown, stats, rtvi_config, deliver)
    await call.host(_hosted(), register)


async def _hosted() -> bool:
    """The connection is hosted at once; the engine gets the call when the client is ready."""
    return True


class _RtviCall(WsCall[ServerStats]):
    label = "rtvi"

    def __init__(self, peer: WsPeer, clock: Clock, config: ServerConfig, info: CallInfo, shutdown: asyncio.Event,
                 stats: ServerStats, rtvi_config: RtviConfig, deliver: Callable[[RtviCall], Awaitable[bool]]) -> None:
        super().__init__(peer, clock, config, info, shutdown, stats, out_rate=None)  # bot audio at any rate
        self.rcfg = rtvi_config
        self.deliver = deliver
        self.ready = asyncio.Event()  # the client is ready: the engine gets the call
        self.delivered = False
        self.requests: Channel[rtvi.RtviRequest] = Channel(REQUESTS_CAPACITY, name="rtvi requests")
        self.outbox: Channel[bytes] = Channel(OUTBOX_CAPACITY, name="rtvi outbox")
        # the playout estimate: when the audio written so far will have played, and the marks behind it
        self.play_end = self.last_seen
        self.speaking = False
        self.marks: deque[tuple[float, str]] = deque()

    def count_started(self) -> None:
        """Counted when the engine takes the call (:meth:`_start`), not at connect."""

    def extra_tasks(self) -> dict[str, Coroutine[Any, Any, None]]:
        return {"start": self._start()}

    async def _start(self) -> None:
        """Hand the call to the engine once the client is ready (see the module docs)."""
        limit = self.cfg.start_timeout
        try:
            await bounded(self.clock, limit, self.ready.wait(), "client-ready")
        except DeadlineExceeded:
            self.stats.refused_start += 1
            self.request_fatal(CloseCode.POLICY, ErrorCode.START_TIMEOUT,
                               f"no client-ready (and no audio) within {limit:g} s")
            return
        if self.fatal is not None or self.ends.ended.is_set():
            return
        self.delivered = True
        if not await self.deliver(RtviCall(self.link, self.requests, self.send, self.post, self.note)):
            self.stats.refused_busy += 1
            self.request_fatal(CloseCode.TRY_AGAIN, ErrorCode.SERVER_BUSY, "the server cannot take the call now")
            return
        super().count_started()

    def ping_bound(self) -> float:
        return PING_BOUND

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
        await self.lossless(WireNote(text, self.clock.now()))

    def _reply(self, message: dict[str, Any]) -> None:
        if not self.post(message):
            log.info("rtvi call %s: a reply was dropped (outbox full)", self.call_id)

    async def refuse_busy(self) -> None:
        await self.close(CloseCode.TRY_AGAIN, "",
                         [encode_message(rtvi.error("the server cannot take the call now", fatal=True))])

    def writer_done(self) -> None:
        self.outbox.close()

    def release(self) -> None:
        self.requests.close()

    # --- reader ----------------------------------------------------------------------------

    async def on_frame(self, msg: bytes | str) -> None:
        limit = self.cfg.max_audio_bytes + self.cfg.max_control_bytes
        self.stats.frames_in += 1
        if isinstance(msg, str):
            await self.fault(ErrorCode.MALFORMED_MESSAGE, "RTVI messages travel in binary protobuf frames")
            return
        if len(msg) > limit:
            self.request_fatal(CloseCode.TOO_BIG, ErrorCode.MESSAGE_TOO_BIG, f"a frame is over {limit} bytes")
            return
        try:
            frame = decode_frame(msg)
        except WireError as exc:
            await self.fault(ErrorCode.MALFORMED_MESSAGE, exc.message)
            return
        if isinstance(frame, InboundAudio):
            self._audio(frame)
        elif isinstance(frame, InboundMessage):
            await self._request(frame)
        elif frame.text.strip():  # a TextFrame/TranscriptionFrame: what a Python Pipecat client types
            self.ready.set()
            await self.lossless(WireText(frame.text[:4096], self.last_seen))

    def try_frame(self, frame: bytes) -> bool:
        """Caller audio at once (the edge's read callback); anything else is left to on_frame."""
        if len(frame) > self.cfg.max_audio_bytes + self.cfg.max_control_bytes:
            return False
        try:
            decoded = decode_frame(frame)
        except WireError:
            return False
        if not isinstance(decoded, InboundAudio):
            return False
        self.stats.frames_in += 1
        self._audio(decoded)
        return True

    def _audio(self, frame: InboundAudio) -> None:
        self.ready.set()  # a client without the handshake: its audio starts the call
        self.last_audio = self.last_seen
        self.audio_in(frame.pcm, frame.sample_rate, self.last_seen)

    async def _request(self, msg: InboundMessage) -> None:
        try:
            req = rtvi.parse_request(msg)
        except rtvi.RtviViolation as exc:
            self._reply(rtvi.error_response(exc.request_id, exc.message))
            await self.fault(ErrorCode.UNKNOWN_TYPE, exc.message, notify=False)
            return
        if isinstance(req, rtvi.ClientReady):
            if not rtvi.compatible(req.version):
                log.warning("rtvi call %s: the client speaks RTVI %s, this server %s; compatibility issues may occur",
                            self.call_id, req.version[:32], rtvi.PROTOCOL_VERSION)
            self._reply(rtvi.bot_ready(req.id, self.rcfg.about))
            self.ready.set()  # bot-ready is queued first: the greeting follows it
        elif isinstance(req, rtvi.DisconnectBot):
            await self.lossless(WireHangup())
            self.hung_up()
            if not self.delivered:  # no engine to end the call: it ends here
                self.ends.ended.set()
                self.ends.out.wake()
        elif isinstance(req, rtvi.DtmfKeys):
            for key in req.buttons:
                await self.lossless(WireDtmf(key, self.last_seen))
        elif isinstance(req, rtvi.SendText):
            if not req.run_immediately:  # refused, not taken as something else
                self._reply(rtvi.error_response(req.id, "send-text: run_immediately false is not supported"))
            elif req.content.strip():
                await self.lossless(WireText(req.content, self.last_seen, req.reply))
        else:
            await self._queue_request(req)

    async def _queue_request(self, req: rtvi.RtviRequest) -> None:
        if not self.requests.try_send(req):
            self._reply(rtvi.error_response(getattr(req, "id", None), "the server is busy: request dropped"))

    def notify_fault(self, kind: enum.Enum, message: str) -> None:
        self._reply(rtvi.error(message, fatal=False))

    # --- writer ----------------------------------------------------------------------------

    def next_pending(self) -> bytes | None:
        return self.outbox.try_recv()

    async def goodbye(self, ending: Ending, failure: CallFailure | None = None) -> None:
        await self.flush()
        if ending is Ending.FATAL:
            assert self.fatal is not None
            await self.close(self.fatal.close, "", [encode_message(rtvi.error(self.fatal.message, fatal=True))])
        elif ending is Ending.SHUTDOWN:
            await self.close(CloseCode.GOING_AWAY, "", [encode_message(rtvi.error("the server shuts down", fatal=True))])
        elif ending is Ending.FAILED:
            assert failure is not None
            self.stats.faults += 1
            await self.close(CloseCode.INTERNAL_ERROR, "", [encode_message(rtvi.error(failure.message, fatal=True))])
        else:
            await self.close(CloseCode.NORMAL)

    async def send_audio(self, frame: OutputAudioFrame) -> None:
        pcm, rate = frame.pcm, frame.sample_rate
        now = self.clock.now()
        if not self.speaking:
            self.speaking = True
            await self.write(encode_message(rtvi.message("bot-started-speaking")))
        step = AUDIO_CHUNK_SAMPLES * 2
        for i in range(0, len(pcm), step):
            await self.write(encode_audio(pcm[i:i + step], rate))
        self.play_end = max(self.play_end, now) + len(pcm) / 2 / rate
        self.stats.frames_out += 1
        self.nudge()  # the monitor says bot-stopped-speaking when the estimate ran out

    async def send_clear(self, epoch: int) -> None:
        """A clear: the client dropped what it queued (on ``user-started-speaking``); the cut marks
        are the session's to report."""
        self.marks.clear()
        self.play_end = self.clock.now()
        if self.speaking:  # said now, not at the next tick: the client's player is cut now
            self.speaking = False
            self._reply(rtvi.message("bot-stopped-speaking"))

    async def send_mark(self, mark_id: str) -> None:
        self.marks.append((self.play_end, mark_id))
        self.nudge()

    # --- monitor ---------------------------------------------------------------------------

    def next_due(self) -> float | None:
        """The next mark's echo, or the end of the bot's speaking by the estimate."""
        due = self.marks[0][0] if self.marks else None
        if self.speaking:
            ends = self.play_end + SPEAKING_HANGOVER
            due = ends if due is None else min(due, ends)
        return due

    async def on_tick(self, now: float) -> None:
        """Echo the marks whose audio has played; say when the bot's audio ran out."""
        while self.marks and self.marks[0][0] <= now:
            await self.lossless(WireMarkEcho(self.marks.popleft()[1]))
        if self.speaking and now >= self.play_end + SPEAKING_HANGOVER:
            self.speaking = False
            self._reply(rtvi.message("bot-stopped-speaking"))
