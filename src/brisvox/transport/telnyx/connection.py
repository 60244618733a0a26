"""One Telnyx media stream (bidirectional RTP mode) over one accepted WebSocket (the asyncio shell).

The loops are a copy of Twilio's (:mod:`brisvox.transport.twilio.connection`) with Telnyx's
differences:

* **Auth**: with ``auth_token`` the upgrade header ``x-telnyx-streaming-auth-token`` (checked
  by the endpoint, ``header_ok``) or the same key in ``connected`` must match (constant
  time); without proof by ``start`` the stream is closed 1008 and the engine never sees it.
* **One stream per call**: a ``call_control_id`` live or recently ended in the
  :class:`CallRegistry` is closed 1008 (a TeXML reconnect).  A claim is kept only once the
  engine took the call, so the retry after a 1013 is accepted.
* **Order**: media goes through :class:`~brisvox.transport.telnyx.reorder.Reorder` and
  DTMF through :class:`~brisvox.transport.telnyx.reorder.DtmfOrder`; a timer task releases
  what waited ``reorder_timeout``.  What is held is released before a stop or close.
  Frames before ``start`` are dropped and counted (at most 64, then 1008).
* **Chunks**: Telnyx takes 20 ms to 30 s per message: a tail under 20 ms is carried to the
  next audio, padded with silence when an engine mark follows, dropped by a clear.
* **Hang-up**: closing the socket is not a documented hang-up, so whenever the adapter ends
  the call (engine hang-up, fatal fault, idle, shutdown, broken socket, a bare close from
  Telnyx) and for a call refused after ``start``, the host's ``hangup`` hook is awaited
  once (bounded by ``hangup_timeout``) before the close frame; not after Telnyx's ``stop``
  nor for auth or duplicate refusals.  Telnyx ``error`` frames are faults that do not
  count toward ``max_faults``.

All timers run on the injected clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
from collections.abc import Awaitable, Callable

from brisvox.audio.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
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
from brisvox.transport.telephony import MarkBook, MarkKind, b64decode, secret_equal
from brisvox.transport.telephony.rate import admit_audio, audio_limit
from brisvox.transport.telnyx.config import CallRegistry, TelnyxConfig, TelnyxStats
from brisvox.transport.telnyx.protocol import (
    MEDIA_RATE,
    Codec,
    Connected,
    FaultKind,
    InboundDtmf,
    InboundMark,
    InboundMedia,
    InboundStop,
    OutboundEncoder,
    StreamStart,
    TelnyxError,
    TelnyxProtocolError,
    parse_message,
)
from brisvox.transport.telnyx.reorder import DtmfOrder, Reorder
from brisvox.transport.websocket.config import ServerConfig
from brisvox.transport.websocket.connection import PeerClosed, WsPeer
from brisvox.transport.websocket.limits import AudioVerdict

__all__ = ["CloseCode", "run_call"]

log = logging.getLogger(__name__)

_MAX_BEFORE_START = 64
_MIN_PIECE = 160  # 20 ms: the shortest media message Telnyx takes


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
    telnyx: TelnyxConfig,
    deliver: Callable[[CallLink], Awaitable[bool]],
    shutdown: asyncio.Event,
    stats: TelnyxStats,
    registry: CallRegistry,
    header_ok: bool = False,
    register: Callable[[CallEnds], Callable[[], None]] | None = None,
) -> None:
    """Serve one Telnyx stream over ``peer`` until it ends (see module docs).  ``header_ok``:
    the upgrade carried the right auth token.  ``deliver`` returns False when the engine cannot
    take the call (closed with 1013)."""
    try:
        start = await _read_start(peer, clock, config, telnyx, stats, header_ok)
        if start is None:
            return
        call_id = start.call_control_id
        if not registry.claim(call_id):
            stats.duplicate_calls_refused += 1
            log.warning("telnyx stream for call %s refused: the call has a stream already (a reconnect)", call_id)
            await _close(peer, clock, config, CloseCode.POLICY, "one stream per call")
            return
        metadata = {
            "transport": "telnyx",
            "carrier": "telnyx",
            "carrier_call_id": call_id,
            "call_session_id": start.call_session_id,
            "stream_id": start.stream_id,
            "from": start.from_number,
            "to": start.to_number,
            CallInfo.SAMPLE_RATE_KEY: str(MEDIA_RATE),
            "encoding": start.codec.value,
            "peer_addr": peer.remote,
        }
        info = CallInfo(call_id=call_id, transport="telnyx", metadata=metadata)
        link, ends = call_pair(info)
        ends.events.try_send(WireStarted(info))
        if not await deliver(link):
            registry.forget(call_id)
            stats.refused_busy += 1
            await _hangup(telnyx, clock, stats, call_id)
            await _close(peer, clock, config, CloseCode.TRY_AGAIN, "server busy")
            return
        unregister = register(ends) if register is not None else None
        stats.calls_started += 1
        try:
            await _Call(peer, clock, config, telnyx, ends, start, shutdown, stats).run()
        finally:
            registry.release(call_id)
            ends.events.close()
            ends.out.close()
            if unregister is not None:
                unregister()
    except (PeerClosed, DeadlineExceeded, ChannelClosed):
        pass


async def _read_start(peer: WsPeer, clock: Clock, config: ServerConfig, telnyx: TelnyxConfig,
                      stats: TelnyxStats, header_ok: bool) -> StreamStart | None:
    """``connected`` then ``start`` within ``start_timeout`` (frames that overtake start are
    dropped, counted); None: refused."""
    proven = header_ok or telnyx.auth_token is None
    try:
        async with deadline(clock, config.start_timeout, "telnyx start"):
            for _ in range(_MAX_BEFORE_START + 2):
                frame = await peer.recv()
                if isinstance(frame, bytes) or len(frame) > config.max_control_bytes:
                    why = "a binary frame" if isinstance(frame, bytes) else "an oversized frame"
                    return await _refuse(peer, clock, config, stats, f"{why} before start")
                try:
                    msg = parse_message(frame)
                except TelnyxProtocolError as exc:
                    if exc.kind is FaultKind.UNSUPPORTED_FORMAT and proven and exc.call_control_id:
                        await _hangup(telnyx, clock, stats, exc.call_control_id)
                    return await _refuse(peer, clock, config, stats, exc.message)
                if isinstance(msg, Connected):
                    if msg.auth_token is not None and telnyx.auth_token is not None:
                        proven = proven or secret_equal(msg.auth_token.reveal(), telnyx.auth_token.reveal())
                    continue
                if isinstance(msg, StreamStart):
                    if not proven:
                        stats.refused_auth += 1
                        return await _refuse(peer, clock, config, stats,
                                             "no valid x-telnyx-streaming-auth-token before start")
                    return msg
                stats.media_before_start += 1
            return await _refuse(peer, clock, config, stats, f"more than {_MAX_BEFORE_START} frames before start")
    except DeadlineExceeded:
        return await _refuse(peer, clock, config, stats, f"no start within {config.start_timeout:g} s")


async def _refuse(peer: WsPeer, clock: Clock, config: ServerConfig, stats: TelnyxStats,
                  why: str) -> StreamStart | None:
    """Close the connection before the call is handed over; always None."""
    stats.refused_start += 1
    log.info("telnyx stream from %s refused: %s", peer.remote, why)
    await _close(peer, clock, config, CloseCode.POLICY, why[:120])
    return None


async def _close(peer: WsPeer, clock: Clock, config: ServerConfig, code: int, reason: str) -> None:
    try:
        await bounded(clock, config.close_grace * 2, peer.close(code, reason), "close")
    except (PeerClosed, DeadlineExceeded):
        peer.abort()


async def _hangup(telnyx: TelnyxConfig, clock: Clock, stats: TelnyxStats, call_control_id: str) -> None:
    """The host's hang-up hook, once, bounded; a failure is logged and counted (the close follows anyway)."""
    if telnyx.hangup is None:
        stats.hangups_skipped += 1
        return
    stats.hangups_requested += 1
    try:
        await bounded(clock, telnyx.hangup_timeout, telnyx.hangup(call_control_id), "telnyx hangup")
    except DeadlineExceeded:
        stats.hangups_failed += 1
        log.warning("telnyx call %s: the hangup hook did not return within %g s", call_control_id,
                    telnyx.hangup_timeout)
    except Exception:  # the host's hook: any failure is reported, the call is closed regardless
        stats.hangups_failed += 1
        log.exception("telnyx call %s: the hangup hook failed", call_control_id)


