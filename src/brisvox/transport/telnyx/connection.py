"""One Telnyx media stream (bidirectional RTP mode) over one accepted WebSocket (the asyncio shell).

The carrier loop (:mod:`brisvox.transport.telephony.carrier`, shared with Twilio) with
Telnyx's differences:

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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

from brisvox.audio.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import ChannelClosed, DeadlineExceeded
from brisvox.transport.events import CallFailure, CallInfo, WireDtmf, WireFault
from brisvox.transport.link import CallEnds, CallLink
from brisvox.transport.telephony.carrier import CarrierCall, read_start
from brisvox.transport.telephony.wire import CarrierProtocolError, FaultKind, decode_media, secret_equal
from brisvox.transport.telnyx.config import CallRegistry, TelnyxConfig, TelnyxStats
from brisvox.transport.telnyx.protocol import (
    MEDIA_RATE,
    Codec,
    Connected,
    InboundDtmf,
    InboundMark,
    InboundMedia,
    InboundStop,
    OutboundEncoder,
    StreamStart,
    TelnyxError,
    parse_message,
)
from brisvox.transport.telnyx.reorder import DtmfOrder, Reorder
from brisvox.transport.websocket.config import ServerConfig
from brisvox.transport.websocket.loop import Ending, PeerClosed, WsPeer, close_peer
from brisvox.transport.websocket.protocol import CloseCode

__all__ = ["run_call"]

log = logging.getLogger(__name__)

_MAX_BEFORE_START = 64
_MIN_PIECE = 160  # 20 ms: the shortest media message Telnyx takes


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
            await close_peer(peer, clock, config, CloseCode.POLICY, "one stream per call")
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
        call = _TelnyxCall(peer, clock, config, info, shutdown, stats, telnyx, start, registry)
        await call.host(deliver(call.link), register)
    except (PeerClosed, DeadlineExceeded, ChannelClosed):
        pass


async def _read_start(peer: WsPeer, clock: Clock, config: ServerConfig, telnyx: TelnyxConfig,
                      stats: TelnyxStats, header_ok: bool) -> StreamStart | None:
    """``connected`` then ``start`` within ``start_timeout`` (frames that overtake start are
    dropped, counted); None: refused."""
    proven = header_ok or telnyx.auth_token is None

    async def step(frame: str) -> StreamStart | str | None:
        nonlocal proven
        try:
            msg = parse_message(frame)
        except CarrierProtocolError as exc:
            if exc.kind is FaultKind.UNSUPPORTED_FORMAT and proven and exc.call_control_id:
                await _hangup(telnyx, clock, stats, exc.call_control_id)
            return exc.message
        if isinstance(msg, Connected):
            if msg.auth_token is not None and telnyx.auth_token is not None:
                proven = proven or secret_equal(msg.auth_token.reveal(), telnyx.auth_token.reveal())
            return None
        if isinstance(msg, StreamStart):
            if not proven:
                stats.refused_auth += 1
                return "no valid x-telnyx-streaming-auth-token before start"
            return msg
        stats.media_before_start += 1
        return None

    return await read_start(peer, clock, config, stats, "telnyx", _MAX_BEFORE_START + 2, step,
                            f"more than {_MAX_BEFORE_START} frames before start")


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


class _TelnyxCall(CarrierCall[TelnyxStats]):
    label = "telnyx"
    peer_name = "Telnyx"
    min_piece = _MIN_PIECE

    def __init__(self, peer: WsPeer, clock: Clock, config: ServerConfig, info: CallInfo, shutdown: asyncio.Event,
                 stats: TelnyxStats, telnyx: TelnyxConfig, start: StreamStart, registry: CallRegistry) -> None:
        pcmu = telnyx.codec is Codec.PCMU
        super().__init__(peer, clock, config, info, shutdown, stats, telnyx, OutboundEncoder(),
                         ulaw_encode if pcmu else alaw_encode, telnyx.codec.silence)
        self.telnyx = telnyx
        self.registry = registry
        self.decode = ulaw_decode if start.codec is Codec.PCMU else alaw_decode
        self.reorder = Reorder(telnyx.reorder_window, telnyx.reorder_timeout)
        self.dtmf = DtmfOrder(telnyx.reorder_timeout)
        self.holding = asyncio.Event()
        self.stopped_by_telnyx = False  # Telnyx sent stop: the call is over at Telnyx, no hang-up needed
        self.hangup_done = False

    parse = staticmethod(parse_message)

    async def refuse_busy(self) -> None:
        self.registry.forget(self.call_id)
        await _hangup(self.telnyx, self.clock, self.stats, self.call_id)
        await close_peer(self.peer, self.clock, self.cfg, CloseCode.TRY_AGAIN, "server busy")

    def release(self) -> None:
        self.registry.release(self.call_id)

    def extra_tasks(self) -> dict[str, Coroutine[Any, Any, None]]:
        return {"reorder-timer": self._timer()}

    async def finish(self) -> None:
        await self._hangup()  # a broken socket: the writer never said goodbye
        await super().finish()
        stats, order = self.stats, self.reorder
        stats.media_reordered += order.reordered
        stats.media_late += order.late
        stats.media_duplicate += order.duplicates
        stats.media_lost += order.gaps
        stats.chunk_resyncs += order.resyncs
        stats.dtmf_reordered += self.dtmf.reordered

    async def _hangup(self) -> None:
        if self.hangup_done or self.stopped_by_telnyx:
            return
        self.hangup_done = True
        await _hangup(self.telnyx, self.clock, self.stats, self.call_id)

    async def goodbye(self, ending: Ending, failure: CallFailure | None = None) -> None:
        await self._hangup()
        await super().goodbye(ending, failure)

    # --- reader ----------------------------------------------------------------------------

    async def before_close(self) -> None:
        await self._release_all()

    async def on_message(self, msg: object) -> None:
        if isinstance(msg, InboundMedia):
            await self._media(msg)
        elif isinstance(msg, InboundMark):
            await self.echo(msg.name)
        elif isinstance(msg, InboundDtmf):
            if msg.sequence is None:
                await self.lossless(WireDtmf(msg.digit, self.last_seen))
            else:
                await self._digits(self.dtmf.offer(msg.sequence, msg.digit, self.last_seen))
                self.holding.set()
        elif isinstance(msg, InboundStop):
            self.stopped_by_telnyx = True
            await self._release_all()
            await self.stopped()
        elif isinstance(msg, TelnyxError):
            self.stats.telnyx_errors += 1
            text = f"Telnyx error {msg.code}: {msg.title} {msg.detail}".strip()
            log.warning("telnyx call %s: %s", self.call_id, text)
            await self.lossless(WireFault(FaultKind.TELNYX_ERROR.value, text, False))
        else:
            await self.fault(FaultKind.UNEXPECTED, f"a second {type(msg).__name__} message")

    async def _media(self, msg: InboundMedia) -> None:
        if msg.track != "inbound":
            return  # not the caller
        data: bytes | None = None
        problem: CarrierProtocolError | None = None
        try:
            data = decode_media(msg.payload, self.cfg.max_audio_bytes)
        except CarrierProtocolError as exc:
            problem = exc  # the chunk still takes its place in the order (a gap)
        self.stats.media_in += 1
        if data is not None and not self.admit_audio(len(data)):
            data = None  # over the rate: dropped, but it still fills its place in the order
        if msg.chunk is None:
            self._play([data])
        else:
            resyncs = self.reorder.resyncs
            self._play(self.reorder.offer(msg.chunk, data, self.last_seen))
            if self.reorder:
                self.holding.set()
            if self.reorder.resyncs != resyncs:
                await self.fault(FaultKind.CHUNK_RESYNC, "the media chunk numbering jumped; re-anchored on the newest")
        if problem is not None:
            await self.fault(problem.kind, problem.message)

    def _play(self, payloads: list[bytes | None]) -> None:
        for data in payloads:
            if data is not None:
                self.audio_in(self.decode(data), MEDIA_RATE, self.clock.now())

    async def _digits(self, digits: list[str]) -> None:
        for digit in digits:
            await self.lossless(WireDtmf(digit, self.clock.now()))

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
