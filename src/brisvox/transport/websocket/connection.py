"""One call over one accepted WebSocket connection (the reusable part of the server).

:func:`run_call` takes a connection that completed the upgrade (any object that
implements :class:`WsPeer`), reads ``start``, builds the call pair, hands the
:class:`CallLink` to ``deliver`` and then runs three tasks in one
:class:`~brisvox.core.tasks.TaskScope` until the call is over:

* the **reader** turns client frames into WireEvents (audio drop-oldest and never
  waiting; control events lossless, each hand-off bounded by ``send_timeout``) and
  refreshes the liveness stamp on every frame;
* the **writer** is the only task that writes: audio in the call's encoding, clear,
  mark, error notices, and the goodbye (``stop`` + close frame);
* the **monitor** sends pings, ends a call whose client was silent for ``ping_timeout``,
  sent no audio for ``idle_timeout`` or lasted ``max_call_duration``, and aborts a write that was blocked for ``write_timeout`` (or, once the call is
  ending, for ``min(write_timeout, close_grace)``).

All timers run on the injected clock.  ``docs/WEBSOCKET_PROTOCOL.md`` is the protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from brisvox.audio.codec import AudioEncoding
from brisvox.audio.g711 import ulaw_decode, ulaw_encode
from brisvox.core.channel import WAKE
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
    WireStarted,
)
from brisvox.transport.link import CallEnds, CallLink, call_pair, hand_off
from brisvox.transport.websocket.config import ServerConfig
from brisvox.transport.websocket.limits import AudioRateLimit, AudioVerdict
from brisvox.transport.websocket.protocol import (
    MAX_MARK_ID_BYTES,
    ClientDtmf,
    ClientMark,
    ClientStop,
    CloseCode,
    ErrorCode,
    ProtocolViolation,
    StartMessage,
    StopKind,
    clear_message,
    error_message,
    mark_message,
    parse_control,
    parse_start,
    started_message,
    stop_message,
)
from brisvox.transport.websocket.stats import ServerStats

__all__ = ["PeerClosed", "WsPeer", "run_call"]

log = logging.getLogger(__name__)

NOTICE_CAPACITY = 8


class PeerClosed(Exception):
    """The connection is closed.  ``by_peer``: the client sent a close frame; ``code``: the
    code the WebSocket layer sent when it closed the connection itself (1002, 1007, 1009)."""

    def __init__(self, *, by_peer: bool, code: int | None = None) -> None:
        super().__init__(f"connection closed (by_peer={by_peer}, code={code})")
        self.by_peer = by_peer
        self.code = code


class WsPeer(Protocol):
    """What :func:`run_call` needs from a WebSocket connection (websockets, Starlette, ...).
    Every method raises :class:`PeerClosed` once the connection is closed."""

    @property
    def remote(self) -> str: ...

    async def recv(self) -> bytes | str: ...

    async def send(self, data: bytes | str) -> None: ...

    async def ping(self) -> Awaitable[object]:
        """Send a ping; the returned awaitable completes when the pong arrives."""
        ...

    async def close(self, code: int, reason: str) -> None:
        """Send a close frame and wait (briefly) for the peer's."""
        ...

    def abort(self) -> None:
        """Drop the TCP connection at once."""
        ...


_ids = itertools.count(1)


def _new_call_id() -> str:
    return f"ws-{next(_ids)}-{uuid.uuid4().hex[:8]}"


