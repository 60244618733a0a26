"""One Twilio Media Streams call over one accepted WebSocket (the thin asyncio shell).

:func:`run_call` reads ``connected``/``start`` within ``start_timeout``, builds the
:class:`CallInfo` (``call_id`` = ``callSid``; metadata: the stream's custom parameters,
then the server's keys, which win), hands the link to ``deliver`` and runs three tasks
in one :class:`~brisvox.core.tasks.TaskScope`:

* the **reader**: ``media`` -> base64 -> mu-law -> PCM16 -> WireAudio (drop-oldest,
  never waits); ``mark`` echoes through the :class:`~brisvox.transport.telephony.MarkBook`
  (engine mark -> WireMarkEcho, every echo -> WireLead, the audio sent and not played);
  ``dtmf``; ``stop`` -> WireHangup.  A bad frame is a fault; past ``max_faults`` the call
  is closed (1008).
* the **writer** (the only task that writes): PCM16 -> mu-law in ``chunk_bytes`` pieces,
  one ``media`` message each, a progress mark every ``progress_interval`` of audio; engine
  marks as ``e<n>``; WireClear -> ``clear`` (the book forgets every mark: Twilio's echoes
  of the flushed ones are then unknown and dropped).  Twilio takes no error or stop
  message: the goodbye is the close frame (1000, 1001 on shutdown, 1011 on an engine
  failure, 1008 on a protocol failure).
* the **monitor**: a write blocked for ``write_timeout`` drops the connection; nothing
  from Twilio for ``ping_timeout`` (Twilio sends media every 20 ms, silence included) or a
  call longer than ``max_call_duration`` ends the call (1008).  The WebSocket adapter's
  caller-audio rate limit is not applied: the stream is Twilio's, authenticated by its
  signature, and paced by Twilio.

All timers run on the injected clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable

from brisvox.audio.g711 import ulaw_decode, ulaw_encode
from brisvox.core.channel import WAKE
from brisvox.core.clock import Clock, bounded, deadline
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
    WireLead,
    WireMark,
    WireMarkEcho,
    WireStarted,
)
from brisvox.transport.link import CallEnds, CallLink, call_pair, hand_off
from brisvox.transport.telephony import MarkBook, MarkKind, b64decode
from brisvox.transport.telephony.rate import admit_audio, audio_limit
from brisvox.transport.twilio.config import TwilioConfig, TwilioStats
from brisvox.transport.twilio.protocol import (
    MEDIA_RATE,
    Connected,
    FaultKind,
    InboundDtmf,
    InboundMark,
    InboundMedia,
    InboundStop,
    OutboundEncoder,
    StreamStart,
    TwilioProtocolError,
    parse_message,
)
from brisvox.transport.websocket.config import ServerConfig
from brisvox.transport.websocket.connection import PeerClosed, WsPeer
from brisvox.transport.websocket.limits import AudioVerdict

__all__ = ["CloseCode", "run_call"]

log = logging.getLogger(__name__)


class CloseCode:
    NORMAL = 1000
    GOING_AWAY = 1001
    POLICY = 1008
    TOO_BIG = 1009
    INTERNAL_ERROR = 1011
    TRY_AGAIN = 1013


async def run_call(
    peer: WsPeer,
    *,
    clock: Clock,
    config: ServerConfig,
    twilio: TwilioConfig,
    deliver: Callable[[CallLink], Awaitable[bool]],
    shutdown: asyncio.Event,
    stats: TwilioStats,
    register: Callable[[CallEnds], Callable[[], None]] | None = None,
    admit: Callable[[StreamStart], str | None] | None = None,
) -> None:
    """Serve one Twilio stream over ``peer`` until it ends (see module docs).  ``deliver``
    returns False when the engine cannot take the call (closed with 1013).  ``admit`` (the
    server's call-token check) returns why a ``start`` is refused (closed 1008, counted in
    ``refused_start``); its ``token`` parameter never reaches the call's metadata."""
    try:
        start = await _read_start(peer, clock, config, stats)
        if start is None:
            return
        if admit is not None and (why := admit(start)) is not None:
            stats.refused_start += 1
            log.info("twilio stream from %s refused: %s", peer.remote, why)
            await _close(peer, clock, config, CloseCode.POLICY, why[:120])
            return
        metadata = {k: v for k, v in start.custom_parameters.items() if k != "token"}
        metadata.update({
            "transport": "twilio",
            "carrier": "twilio",
            "carrier_call_id": start.call_sid,
            "stream_sid": start.stream_sid,
            "account_sid": start.account_sid,
            CallInfo.SAMPLE_RATE_KEY: str(MEDIA_RATE),
            "encoding": "mulaw",
            "peer_addr": peer.remote,
        })
        info = CallInfo(call_id=start.call_sid, transport="twilio", metadata=metadata)
        link, ends = call_pair(info)
        ends.events.try_send(WireStarted(info))
        if not await deliver(link):
            stats.refused_busy += 1
            await _close(peer, clock, config, CloseCode.TRY_AGAIN, "server busy")
            return
        unregister = register(ends) if register is not None else None
        stats.calls_started += 1
        try:
            await _Call(peer, clock, config, twilio, ends, start, shutdown, stats).run()
        finally:
            ends.events.close()
            ends.out.close()
            if unregister is not None:
                unregister()
    except (PeerClosed, DeadlineExceeded, ChannelClosed):
        pass