class _Call:
    def __init__(self, peer: WsPeer, clock: Clock, config: ServerConfig, telnyx: TelnyxConfig, ends: CallEnds,
                 start: StreamStart, shutdown: asyncio.Event, stats: TelnyxStats) -> None:
        self.peer = peer
        self.clock = clock
        self.cfg = config
        self.telnyx = telnyx
        self.ends = ends
        self.shutdown = shutdown
        self.stats = stats
        self.call_id = start.call_control_id
        self.codec = start.codec
        self.decode = ulaw_decode if start.codec is Codec.PCMU else alaw_decode
        self.encode = ulaw_encode if telnyx.codec is Codec.PCMU else alaw_encode
        self.silence = telnyx.codec.silence
        self.encoder = OutboundEncoder()
        self.book = MarkBook(telnyx.max_marks)
        self.reorder = Reorder(telnyx.reorder_window, telnyx.reorder_timeout)
        self.dtmf = DtmfOrder(telnyx.reorder_timeout)
        self.holding = asyncio.Event()
        self.carry = bytearray()
        self.audio_limit = audio_limit(config)
        self.last_seen = self.started_at = clock.now()
        self.writing_since: float | None = None
        self.fatal: tuple[int, str] | None = None
        self.faults = 0
        self.feeding = True
        self.peer_gone = False
        self.stopped = False  # Telnyx sent stop: the call is over at Telnyx, no hang-up needed
        self.hung_up = False
        self.rate_mismatch_reported = False
        self.seq = itertools.count()
        self.sent_bytes = 0
        self.next_progress = int(telnyx.progress_interval * MEDIA_RATE)

    async def run(self) -> None:
        async with TaskScope(f"telnyx[{self.call_id}]") as scope:
            reader = scope.spawn(self._reader(), name="reader")
            writer = scope.spawn(self._writer(), name="writer")
            scope.spawn(self._monitor(), name="monitor")
            scope.spawn(self._timer(), name="reorder-timer")
            await writer
            if not reader.done():
                with contextlib.suppress(DeadlineExceeded):  # the close handshake may not finish: fine
                    await bounded(self.clock, self.cfg.close_grace, asyncio.shield(reader), "close handshake")
            scope.cancel()
        await self._hangup()  # a broken socket: the writer never said goodbye
        stats, order = self.stats, self.reorder
        stats.marks_evicted += self.book.evicted
        stats.marks_unmatched += self.book.unmatched
        stats.media_reordered += order.reordered
        stats.media_late += order.late
        stats.media_duplicate += order.duplicates
        stats.media_lost += order.gaps
        stats.chunk_resyncs += order.resyncs
        stats.dtmf_reordered += self.dtmf.reordered

    async def _hangup(self) -> None:
        if self.hung_up or self.stopped:
            return
        self.hung_up = True
        await _hangup(self.telnyx, self.clock, self.stats, self.call_id)

    # --- reader ----------------------------------------------------------------------------

    async def _reader(self) -> None:
        while True:
            try:
                frame = await self.peer.recv()
            except PeerClosed as exc:
                await self._release_all()
                self._peer_closed(exc)
                return
            self.last_seen = self.clock.now()
            if self.feeding:
                await self._on_frame(frame)

    async def _on_frame(self, frame: bytes | str) -> None:
        if isinstance(frame, bytes):
            await self._fault(FaultKind.BINARY_FRAME, "Telnyx media streaming carries text frames only")
            return
        if len(frame) > self.cfg.max_control_bytes:
            self._request_fatal(CloseCode.TOO_BIG, FaultKind.TOO_BIG,
                                f"a frame of {len(frame)} characters is over {self.cfg.max_control_bytes}")
            return
        try:
            msg = parse_message(frame)
        except TelnyxProtocolError as exc:
            await self._fault(exc.kind, exc.message)
            return
        if isinstance(msg, InboundMedia):
            await self._media(msg)
        elif isinstance(msg, InboundMark):
            await self._echo(msg.name)
        elif isinstance(msg, InboundDtmf):
            if msg.sequence is None:
                await self._lossless(WireDtmf(msg.digit, self.last_seen))
            else:
                await self._digits(self.dtmf.offer(msg.sequence, msg.digit, self.last_seen))
                self.holding.set()
        elif isinstance(msg, InboundStop):
            self.stopped = True
            await self._release_all()
            await self._lossless(WireHangup())
            self.feeding = False
            self.ends.events.close()
        elif isinstance(msg, TelnyxError):
            self.stats.telnyx_errors += 1
            text = f"Telnyx error {msg.code}: {msg.title} {msg.detail}".strip()
            log.warning("telnyx call %s: %s", self.call_id, text)
            await self._lossless(WireFault(FaultKind.TELNYX_ERROR.value, text, False))
        else:
            await self._fault(FaultKind.UNEXPECTED, f"a second {type(msg).__name__} message")

    async def _media(self, msg: InboundMedia) -> None:
        if msg.track != "inbound":
            return  # not the caller
        data: bytes | None = None
        problem = ""
        try:
            data = b64decode(msg.payload)
        except ValueError as exc:
            problem = f"media payload: {exc}"
        if data is not None and not 1 <= len(data) <= self.cfg.max_audio_bytes:
            problem = f"a media payload of {len(data)} bytes (expected 1 to {self.cfg.max_audio_bytes})"
            data = None
        self.stats.media_in += 1
        if data is not None:  # over the rate: dropped, but it still fills its place in the order
            verdict = admit_audio(self.audio_limit, len(data), self.last_seen, self.stats)
            if verdict is AudioVerdict.FLOOD:
                self._request_fatal(CloseCode.POLICY, FaultKind.AUDIO_FLOOD,
                                    "caller audio keeps arriving faster than real time")
            data = data if verdict is AudioVerdict.PASS else None
        if msg.chunk is None:
            self._play([data])
        else:
            resyncs = self.reorder.resyncs
            self._play(self.reorder.offer(msg.chunk, data, self.last_seen))
            if self.reorder:
                self.holding.set()
            if self.reorder.resyncs != resyncs:
                await self._fault(FaultKind.CHUNK_RESYNC, "the media chunk numbering jumped; re-anchored on the newest")
        if problem:
            await self._fault(FaultKind.INVALID_MEDIA, problem)

    def _play(self, payloads: list[bytes | None]) -> None:
        events = self.ends.events
        for data in payloads:
            if data is not None and not events.closed:
                events.try_send(WireAudio(self.decode(data), MEDIA_RATE, next(self.seq), self.clock.now()))

    async def _digits(self, digits: list[str]) -> None:
        for digit in digits:
            await self._lossless(WireDtmf(digit, self.clock.now()))

    async def _release_all(self) -> None:
        self._play(self.reorder.flush())
        await self._digits(self.dtmf.flush())

    async def _timer(self) -> None:
        # New arrivals never make a deadline earlier (they arrive now), so sleeping until the
        # earliest deadline computed here is never late.
        while True:
            await self.holding.wait()
            due = [d for d in (self.reorder.deadline(), self.dtmf.deadline()) if d is not None]
            if not due:
                self.holding.clear()
                continue
            await self.clock.sleep_until(min(due))
            if not self.feeding:
                return
            now = self.clock.now()
            self._play(self.reorder.expire(now))
            await self._digits(self.dtmf.expire(now))

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
        log.info("telnyx call %s: %s: %s", self.call_id, kind.value, message)
        await self._lossless(WireFault(kind.value, message, False))

    def _request_fatal(self, close: int, kind: FaultKind, message: str) -> None:
        if self.fatal is not None:
            return
        log.warning("telnyx call %s closed: %s: %s", self.call_id, kind.value, message)
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
        await self._hangup()
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
                    self.carry.clear()
                    self.stats.marks_cut += self.book.clear()
                    self.stats.clears += 1
                    await self._write(self.encoder.clear())
                elif isinstance(got, WireMark):
                    await self._flush_carry()
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
        encoded = self.encode(frame.pcm)
        if self.carry:
            self.carry += encoded
            data: bytes | bytearray = self.carry
        else:
            data = encoded
        step = self.telnyx.chunk_bytes
        view = memoryview(data)
        size = len(data)
        i = 0
        while size - i >= _MIN_PIECE:
            await self._send_piece(view[i:i + step])
            i += min(step, size - i)
        tail = bytes(view[i:])
        view.release()
        self.carry[:] = tail  # under 20 ms: carried to the next audio

    async def _flush_carry(self) -> None:
        """Before an engine mark: the carried tail padded with silence to 20 ms."""
        if self.carry:
            self.carry.extend(bytes([self.silence]) * (_MIN_PIECE - len(self.carry)))
            piece = bytes(self.carry)
            self.carry.clear()
            await self._send_piece(piece)

    async def _send_piece(self, piece: bytes | memoryview) -> None:
        await self._write(self.encoder.media(piece))
        self.sent_bytes += len(piece)
        self.stats.media_out += 1
        if self.sent_bytes >= self.next_progress:
            self.next_progress = self.sent_bytes + int(self.telnyx.progress_interval * MEDIA_RATE)
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
                                      f"bot audio at {got} Hz on an {MEDIA_RATE} Hz Telnyx call is dropped", False))

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
                    log.warning("telnyx call %s: a write was blocked for %.1f s; dropping the connection",
                                self.call_id, now - since)
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
                                    f"nothing from Telnyx for {cfg.ping_timeout:g} s")
