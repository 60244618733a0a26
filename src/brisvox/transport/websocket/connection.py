"""One call over one accepted WebSocket connection (the reusable part of the server).

:func:`run_call` takes a connection that completed the upgrade (any object that
implements :class:`WsPeer`), reads ``start``, builds the :class:`CallInfo`, hands the
:class:`CallLink` to ``deliver``, answers ``started`` and runs the shared loop
(:mod:`brisvox.transport.websocket.loop`: reader, writer, monitor) with this protocol:

* caller audio: binary frames in the call's encoding, under the per-call rate limit
  (:class:`AudioRateLimit`), drop-oldest into the core; ``dtmf``, ``mark`` and ``stop``
  are lossless;
* faults are also sent to the client as ``error`` notices (at most 8 queued);
* the writer sends audio in the call's encoding (frames over ``max_audio_bytes`` split),
  ``clear``, ``mark``, and the goodbye: ``stop`` + close frame (``error`` first on a
  fatal fault or an engine failure).

``docs/WEBSOCKET_PROTOCOL.md`` is the protocol.
"""

from __future__ import annotations

import asyncio
import enum
import itertools
import uuid
from collections import deque
from collections.abc import Awaitable, Callable

from brisvox.audio.codec import AudioEncoding
from brisvox.audio.g711 import ulaw_decode, ulaw_encode
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import ChannelClosed, DeadlineExceeded
from brisvox.core.frames import OutputAudioFrame
from brisvox.transport.events import CallFailure, CallInfo, WireDtmf, WireHangup, WireMarkEcho
from brisvox.transport.link import CallEnds, CallLink
from brisvox.transport.websocket.config import ServerConfig
from brisvox.transport.websocket.limits import AudioRateLimit, AudioVerdict
from brisvox.transport.websocket.loop import Ending, PeerClosed, WsCall, WsPeer
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

NOTICE_CAPACITY = 8


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
        call = _WsCall(peer, clock, config, info, shutdown, stats, start)
        await call.host(deliver(call.link), register)
    except (PeerClosed, DeadlineExceeded, ChannelClosed):
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
        stats.json_too_deep += exc.too_deep
        await _refuse(peer, clock, config, CloseCode.POLICY, exc.code, exc.message)
        return None


async def _refuse(peer: WsPeer, clock: Clock, config: ServerConfig, close: CloseCode, code: ErrorCode,
                  message: str) -> None:
    try:
        await bounded(clock, config.write_timeout, peer.send(error_message(code, message, fatal=True)), "error")
        await bounded(clock, config.close_grace * 2, peer.close(close, code.value), "close")
    except (PeerClosed, DeadlineExceeded):
        peer.abort()