async def _read_start(peer: WsPeer, clock: Clock, config: ServerConfig, stats: TwilioStats) -> StreamStart | None:
    """``connected`` (optional) then ``start``, both within ``start_timeout``; None: refused."""
    try:
        async with deadline(clock, config.start_timeout, "twilio start"):
            for _ in range(2):
                frame = await peer.recv()
                if isinstance(frame, bytes) or len(frame) > config.max_control_bytes:
                    why = "a binary frame" if isinstance(frame, bytes) else "an oversized frame"
                    return await _refuse_start(peer, clock, config, stats, f"{why} before start")
                try:
                    msg = parse_message(frame)
                except TwilioProtocolError as exc:
                    return await _refuse_start(peer, clock, config, stats, exc.message)
                if isinstance(msg, StreamStart):
                    return msg
                if not isinstance(msg, Connected):
                    return await _refuse_start(peer, clock, config, stats, f"{type(msg).__name__} before start")
            return await _refuse_start(peer, clock, config, stats, "no start after connected")
    except DeadlineExceeded:
        return await _refuse_start(peer, clock, config, stats, f"no start within {config.start_timeout:g} s")


async def _refuse_start(peer: WsPeer, clock: Clock, config: ServerConfig, stats: TwilioStats,
                        why: str) -> StreamStart | None:
    """Close the connection before start (Twilio takes no error message); always None."""
    stats.refused_start += 1
    log.info("twilio stream from %s refused: %s", peer.remote, why)
    await _close(peer, clock, config, CloseCode.POLICY, why[:120])
    return None


async def _close(peer: WsPeer, clock: Clock, config: ServerConfig, code: int, reason: str) -> None:
    try:
        await bounded(clock, config.close_grace * 2, peer.close(code, reason), "close")
    except (PeerClosed, DeadlineExceeded):
        peer.abort()


