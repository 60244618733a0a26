"""The connection loop of the carrier adapters (Twilio, Telnyx): the shared WebSocket loop
(:mod:`brisvox.transport.websocket.loop`) with what both carriers' media streams have in
common.

* Before the call: :func:`read_start` reads the frames before the carrier's ``start``
  within ``start_timeout``; a refusal is only a close frame (1008: carriers take no error
  message).
* Reader: JSON text frames only (a binary frame is a fault, one over ``max_control_bytes``
  fatal, 1009); the adapter's ``parse`` gives typed messages; a mark echo resolves through
  the :class:`~brisvox.transport.telephony.MarkBook` (an engine mark -> WireMarkEcho; every
  echo -> WireLead, the audio sent and not played yet); ``stop`` is the caller's hang-up.
* Writer: PCM16 -> G.711 in ``chunk_bytes`` pieces, one ``media`` message each, a progress
  mark every ``progress_interval`` of audio; a tail under ``min_piece`` is carried to the
  next audio (padded with silence when an engine mark follows, dropped by a clear); engine
  marks as ``e<n>``; a clear makes the book forget every mark.  The goodbye is the close
  frame alone: 1000, 1001 on shutdown, 1011 on an engine failure, the fault's code on a
  fatal fault.
* Monitor: no pings (the carrier streams media every 20 ms, silence included): nothing from
  the carrier for ``ping_timeout`` ends the call (``idle_timeout``, 1008), and so does
  ``max_call_duration``.
* Caller-audio rate limit: the WebSocket route's limit (``audio_rate``, ``audio_burst``,
  ``audio_flood``) applies to every ``media`` message through
  :mod:`brisvox.transport.telephony.rate` (:meth:`CarrierCall.admit_audio`): audio over the
  rate is dropped (``audio_dropped``), a flood closes the call (1008, ``audio_flood``,
  ``audio_floods``).
"""

from __future__ import annotations

import abc
import asyncio
import enum
import logging
from collections.abc import Awaitable, Callable
from typing import ClassVar, Protocol, TypeVar

from brisvox.core.clock import Clock, deadline
from brisvox.core.errors import DeadlineExceeded
from brisvox.core.frames import OutputAudioFrame
from brisvox.transport.events import CallFailure, CallInfo, WireHangup, WireLead, WireMarkEcho
from brisvox.transport.telephony.marks import MarkBook, MarkKind
from brisvox.transport.telephony.rate import admit_audio, audio_limit
from brisvox.transport.telephony.wire import CarrierProtocolError, FaultKind
from brisvox.transport.websocket.config import ServerConfig
from brisvox.transport.websocket.limits import AudioVerdict
from brisvox.transport.websocket.loop import Ending, Kinds, LoopStats, WsCall, WsPeer, close_peer
from brisvox.transport.websocket.protocol import CloseCode

__all__ = ["CARRIER_KINDS", "CarrierCall", "CarrierConfig", "CarrierStats", "Encoder", "read_start", "refuse"]

log = logging.getLogger(__name__)

MEDIA_RATE = 8000  # both carriers stream G.711 at 8 kHz

CARRIER_KINDS = Kinds(overloaded=FaultKind.OVERLOADED, too_many_faults=FaultKind.TOO_MANY_FAULTS,
                      too_big=FaultKind.TOO_BIG, protocol_error=FaultKind.INVALID_MESSAGE,
                      rate_mismatch=FaultKind.OUTPUT_RATE_MISMATCH, silence=FaultKind.IDLE_TIMEOUT,
                      idle=FaultKind.IDLE_TIMEOUT, max_duration=FaultKind.MAX_DURATION)


class CarrierStats(LoopStats, Protocol):
    refused_start: int
    media_in: int
    media_out: int
    marks_sent: int
    marks_echoed: int
    marks_cut: int
    marks_unmatched: int
    marks_evicted: int
    clears: int
    audio_dropped: int
    audio_floods: int
    max_echo_latency: float
    max_unplayed: float


class CarrierConfig(Protocol):
    @property
    def chunk_bytes(self) -> int: ...

    @property
    def progress_interval(self) -> float: ...

    @property
    def max_marks(self) -> int: ...