async def run_call(
    peer: WsPeer,
    *,
    clock: Clock,
    config: ServerConfig,
    deliver: Callable[[CallLink], Awaitable[bool]],
    shutdown: asyncio.Event,
    stats: ServerStats,
    register: Callable[[CallEnds], Callable[[], None]] | None = None,
) -> None:
    """Serve one call over ``peer`` until it ends (see module docs).  ``deliver`` hands the
    link to the engine and returns False when it could not (the call is refused with 1013).
    ``register`` lets the server wake the call on shutdown; it returns the unregister hook."""
    try:
        start = await _read_start(peer, clock, config, stats)
        if start is None:
            return
        call_id = _new_call_id()
        metadata = dict(start.metadata)
        metadata.update({
            "client_call_id": start.call_id or "",
            "transport": "websocket",
            CallInfo.SAMPLE_RATE_KEY: str(start.sample_rate),
            CallInfo.OUTPUT_SAMPLE_RATE_KEY: str(start.sample_rate),  # both directions run at the call's rate
            "encoding": start.encoding.value,
            "peer_addr": peer.remote,
        })
        info = CallInfo(call_id=call_id, transport="websocket", metadata=metadata)
        link, ends = call_pair(info)
        ends.events.try_send(WireStarted(info))
        if not await deliver(link):
            stats.refused_busy += 1
            await _refuse(peer, clock, config, CloseCode.TRY_AGAIN, ErrorCode.SERVER_BUSY,
                          "the server cannot take the call now")
            return
        unregister = register(ends) if register is not None else None
        stats.calls_started += 1
        try:
            await bounded(clock, config.write_timeout,
                          peer.send(started_message(call_id, start.encoding, start.sample_rate)), "started")
            await _Call(peer, clock, config, ends, start, shutdown, stats).run()
        finally:
            ends.events.close()
            ends.out.close()
            if unregister is not None:
                unregister()
    except (PeerClosed, DeadlineExceeded):
        pass
    except ChannelClosed:
        pass


async def _read_start(peer: WsPeer, clock: Clock, config: ServerConfig, stats: ServerStats) -> StartMessage | None:
    try:
        first = await bounded(clock, config.start_timeout, peer.recv(), "start")
    except DeadlineExceeded:
        stats.refused_start += 1
        await _refuse(peer, clock, config, CloseCode.POLICY, ErrorCode.START_TIMEOUT,
                      f"no start message within {config.start_timeout:g} s")
        return None
    if isinstance(first, bytes):
        stats.refused_start += 1
        await _refuse(peer, clock, config, CloseCode.POLICY, ErrorCode.INVALID_START,
                      "the first message must be a text 'start' message")
        return None
    if len(first) > config.max_control_bytes or len(first.encode()) > config.max_control_bytes:
        stats.refused_start += 1
        await _refuse(peer, clock, config, CloseCode.TOO_BIG, ErrorCode.MESSAGE_TOO_BIG,
                      f"the start message is over {config.max_control_bytes} bytes")
        return None
    try:
        return parse_start(first)
    except ProtocolViolation as exc:
        stats.refused_start += 1
        await _refuse(peer, clock, config, CloseCode.POLICY, exc.code, exc.message)
        return None


async def _refuse(peer: WsPeer, clock: Clock, config: ServerConfig, close: CloseCode, code: ErrorCode,
                  message: str) -> None:
    try:
        await bounded(clock, config.write_timeout, peer.send(error_message(code, message, fatal=True)), "error")
        await bounded(clock, config.close_grace * 2, peer.close(close, code.value), "close")
    except (PeerClosed, DeadlineExceeded):
        peer.abort()


@dataclass(slots=True)
class _Fatal:
    close: CloseCode
    code: ErrorCode
    message: str