class _Call:
    def __init__(self, peer: WsPeer, clock: Clock, config: ServerConfig, twilio: TwilioConfig, ends: CallEnds,
                 start: StreamStart, shutdown: asyncio.Event, stats: TwilioStats) -> None:
        self.peer = peer
        self.clock = clock
        self.cfg = config
        self.twilio = twilio
        self.ends = ends
        self.shutdown = shutdown
        self.stats = stats
        self.encoder = OutboundEncoder(start.stream_sid)
        self.book = MarkBook(twilio.max_marks)
        self.last_seen = self.started_at = clock.now()
        self.audio_limit = audio_limit(config)
        self.writing_since: float | None = None
        self.fatal: tuple[int, str] | None = None
        self.faults = 0
        self.feeding = True
        self.peer_gone = False
        self.rate_mismatch_reported = False
        self.seq = itertools.count()
        self.next_chunk: int | None = None
        self.sent_bytes = 0  # mu-law bytes sent = samples at 8 kHz
        self.next_progress = int(twilio.progress_interval * MEDIA_RATE)

    async def run(self) -> None:
        async with TaskScope(f"twilio[{self.ends.info.call_id}]") as scope:
            reader = scope.spawn(self._reader(), name="reader")
            writer = scope.spawn(self._writer(), name="writer")
            scope.spawn(self._monitor(), name="monitor")
            await writer
            if not reader.done():
                with contextlib.suppress(DeadlineExceeded):  # the close handshake may not finish: fine
                    await bounded(self.clock, self.cfg.close_grace, asyncio.shield(reader), "close handshake")
            scope.cancel()
        self.stats.marks_evicted += self.book.evicted
        self.stats.marks_unmatched += self.book.unmatched

    # --- reader ----------------------------------------------------------------------------

    async def _reader(self) -> None:
        while True:
            try:
                frame = await self.peer.recv()
            except PeerClosed as exc:
                self._peer_closed(exc)
                return
            self.last_seen = self.clock.now()
            if self.feeding:
                await self._on_frame(frame)

    async def _on_frame(self, frame: bytes | str) -> None:
        if isinstance(frame, bytes):
            await self._fault(FaultKind.BINARY_FRAME, "Media Streams carries text frames only")
            return
        if len(frame) > self.cfg.max_control_bytes:
            self._request_fatal(CloseCode.TOO_BIG, FaultKind.TOO_BIG,
                                f"a frame of {len(frame)} characters is over {self.cfg.max_control_bytes}")
            return
        try:
            msg = parse_message(frame)
        except TwilioProtocolError as exc:
            await self._fault(exc.kind, exc.message)
            return
        if isinstance(msg, InboundMedia):
            await self._media(msg)
        elif isinstance(msg, InboundMark):
            await self._echo(msg.name)
        elif isinstance(msg, InboundDtmf):
            await self._lossless(WireDtmf(msg.digit, self.last_seen))
        elif isinstance(msg, InboundStop):
            await self._lossless(WireHangup())
            self.feeding = False
            self.ends.events.close()
        else:
            await self._fault(FaultKind.UNEXPECTED, f"a second {type(msg).__name__} message")

    async def _media(self, msg: InboundMedia) -> None:
        if msg.track != "inbound":
            return  # a fork's outbound track: not the caller
        try:
            mulaw = b64decode(msg.payload)
        except ValueError as exc:
            await self._fault(FaultKind.INVALID_MEDIA, f"media payload: {exc}")
            return
        if not mulaw or len(mulaw) > self.cfg.max_audio_bytes:
            await self._fault(FaultKind.INVALID_MEDIA,
                              f"a media payload of {len(mulaw)} bytes (expected 1 to {self.cfg.max_audio_bytes})")
            return
        self.stats.media_in += 1
        verdict = admit_audio(self.audio_limit, len(mulaw), self.last_seen, self.stats)
        if verdict is AudioVerdict.FLOOD:
            self._request_fatal(CloseCode.POLICY, FaultKind.AUDIO_FLOOD, "caller audio keeps arriving faster than real time")
        if msg.chunk is not None:
            if self.next_chunk is not None and msg.chunk > self.next_chunk:
                self.stats.lost_chunks += msg.chunk - self.next_chunk
            self.next_chunk = msg.chunk + 1
        events = self.ends.events
        if not events.closed and verdict is AudioVerdict.PASS:
            events.try_send(WireAudio(ulaw_decode(mulaw), MEDIA_RATE, next(self.seq), self.last_seen))

    async def _echo(self, name: str) -> None:
        echo = self.book.echo(name, at=self.clock.now())
        if echo is None:
            return  # unknown, evicted, or flushed by a clear: never a played mark
        stats = self.stats
        stats.marks_echoed += 1
        stats.max_echo_latency = max(stats.max_echo_latency, echo.latency)
        lead = max(0, self.sent_bytes - echo.position) / MEDIA_RATE
        stats.max_unplayed = max(stats.max_unplayed, lead)
        if echo.kind is MarkKind.ENGINE and echo.engine_id is not None:
            await self._lossless(WireMarkEcho(echo.engine_id))
        if not self.ends.events.closed:
            self.ends.events.try_send(WireLead(lead))  # advisory: dropped when the engine lags

    def _peer_closed(self, exc: PeerClosed) -> None:
        self.peer_gone = True
        events = self.ends.events
        if self.feeding and not events.closed:
            if exc.code in (CloseCode.TOO_BIG, 1002, 1007):
                self.stats.faults += 1
                events.try_send(WireFault(FaultKind.TOO_BIG.value if exc.code == CloseCode.TOO_BIG
                                          else FaultKind.INVALID_MESSAGE.value,
                                          f"the WebSocket layer closed the connection ({exc.code})", True))
            elif exc.by_peer:
                events.try_send(WireHangup())
        self.feeding = False
        events.close()
        self.ends.out.wake()

    async def _lossless(self, ev: WireEvent) -> None:
        if not await hand_off(self.ends.events, ev, self.clock, self.cfg.send_timeout):
            self._request_fatal(CloseCode.TRY_AGAIN, FaultKind.OVERLOADED, "the engine does not keep up")

    async def _fault(self, kind: FaultKind, message: str) -> None:
        self.faults += 1
        self.stats.faults += 1
        if self.faults > self.cfg.max_faults:
            self._request_fatal(CloseCode.POLICY, FaultKind.TOO_MANY_FAULTS,
                                f"more than {self.cfg.max_faults} faults in this call")
            return
        log.info("twilio call %s: %s: %s", self.ends.info.call_id, kind.value, message)
        await self._lossless(WireFault(kind.value, message, False))

    def _request_fatal(self, close: int, kind: FaultKind, message: str) -> None:
        if self.fatal is not None:
            return
        log.warning("twilio call %s closed: %s: %s", self.ends.info.call_id, kind.value, message)
        self.fatal = (close, kind.value)
        self.stats.faults += 1
        events = self.ends.events
        if self.feeding and not events.closed:
            events.try_send(WireFault(kind.value, message, True))
        self.feeding = False
        events.close()
        self.ends.out.wake()

    # --- writer ----------------------------------------------------------------------------

    async def _write(self, text: str) -> None:
        self.writing_since = self.clock.now()
        try:
            await self.peer.send(text)
        finally:
            self.writing_since = None

    async def _goodbye(self, code: int, reason: str) -> None:
        try:
            await bounded(self.clock, self.cfg.close_grace * 2, self.peer.close(code, reason), "close")
        except (PeerClosed, DeadlineExceeded):
            self.peer.abort()

    async def _writer(self) -> None:
        out, ended = self.ends.out, self.ends.ended
        floor = 0
        try:
            while True:
                if self.fatal is not None:
                    await self._goodbye(*self.fatal)
                    return
                if self.peer_gone:
                    return
                if self.shutdown.is_set():
                    await self._goodbye(CloseCode.GOING_AWAY, "shutdown")
                    return
                if ended.is_set() and not out:
                    await self._goodbye(CloseCode.NORMAL, "")
                    return
                try:
                    got = await out.recv_or_wake()
                except ChannelClosed:
                    return
                if got is WAKE:
                    continue
                if isinstance(got, WireAudioOut):
                    if got.frame.epoch >= floor:
                        await self._audio(got)
                elif isinstance(got, WireClear):
                    floor = max(floor, got.epoch)
                    self.stats.marks_cut += self.book.clear()
                    self.stats.clears += 1
                    await self._write(self.encoder.clear())
                elif isinstance(got, WireMark):
                    name = self.book.engine(got.id, at=self.clock.now(), position=self.sent_bytes)
                    self.stats.marks_sent += 1
                    await self._write(self.encoder.mark(name))
                elif isinstance(got, WireHangupOut):
                    if got.failure is not None:
                        await self._goodbye(CloseCode.INTERNAL_ERROR, "engine failed")
                    else:
                        await self._goodbye(CloseCode.NORMAL, "")
                    return
        except PeerClosed:
            self.peer_gone = True

    async def _audio(self, got: WireAudioOut) -> None:
        frame = got.frame
        if frame.sample_rate != MEDIA_RATE:
            self._rate_mismatch(frame.sample_rate)
            return
        mulaw = ulaw_encode(frame.pcm)
        step = self.twilio.chunk_bytes
        view = memoryview(mulaw)
        for i in range(0, len(mulaw), step):
            piece = view[i:i + step]
            await self._write(self.encoder.media(piece))
            self.sent_bytes += len(piece)
            self.stats.media_out += 1
            if self.sent_bytes >= self.next_progress:
                self.next_progress = self.sent_bytes + int(self.twilio.progress_interval * MEDIA_RATE)
                name = self.book.progress(at=self.clock.now(), position=self.sent_bytes)
                await self._write(self.encoder.mark(name))

    def _rate_mismatch(self, got: int) -> None:
        self.stats.output_rate_mismatches += 1
        if self.rate_mismatch_reported:
            return
        self.rate_mismatch_reported = True
        events = self.ends.events
        if not events.closed:
            events.try_send(WireFault(FaultKind.OUTPUT_RATE_MISMATCH.value,
                                      f"bot audio at {got} Hz on an {MEDIA_RATE} Hz Twilio call is dropped", False))

    # --- monitor ---------------------------------------------------------------------------

    async def _monitor(self) -> None:
        cfg, clock = self.cfg, self.clock
        tick = max(0.005, min(cfg.write_timeout, cfg.close_grace, cfg.ping_timeout) / 2)
        while True:
            await clock.sleep(tick)
            now = clock.now()
            since = self.writing_since
            if since is not None:
                ending = self.ends.ended.is_set() or self.shutdown.is_set() or self.fatal is not None
                limit = min(cfg.write_timeout, cfg.close_grace) if ending else cfg.write_timeout
                if now - since > limit:
                    log.warning("twilio call %s: a write was blocked for %.1f s; dropping the connection",
                                self.ends.info.call_id, now - since)
                    self.stats.write_timeouts += 1
                    self.peer.abort()
                    return
            if self.shutdown.is_set():
                self.ends.out.wake()
            if self.fatal is None and now - self.started_at > cfg.max_call_duration:
                self._request_fatal(CloseCode.POLICY, FaultKind.MAX_DURATION,
                                    f"the call lasted the longest allowed ({cfg.max_call_duration:g} s)")
                continue
            if self.fatal is None and self.feeding and now - self.last_seen > cfg.ping_timeout:
                self.stats.idle_timeouts += 1
                self._request_fatal(CloseCode.POLICY, FaultKind.IDLE_TIMEOUT,
                                    f"nothing from Twilio for {cfg.ping_timeout:g} s")