class Encoder(Protocol):
    """The carrier's outbound messages."""

    def media(self, payload: bytes | bytearray | memoryview) -> str: ...

    def mark(self, name: str) -> str: ...

    def clear(self) -> str: ...


class _Refused(Exception):
    pass


T = TypeVar("T")


async def refuse(peer: WsPeer, clock: Clock, config: ServerConfig, stats: CarrierStats, label: str,
                 why: str) -> None:
    """Close a stream before the call is handed over (carriers take no error message)."""
    stats.refused_start += 1
    log.info("%s stream from %s refused: %s", label, peer.remote, why)
    await close_peer(peer, clock, config, CloseCode.POLICY, why[:120])


async def read_start(peer: WsPeer, clock: Clock, config: ServerConfig, stats: CarrierStats, label: str,
                     frames: int, step: Callable[[str], Awaitable[T | str | None]], exhausted: str) -> T | None:
    """Read at most ``frames`` text frames within ``start_timeout``: ``step`` gives the start,
    a reason to refuse (a string) or None (read on).  None: the stream was refused."""
    try:
        async with deadline(clock, config.start_timeout, f"{label} start"):
            for _ in range(frames):
                frame = await peer.recv()
                if isinstance(frame, bytes) or len(frame) > config.max_control_bytes:
                    why = "a binary frame" if isinstance(frame, bytes) else "an oversized frame"
                    raise _Refused(f"{why} before start")
                got = await step(frame)
                if isinstance(got, str):
                    raise _Refused(got)
                if got is not None:
                    return got
            raise _Refused(exhausted)
    except DeadlineExceeded:
        why = f"no start within {config.start_timeout:g} s"
    except _Refused as exc:
        why = str(exc)
    await refuse(peer, clock, config, stats, label, why)
    return None


CS = TypeVar("CS", bound=CarrierStats)