class _Call:
    def __init__(self, peer: WsPeer, clock: Clock, config: ServerConfig, ends: CallEnds, start: StartMessage,
                 shutdown: asyncio.Event, stats: ServerStats) -> None:
        self.peer = peer
        self.clock = clock
        self.cfg = config
        self.ends = ends
        self.encoding = start.encoding
        self.rate = start.sample_rate
        self.shutdown = shutdown
        self.stats = stats
        self.last_seen = clock.now()
        self.started_at = self.last_seen
        self.last_audio = self.last_seen
        self.audio_limit = (AudioRateLimit(config.audio_rate, config.audio_burst, config.audio_flood)
                            if config.audio_rate is not None else None)
        # bytes of the call's encoding per second of audio
        self.bytes_per_second = self.rate * (2 if start.encoding is AudioEncoding.PCM16 else 1)
        self.too_fast_reported = False
        self.writing_since: float | None = None
        self.fatal: _Fatal | None = None
        self.notices: deque[str] = deque()
        self.faults = 0
        self.feeding = True
        self.peer_gone = False
        self.rate_mismatch_reported = False
        self.seq = itertools.count()

    async def run(self) -> None:
        async with TaskScope(f"ws[{self.ends.info.call_id}]") as scope:
            reader = scope.spawn(self._reader(), name="reader")
            writer = scope.spawn(self._writer(), name="writer")
            scope.spawn(self._monitor(), name="monitor")
            await writer
            if not reader.done():
                with contextlib.suppress(DeadlineExceeded):
                    await bounded(self.clock, self.cfg.close_grace, asyncio.shield(reader), "close handshake")
            scope.cancel()

    # --- reader ----------------------------------------------------------------------------

    async def _reader(self) -> None:
        peer, cfg, events = self.peer, self.cfg, self.ends.events
        while True:
            try:
                msg = await peer.recv()
            except PeerClosed as exc:
                self._peer_closed(exc)
                return
            self.last_seen = self.clock.now()
            if not self.feeding:
                continue  # after a hang-up or a fatal fault: only wait for the close frame
            if isinstance(msg, bytes):
                self.stats.frames_in += 1
                if len(msg) > cfg.max_audio_bytes:
                    self._request_fatal(CloseCode.TOO_BIG, ErrorCode.MESSAGE_TOO_BIG,
                                        f"an audio frame is over {cfg.max_audio_bytes} bytes")
                    continue
                self.last_audio = self.last_seen
                if self.encoding is AudioEncoding.PCM16 and len(msg) % 2:
                    await self._fault(ErrorCode.HALF_SAMPLE, f"a pcm16 frame of {len(msg)} bytes holds a half sample")
                    continue
                if self.audio_limit is not None and not self._audio_admitted(len(msg)):
                    continue
                pcm = ulaw_decode(msg) if self.encoding is AudioEncoding.MULAW else msg
                if not events.closed:
                    events.try_send(WireAudio(pcm, self.rate, next(self.seq), self.last_seen))
                continue
            if len(msg) > cfg.max_control_bytes // 4 and len(msg.encode()) > cfg.max_control_bytes:
                self._request_fatal(CloseCode.TOO_BIG, ErrorCode.MESSAGE_TOO_BIG,
                                    f"a control message is over {cfg.max_control_bytes} bytes")
                continue
            try:
                ctl = parse_control(msg)
            except ProtocolViolation as exc:
                await self._fault(exc.code, exc.message)
                continue
            if isinstance(ctl, ClientDtmf):
                await self._lossless(WireDtmf(ctl.digit, self.last_seen))
            elif isinstance(ctl, ClientMark):
                await self._lossless(WireMarkEcho(ctl.id))
            elif isinstance(ctl, ClientStop):
                await self._lossless(WireHangup())
                self.feeding = False
                events.close()

    def _audio_admitted(self, size: int) -> bool:
        """The rate limit's verdict on a frame of ``size`` bytes; a drop is counted (and reported
        once per call), a flood ends the call."""
        assert self.audio_limit is not None
        verdict = self.audio_limit.admit(size / self.bytes_per_second, self.last_seen)
        if verdict is AudioVerdict.PASS:
            return True
        self.stats.audio_dropped_frames += 1
        if verdict is AudioVerdict.FLOOD:
            self.stats.audio_floods += 1
            self._request_fatal(CloseCode.POLICY, ErrorCode.AUDIO_FLOOD,
                                f"caller audio keeps arriving faster than real time "
                                f"({self.audio_limit.dropped:.1f} s dropped)")
        elif not self.too_fast_reported and len(self.notices) < NOTICE_CAPACITY:
            # a notice, not a fault: the drop is the remedy, and the flood rule ends a call that persists
            self.too_fast_reported = True
            self.notices.append(error_message(ErrorCode.AUDIO_TOO_FAST,
                                              f"caller audio over {self.cfg.audio_rate:g} x real time is dropped",
                                              fatal=False))
            self.ends.out.wake()
        return False

    def _peer_closed(self, exc: PeerClosed) -> None:
        self.peer_gone = True
        events = self.ends.events
        if self.feeding and not events.closed:
            if exc.code in (CloseCode.PROTOCOL_ERROR, 1007, CloseCode.TOO_BIG):
                kind = ErrorCode.MESSAGE_TOO_BIG if exc.code == CloseCode.TOO_BIG else ErrorCode.PROTOCOL_ERROR
                self.stats.faults += 1
                events.try_send(WireFault(kind.value, f"the WebSocket layer closed the connection ({exc.code})", True))
            elif exc.by_peer:
                events.try_send(WireHangup())
        self.feeding = False
        events.close()
        self.ends.out.wake()

    async def _lossless(self, ev: WireEvent) -> None:
        if not await hand_off(self.ends.events, ev, self.clock, self.cfg.send_timeout):
            self._request_fatal(CloseCode.TRY_AGAIN, ErrorCode.OVERLOADED, "the engine does not keep up")

    async def _fault(self, code: ErrorCode, message: str) -> None:
        self.faults += 1
        self.stats.faults += 1
        if self.faults > self.cfg.max_faults:
            self._request_fatal(CloseCode.POLICY, ErrorCode.TOO_MANY_FAULTS,
                                f"more than {self.cfg.max_faults} faults in this call")
            return
        if len(self.notices) < NOTICE_CAPACITY:
            self.notices.append(error_message(code, message, fatal=False))
            self.ends.out.wake()
        await self._lossless(WireFault(code.value, message, False))

    def _request_fatal(self, close: CloseCode, code: ErrorCode, message: str) -> None:
        if self.fatal is not None:
            return
        self.fatal = _Fatal(close, code, message)
        self.stats.faults += 1
        # one line per call at most (the first fatal fault wins); the message names no client data
        log.info("websocket call %s: closing with %s (%d): %s", self.ends.info.call_id, code.value, int(close), message)
        events = self.ends.events
        if self.feeding and not events.closed:
            events.try_send(WireFault(code.value, message, True))
        self.feeding = False
        events.close()
        self.ends.out.wake()

    # --- writer ----------------------------------------------------------------------------

    async def _write(self, data: bytes | str) -> None:
        self.writing_since = self.clock.now()
        try:
            await self.peer.send(data)
        finally:
            self.writing_since = None

    async def _goodbye(self, stop: StopKind | None, close: CloseCode, extra: str | None = None) -> None:
        self.stats.closes[int(close)] = self.stats.closes.get(int(close), 0) + 1
        try:
            if extra is not None:
                await self._write(extra)
            if stop is not None:
                await self._write(stop_message(stop))
            await bounded(self.clock, self.cfg.close_grace * 2, self.peer.close(close, ""), "close")
        except (PeerClosed, DeadlineExceeded):
            self.peer.abort()

    async def _writer(self) -> None:
        out, ended, cfg = self.ends.out, self.ends.ended, self.cfg
        floor = 0
        try:
            while True:
                if self.fatal is not None:
                    f = self.fatal
                    await self._goodbye(StopKind.ERROR, f.close, error_message(f.code, f.message, fatal=True))
                    return
                while self.notices:
                    await self._write(self.notices.popleft())
                if self.peer_gone:
                    return
                if self.shutdown.is_set():
                    await self._goodbye(StopKind.SHUTDOWN, CloseCode.GOING_AWAY)
                    return
                if ended.is_set() and not out:
                    await self._goodbye(StopKind.ENDED, CloseCode.NORMAL)
                    return
                try:
                    got = await out.recv_or_wake()
                except ChannelClosed:
                    return
                if got is WAKE:
                    continue
                if isinstance(got, WireAudioOut):
                    frame = got.frame
                    if frame.epoch < floor:
                        continue
                    if frame.sample_rate != self.rate:
                        self._rate_mismatch(frame.sample_rate)
                        continue
                    data = frame.pcm if self.encoding is AudioEncoding.PCM16 else ulaw_encode(frame.pcm)
                    limit = cfg.max_audio_bytes - (cfg.max_audio_bytes % 2)
                    if len(data) <= limit:
                        await self._write(data)
                    else:
                        for i in range(0, len(data), limit):
                            await self._write(data[i:i + limit])
                    self.stats.frames_out += 1
                elif isinstance(got, WireClear):
                    floor = max(floor, got.epoch)
                    await self._write(clear_message(got.epoch))
                elif isinstance(got, WireMark):
                    if len(got.id.encode()) > MAX_MARK_ID_BYTES:
                        await self._fault(ErrorCode.MARK_ID_TOO_LONG,
                                          f"a mark id of {len(got.id.encode())} bytes is over {MAX_MARK_ID_BYTES}")
                    else:
                        await self._write(mark_message(got.id))
                elif isinstance(got, WireHangupOut):
                    if got.failure is None:
                        await self._goodbye(StopKind.ENDED, CloseCode.NORMAL)
                    else:  # the engine failed: error, stop{error}, 1011
                        self.stats.faults += 1
                        await self._goodbye(StopKind.ERROR, CloseCode.INTERNAL_ERROR, error_message(
                            ErrorCode(got.failure.kind.value), got.failure.message, fatal=True))
                    return
        except PeerClosed:
            self.peer_gone = True

    def _rate_mismatch(self, got: int) -> None:
        self.stats.output_rate_mismatches += 1
        if self.rate_mismatch_reported:
            return
        self.rate_mismatch_reported = True
        events = self.ends.events
        if not events.closed:
            events.try_send(WireFault(ErrorCode.OUTPUT_RATE_MISMATCH.value,
                                      f"bot audio at {got} Hz on a {self.rate} Hz call is dropped", False))

    # --- monitor ---------------------------------------------------------------------------

    async def _monitor(self) -> None:
        cfg, clock = self.cfg, self.clock
        tick = max(0.005, min(cfg.ping_interval, cfg.write_timeout, cfg.close_grace) / 2)
        next_ping = clock.now() + cfg.ping_interval
        while True:
            await clock.sleep(tick)
            now = clock.now()
            since = self.writing_since
            if since is not None:
                ending = self.ends.ended.is_set() or self.shutdown.is_set() or self.fatal is not None
                limit = min(cfg.write_timeout, cfg.close_grace) if ending else cfg.write_timeout
                if now - since > limit:
                    log.info("websocket call %s: a write was blocked for %.1f s; dropping the client",
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
                continue
            if self.fatal is None and now - self.last_audio > cfg.idle_timeout:
                self.stats.idle_timeouts += 1
                self._request_fatal(CloseCode.POLICY, ErrorCode.IDLE_TIMEOUT,
                                    f"no caller audio for {cfg.idle_timeout:g} s")
                continue
            if self.fatal is None and now - self.started_at > cfg.max_call_duration:
                self.stats.duration_limits += 1
                self._request_fatal(CloseCode.POLICY, ErrorCode.MAX_DURATION,
                                    f"the call reached its maximum duration of {cfg.max_call_duration:g} s")
                continue
            if now >= next_ping:
                next_ping = now + cfg.ping_interval
                try:
                    pong = await bounded(clock, tick, self.peer.ping(), "ping")
                except (PeerClosed, DeadlineExceeded):
                    continue
                asyncio.ensure_future(pong).add_done_callback(self._on_pong)

    def _on_pong(self, fut: asyncio.Future[object]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self.last_seen = self.clock.now()
