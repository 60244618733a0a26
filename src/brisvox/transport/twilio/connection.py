"""One Twilio Media Streams call over one accepted WebSocket (the thin asyncio shell).

:func:`run_call` reads ``connected``/``start`` within ``start_timeout``, builds the
:class:`CallInfo` (``call_id`` = ``callSid``; metadata: the stream's custom parameters,
without ``token``, then the server's keys, which win; an ``admit`` hook may refuse the
``start``, 1008), hands the link to ``deliver`` and runs the carrier loop
(:mod:`brisvox.transport.telephony.carrier`: reader, writer, monitor) with Twilio's
messages: ``media`` -> base64 -> mu-law -> PCM16 -> WireAudio (lost chunks counted),
``mark`` echoes, ``dtmf``, ``stop`` -> WireHangup (``media`` under the caller-audio rate
limit); out: mu-law ``media`` in ``chunk_bytes`` pieces, ``mark``, ``clear``.  A bad frame is a fault; past ``max_faults``
the call is closed (1008).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from brisvox.audio.g711 import ulaw_decode, ulaw_encode
from brisvox.core.clock import Clock
from brisvox.core.errors import ChannelClosed, DeadlineExceeded
from brisvox.transport.events import CallInfo, WireDtmf
from brisvox.transport.link import CallEnds, CallLink
from brisvox.transport.telephony.carrier import CarrierCall, read_start, refuse
from brisvox.transport.telephony.wire import CarrierProtocolError, FaultKind, decode_media
from brisvox.transport.twilio.config import TwilioConfig, TwilioStats
from brisvox.transport.twilio.protocol import (
    MEDIA_RATE,
    Connected,
    InboundDtmf,
    InboundMark,
    InboundMedia,
    InboundStop,
    OutboundEncoder,
    StreamStart,
    parse_message,
)
from brisvox.transport.websocket.config import ServerConfig
from brisvox.transport.websocket.loop import PeerClosed, WsPeer, close_peer
from brisvox.transport.websocket.protocol import CloseCode

__all__ = ["run_call"]


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
        start = await read_start(peer, clock, config, stats, "twilio", 2, _start_step, "no start after connected")
        if start is None:
            return
        if admit is not None and (why := admit(start)) is not None:
            await refuse(peer, clock, config, stats, "twilio", why)
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
        call = _TwilioCall(peer, clock, config, info, shutdown, stats, twilio, OutboundEncoder(start.stream_sid),
                           ulaw_encode, 0xFF)
        await call.host(deliver(call.link), register)
    except (PeerClosed, DeadlineExceeded, ChannelClosed):
        pass


async def _start_step(frame: str) -> StreamStart | str | None:
    """``connected`` (optional) then ``start``."""
    try:
        msg = parse_message(frame)
    except CarrierProtocolError as exc:
        return exc.message
    if isinstance(msg, StreamStart):
        return msg
    if not isinstance(msg, Connected):
        return f"{type(msg).__name__} before start"
    return None


class _TwilioCall(CarrierCall[TwilioStats]):
    label = "twilio"
    peer_name = "Twilio"
    next_chunk: int | None = None

    parse = staticmethod(parse_message)

    async def refuse_busy(self) -> None:
        await close_peer(self.peer, self.clock, self.cfg, CloseCode.TRY_AGAIN, "server busy")

    async def on_message(self, msg: object) -> None:
        if isinstance(msg, InboundMedia):
            problem = self._media(msg)
            if problem is not None:
                await self.fault(problem.kind, problem.message)
        elif isinstance(msg, InboundMark):
            await self.echo(msg.name)
        elif isinstance(msg, InboundDtmf):
            await self.lossless(WireDtmf(msg.digit, self.last_seen))
        elif isinstance(msg, InboundStop):
            await self.stopped()
        else:
            await self.fault(FaultKind.UNEXPECTED, f"a second {type(msg).__name__} message")

    def _media(self, msg: InboundMedia) -> CarrierProtocolError | None:
        """Caller audio (synchronous: the hot path); returns the fault of a bad payload."""
        if msg.track != "inbound":
            return None  # a fork's outbound track: not the caller
        try:
            mulaw = decode_media(msg.payload, self.cfg.max_audio_bytes)
        except CarrierProtocolError as exc:
            return exc
        self.stats.media_in += 1
        if msg.chunk is not None:
            if self.next_chunk is not None and msg.chunk > self.next_chunk:
                self.stats.lost_chunks += msg.chunk - self.next_chunk
            self.next_chunk = msg.chunk + 1
        if self.admit_audio(len(mulaw)):
            self.audio_in(ulaw_decode(mulaw), MEDIA_RATE, self.last_seen)
        return None