class CarrierCall(WsCall[CS]):
    """A carrier stream's loop (see the module docs).  An adapter supplies ``label``,
    ``peer_name``, :meth:`parse`, :meth:`on_message` and the codec."""

    kinds = CARRIER_KINDS
    pings = False
    tracks_audio = False
    silence_counter = "idle_timeouts"
    fatal_log_level = logging.WARNING
    min_piece: ClassVar[int] = 1  # bytes: a shorter tail waits for the next audio

    def __init__(self, peer: WsPeer, clock: Clock, config: ServerConfig, info: CallInfo, shutdown: asyncio.Event,
                 stats: CS, carrier: CarrierConfig, encoder: Encoder, encode: Callable[[bytes], bytes],
                 silence: int) -> None:
        super().__init__(peer, clock, config, info, shutdown, stats, out_rate=MEDIA_RATE)
        self.carrier = carrier
        self.encoder = encoder
        self.encode = encode
        self.silence = silence  # the codec's byte of digital silence
        self.book = MarkBook(carrier.max_marks)
        self.carry = bytearray()
        self.sent_bytes = 0  # G.711 bytes sent = samples at 8 kHz
        self.progress_step = int(carrier.progress_interval * MEDIA_RATE)
        self.next_progress = self.progress_step
        self.audio_limit = audio_limit(config)

    parse: Callable[[str], object]  # one text frame as a typed message; raises CarrierProtocolError

    @abc.abstractmethod
    async def on_message(self, msg: object) -> None:
        """One typed message while the call is fed."""

    async def finish(self) -> None:
        self.stats.marks_evicted += self.book.evicted
        self.stats.marks_unmatched += self.book.unmatched

    # --- reader ----------------------------------------------------------------------------

    async def on_frame(self, frame: bytes | str) -> None:
        if isinstance(frame, bytes):
            await self.fault(FaultKind.BINARY_FRAME, f"the {self.peer_name} stream carries text frames only")
            return
        if len(frame) > self.cfg.max_control_bytes:
            self.request_fatal(CloseCode.TOO_BIG, FaultKind.TOO_BIG,
                               f"a frame of {len(frame)} characters is over {self.cfg.max_control_bytes}")
            return
        try:
            msg = self.parse(frame)
        except CarrierProtocolError as exc:
            await self.fault(exc.kind, exc.message)
            return
        await self.on_message(msg)

    def admit_audio(self, size: int) -> bool:
        """The caller-audio rate limit's verdict on a media message of ``size`` G.711 bytes
        (False: drop it); a flood ends the call (1008)."""
        verdict = admit_audio(self.audio_limit, size, self.last_seen, self.stats)
        if verdict is AudioVerdict.FLOOD:
            assert self.audio_limit is not None  # no limit, no flood
            self.request_fatal(CloseCode.POLICY, FaultKind.AUDIO_FLOOD,
                               f"caller audio keeps arriving faster than real time "
                               f"({self.audio_limit.dropped:.1f} s dropped)")
        return verdict is AudioVerdict.PASS

    def notify_fault(self, kind: enum.Enum, message: str) -> None:
        log.info("%s call %s: %s: %s", self.label, self.call_id, kind.value, message)

    async def echo(self, name: str) -> None:
        echo = self.book.echo(name, at=self.clock.now())
        if echo is None:
            return  # unknown, evicted, or flushed by a clear: never a played mark
        stats = self.stats
        stats.marks_echoed += 1
        stats.max_echo_latency = max(stats.max_echo_latency, echo.latency)
        lead = max(0, self.sent_bytes - echo.position) / MEDIA_RATE
        stats.max_unplayed = max(stats.max_unplayed, lead)
        if echo.kind is MarkKind.ENGINE and echo.engine_id is not None:
            await self.lossless(WireMarkEcho(echo.engine_id))
        if not self.ends.events.closed:
            self.ends.events.try_send(WireLead(lead))  # advisory: dropped when the engine lags

    async def stopped(self) -> None:
        """The carrier's ``stop``: the caller hung up."""
        await self.lossless(WireHangup())
        self.hung_up()

    # --- writer ----------------------------------------------------------------------------

    async def goodbye(self, ending: Ending, failure: CallFailure | None = None) -> None:
        if ending is Ending.FATAL:
            assert self.fatal is not None
            await self.close(self.fatal.close, self.fatal.kind.value)
        elif ending is Ending.SHUTDOWN:
            await self.close(CloseCode.GOING_AWAY, "shutdown")
        elif ending is Ending.FAILED:
            await self.close(CloseCode.INTERNAL_ERROR, "engine failed")
        else:
            await self.close(CloseCode.NORMAL, "")

    async def send_audio(self, frame: OutputAudioFrame) -> None:
        encoded = self.encode(frame.pcm)
        if self.carry:
            self.carry += encoded
            data: bytes | bytearray = self.carry
        else:
            data = encoded
        step, stats, media = self.carrier.chunk_bytes, self.stats, self.encoder.media
        size = len(data)
        tail = size % step
        if tail >= self.min_piece:
            tail = 0  # a last piece of min_piece or more goes out as it is
        view = memoryview(data)
        for i in range(0, size - tail, step):  # the hot path: _send_piece inline
            piece = view[i:i + step]
            await self.write(media(piece))
            self.sent_bytes += len(piece)
            stats.media_out += 1
            if self.sent_bytes >= self.next_progress:
                await self._progress()
        if tail or self.carry:
            rest = bytes(view[size - tail:])
            piece = view  # drop the last slice: no export of the carry may outlive the loop
            view.release()
            self.carry[:] = rest  # under min_piece: carried to the next audio

    async def send_clear(self, epoch: int) -> None:
        self.carry.clear()
        self.stats.marks_cut += self.book.clear()
        self.stats.clears += 1
        await self.write(self.encoder.clear())

    async def send_mark(self, mark_id: str) -> None:
        if self.carry:  # the carried tail, padded with silence to min_piece, plays before the mark
            self.carry.extend(bytes([self.silence]) * (self.min_piece - len(self.carry)))
            piece = bytes(self.carry)
            self.carry.clear()
            await self._send_piece(piece)
        name = self.book.engine(mark_id, at=self.clock.now(), position=self.sent_bytes)
        self.stats.marks_sent += 1
        await self.write(self.encoder.mark(name))

    async def _send_piece(self, piece: bytes | memoryview) -> None:
        await self.write(self.encoder.media(piece))
        self.sent_bytes += len(piece)
        self.stats.media_out += 1
        if self.sent_bytes >= self.next_progress:
            await self._progress()

    async def _progress(self) -> None:
        self.next_progress = self.sent_bytes + self.progress_step
        name = self.book.progress(at=self.clock.now(), position=self.sent_bytes)
        await self.write(self.encoder.mark(name))