class _WsCall(WsCall[ServerStats]):
    label = "websocket"

    def __init__(self, peer: WsPeer, clock: Clock, config: ServerConfig, info: CallInfo, shutdown: asyncio.Event,
                 stats: ServerStats, start: StartMessage) -> None:
        super().__init__(peer, clock, config, info, shutdown, stats, out_rate=start.sample_rate)
        self.start = start
        self.encoding = start.encoding
        self.rate = start.sample_rate
        self.audio_limit = (AudioRateLimit(config.audio_rate, config.audio_burst, config.audio_flood)
                            if config.audio_rate is not None else None)
        # bytes of the call's encoding per second of audio
        self.bytes_per_second = self.rate * (2 if start.encoding is AudioEncoding.PCM16 else 1)
        self.too_fast_reported = False
        self.notices: deque[str] = deque()

    async def refuse_busy(self) -> None:
        await _refuse(self.peer, self.clock, self.cfg, CloseCode.TRY_AGAIN, ErrorCode.SERVER_BUSY,
                      "the server cannot take the call now")

    async def begin(self) -> None:
        await bounded(self.clock, self.cfg.write_timeout,
                      self.peer.send(started_message(self.call_id, self.encoding, self.rate)), "started")

    # --- reader ----------------------------------------------------------------------------

    async def on_frame(self, msg: bytes | str) -> None:
        cfg = self.cfg
        if isinstance(msg, bytes):
            self.stats.frames_in += 1
            if len(msg) > cfg.max_audio_bytes:
                self.request_fatal(CloseCode.TOO_BIG, ErrorCode.MESSAGE_TOO_BIG,
                                   f"an audio frame is over {cfg.max_audio_bytes} bytes")
                return
            self.last_audio = self.last_seen
            if self.encoding is AudioEncoding.PCM16 and len(msg) % 2:
                await self.fault(ErrorCode.HALF_SAMPLE, f"a pcm16 frame of {len(msg)} bytes holds a half sample")
                return
            if self.audio_limit is not None and not self._audio_admitted(len(msg)):
                return
            self.audio_in(ulaw_decode(msg) if self.encoding is AudioEncoding.MULAW else msg, self.rate, self.last_seen)
            return
        if len(msg) > cfg.max_control_bytes // 4 and len(msg.encode()) > cfg.max_control_bytes:
            self.request_fatal(CloseCode.TOO_BIG, ErrorCode.MESSAGE_TOO_BIG,
                               f"a control message is over {cfg.max_control_bytes} bytes")
            return
        try:
            ctl = parse_control(msg)
        except ProtocolViolation as exc:
            self.stats.json_too_deep += exc.too_deep
            await self.fault(exc.code, exc.message)
            return
        if isinstance(ctl, ClientDtmf):
            await self.lossless(WireDtmf(ctl.digit, self.last_seen))
        elif isinstance(ctl, ClientMark):
            await self.lossless(WireMarkEcho(ctl.id))
        elif isinstance(ctl, ClientStop):
            await self.lossless(WireHangup())
            self.hung_up()

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
            self.request_fatal(CloseCode.POLICY, ErrorCode.AUDIO_FLOOD,
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

    def notify_fault(self, kind: enum.Enum, message: str) -> None:
        if len(self.notices) < NOTICE_CAPACITY:
            self.notices.append(error_message(ErrorCode(kind.value), message, fatal=False))
            self.ends.out.wake()

    # --- writer ----------------------------------------------------------------------------

    def next_pending(self) -> str | None:
        return self.notices.popleft() if self.notices else None

    async def goodbye(self, ending: Ending, failure: CallFailure | None = None) -> None:
        if ending is Ending.FATAL:
            assert self.fatal is not None
            f = self.fatal
            await self._goodbye(StopKind.ERROR, f.close, error_message(ErrorCode(f.kind.value), f.message, fatal=True))
        elif ending is Ending.SHUTDOWN:
            await self._goodbye(StopKind.SHUTDOWN, CloseCode.GOING_AWAY)
        elif ending is Ending.ENDED:
            await self._goodbye(StopKind.ENDED, CloseCode.NORMAL)
        else:  # the engine failed: error, stop{error}, 1011
            assert failure is not None
            self.stats.faults += 1
            await self._goodbye(StopKind.ERROR, CloseCode.INTERNAL_ERROR, error_message(
                ErrorCode(failure.kind.value), failure.message, fatal=True))

    async def _goodbye(self, stop: StopKind, close: int, extra: str | None = None) -> None:
        await self.close(close, "", ([extra] if extra is not None else []) + [stop_message(stop)])

    async def send_audio(self, frame: OutputAudioFrame) -> None:
        cfg = self.cfg
        data = frame.pcm if self.encoding is AudioEncoding.PCM16 else ulaw_encode(frame.pcm)
        limit = cfg.max_audio_bytes - (cfg.max_audio_bytes % 2)
        if len(data) <= limit:
            await self.write(data)
        else:
            for i in range(0, len(data), limit):
                await self.write(data[i:i + limit])
        self.stats.frames_out += 1

    async def send_clear(self, epoch: int) -> None:
        await self.write(clear_message(epoch))

    async def send_mark(self, mark_id: str) -> None:
        if len(mark_id.encode()) > MAX_MARK_ID_BYTES:
            await self.fault(ErrorCode.MARK_ID_TOO_LONG,
                             f"a mark id of {len(mark_id.encode())} bytes is over {MAX_MARK_ID_BYTES}")
        else:
            await self.write(mark_message(mark_id))
