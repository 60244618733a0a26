"""One WebRTC call over one aiortc peer connection (the asyncio shell).

:func:`answer_offer` builds the call from a browser's SDP offer: an
``RTCPeerConnection`` with no STUN/TURN servers of its own, host candidates only for
``WebRtcConfig.hosts`` (:func:`host_addresses`), the paced :class:`OutboundTrack` on the
audio transceiver, and the answer (gathering bounded by ``gather_timeout``).  A bad offer
raises :class:`OfferRejected` naming what was wrong.

:meth:`WebRtcCall.run` then waits up to ``connect_timeout`` (injected clock) for ICE and
DTLS; an offer that never connects is abandoned there and the engine never sees it.  Once
connected the call pair is built (``WireStarted`` with ``input_rate`` in and
``output_rate`` out), handed to ``deliver`` and served by three tasks in one
:class:`~brisvox.core.tasks.TaskScope`:

* the **reader**: the browser's track (aiortc decodes Opus in its decoder thread) ->
  :class:`~brisvox.transport.webrtc.media.InboundAudio` -> ``WireAudio`` (drop-oldest,
  never waits).  No frame for ``idle_timeout``: the browser vanished.  RTP packets past
  ``max_audio_packets_per_sec`` are dropped before they reach the decoder (counted).
* the **writer** (the only task that feeds the track): engine audio ->
  :class:`~brisvox.transport.webrtc.media.OutboundAudio`; a clear drops what is buffered and
  forgets the pending marks; a mark flushes the partial frame and waits in
  :class:`~brisvox.transport.webrtc.media.PlayoutMarks`.
* engine events (JSON text) go to the page over its data channel, if the offer opened one
  (:meth:`WebRtcCall.send_text`, bounded, never waits).
* the **monitor** (every 10 ms): acknowledges the marks whose estimated playout passed, and
  ends the call on ``DELETE`` (a hang-up), a DTLS close (a hang-up), an ICE failure (a lost
  peer), ``max_call_duration`` or a packet flood.

The track sends one 20 ms frame per 20 ms on the injected clock (silence when nothing is
buffered), encoded to Opus by its own encoder in the default executor (codec work never runs on
the loop) and handed to aiortc as a packet with the track's timestamps; a clear resets the
encoder while the timestamps run on (docs/WEBRTC.md, Audio).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import fractions
import itertools
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextvars import ContextVar
from typing import Any

import aioice.ice
import av
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.jitterbuffer import JitterBuffer
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

from brisvox.core.channel import WAKE
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import BrisvoxError, ChannelClosed, DeadlineExceeded
from brisvox.core.tasks import TaskScope
from brisvox.transport.events import (
    CallInfo,
    WireAudio,
    WireAudioOut,
    WireClear,
    WireEvent,
    WireFault,
    WireHangup,
    WireHangupOut,
    WireMark,
    WireMarkEcho,
    WireStarted,
)
from brisvox.transport.link import CallEnds, CallLink, call_pair, hand_off
from brisvox.transport.webrtc.config import WebRtcConfig, WebRtcStats
from brisvox.transport.webrtc.media import (
    FRAME_SAMPLES,
    OPUS_RATE,
    SILENT_FRAME,
    InboundAudio,
    OutboundAudio,
    PlayoutMarks,
)
from brisvox.transport.webrtc.opus import OpusEncoder
from brisvox.transport.websocket.limits import AudioRateLimit, AudioVerdict

__all__ = ["EndReason", "OfferRejected", "OutboundTrack", "WebRtcCall", "answer_offer", "host_addresses"]

log = logging.getLogger(__name__)

FRAME = FRAME_SAMPLES / OPUS_RATE
TICK = 0.01
RESYNC_AFTER = 0.02
_TIME_BASE = fractions.Fraction(1, OPUS_RATE)
CONNECT_POLL = 0.25
MAX_PENDING_EVENTS = 64
MAX_EVENT_BUFFER = 256 * 1024


class OfferRejected(BrisvoxError):
    """The offer cannot be answered (the message says why; it reaches the client as a 400)."""


class EndReason(enum.Enum):
    ABANDONED = "abandoned"  # never connected within connect_timeout
    HANGUP = "hangup"  # DELETE or the browser's DTLS close
    LOST = "lost"  # ICE failed or no audio for idle_timeout
    ENGINE = "engine"  # the engine hung up
    BUSY = "busy"  # the engine did not take the call
    SHUTDOWN = "shutdown"
    LIMIT = "limit"  # max_call_duration, a packet flood, too many faults
    ENCODER = "encoder"  # our Opus encoder failed


# --- host candidates -------------------------------------------------------------------------

_HOSTS: ContextVar[tuple[str, ...] | None] = ContextVar("brisvox_webrtc_hosts", default=None)
_system_host_addresses = aioice.ice.get_host_addresses


def _configured_host_addresses(use_ipv4: bool, use_ipv6: bool) -> list[str]:
    hosts = _HOSTS.get()
    if hosts is None:
        return list(_system_host_addresses(use_ipv4=use_ipv4, use_ipv6=use_ipv6))
    return [h for h in hosts if (use_ipv6 if ":" in h else use_ipv4)]


# aioice gathers from every interface (and leaves loopback out); a peer connection built inside
# ``host_addresses`` offers exactly the operator's addresses instead.  The hook reads a context
# variable, so code outside it (any other aioice user in the process) is unaffected.
aioice.ice.get_host_addresses = _configured_host_addresses


@contextlib.contextmanager
def host_addresses(hosts: tuple[str, ...]) -> Iterator[None]:
    """Peer connections that gather candidates inside this block offer ``hosts`` only."""
    token = _HOSTS.set(tuple(hosts))
    try:
        yield
    finally:
        _HOSTS.reset(token)


# --- the outbound track ------------------------------------------------------------------------


class OutboundTrack(MediaStreamTrack):
    """The bot's audio as aiortc pulls it: one 20 ms frame per 20 ms on the injected clock
    (a late pull restarts the grid), silence when nothing is buffered, encoded to Opus here
    (our :class:`~brisvox.transport.webrtc.opus.OpusEncoder`, in the default executor) and
    handed to aiortc's sender as a packet with our own timestamp (48 kHz, 960 per frame),
    which aiortc only packs.  :meth:`reset_encoder` (a clear) throws the encoder's state away;
    the timestamps run on, so the browser's jitter buffer sees no jump.  An encoder failure
    is logged with its traceback and reported to ``on_failed``; the track then ends."""

    kind = "audio"

    def __init__(self, clock: Clock, audio: OutboundAudio, on_sent: Callable[[int, float], None],
                 on_failed: Callable[[BaseException], None], call_id: str = "") -> None:
        super().__init__()
        self._call_id = call_id
        self._clock = clock
        self._audio = audio
        self._on_sent = on_sent
        self._on_failed = on_failed
        self._next: float | None = None
        self._pts = 0
        self._encoder: OpusEncoder | None = None
        self.encoder_resets = 0

    def reset_encoder(self) -> None:
        """The next frame is encoded by a new encoder: nothing from before it reaches the browser
        through the encoder's look-ahead.  A frame already being encoded still leaves."""
        self._encoder = None
        self.encoder_resets += 1

    async def recv(self) -> av.Packet[Any]:
        if self.readyState != "live":
            raise MediaStreamError
        now = self._clock.now()
        if self._next is None or now - self._next > RESYNC_AFTER:
            self._next = now
        else:
            await self._clock.sleep_until(self._next)
        self._next += FRAME
        pcm = self._audio.take() or SILENT_FRAME
        self._on_sent(self._audio.sent_total, self._clock.now())
        if self._encoder is None:
            self._encoder = OpusEncoder()
        try:
            # about 80-180 us a frame: off the loop, like aiortc's own encoder (docs/WEBRTC.md)
            payload = await asyncio.get_running_loop().run_in_executor(None, self._encoder.encode, pcm)
        except Exception as exc:
            log.exception("webrtc call %s: the Opus encoder failed; the call's audio ends", self._call_id)
            self._on_failed(exc)
            self.stop()
            raise MediaStreamError from exc
        packet = av.Packet(payload)
        packet.pts = self._pts
        packet.time_base = _TIME_BASE
        self._pts += FRAME_SAMPLES
        return packet


# --- the call ------------------------------------------------------------------------------------


async def answer_offer(offer_sdp: str, *, clock: Clock, config: WebRtcConfig, stats: WebRtcStats,
                       call_id: str, metadata: dict[str, str] | None = None) -> WebRtcCall:
    """A call answering ``offer_sdp`` (see the module docs); raises :class:`OfferRejected`."""
    stats.offers += 1
    call = WebRtcCall(clock, config, stats, call_id, metadata or {})
    try:
        with host_addresses(config.hosts):
            await bounded(clock, config.gather_timeout, call._negotiate(offer_sdp), "webrtc answer")
    except BaseException as exc:
        await call.close_peer()
        if isinstance(exc, OfferRejected | DeadlineExceeded) or not isinstance(exc, Exception):
            raise
        # aiortc raises ValueError/InvalidStateError/... for an offer it cannot take
        raise OfferRejected(f"the offer cannot be answered: {type(exc).__name__}: {str(exc)[:160]}") from exc
    return call


class WebRtcCall:
    """One browser call (see the module docs)."""

    def __init__(self, clock: Clock, config: WebRtcConfig, stats: WebRtcStats, call_id: str,
                 metadata: dict[str, str]) -> None:
        self.clock = clock
        self.cfg = config
        self.stats = stats
        self.call_id = call_id
        self.metadata = metadata
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.outbound = OutboundAudio(capacity=config.outbound_frames)
        self.marks = PlayoutMarks(config.mark_delay)
        self.inbound = InboundAudio(config.input_rate, config.max_concealed_frames)
        self.track = OutboundTrack(clock, self.outbound, self.marks.sent, self._encoder_failed, call_id)
        self.limit = AudioRateLimit(ratio=config.max_audio_packets_per_sec * FRAME, burst=config.packet_burst,
                                    flood=config.packet_burst * 10)
        self.remote: MediaStreamTrack | None = None
        self._receiver: Any = None
        self.channel: Any = None  # the browser's data channel: the engine's JSON events go there
        self._pending_events: deque[str] = deque()
        self.events_dropped = 0
        self.answer_sdp = ""
        self.connected = asyncio.Event()
        self.broken = asyncio.Event()
        self.hangup_requested = asyncio.Event()
        self.end_reason: EndReason | None = None
        self.ends: CallEnds | None = None
        self._remote_closed = False
        self._seq = itertools.count()
        self._faults = 0
        self._closed = False
        self.pc.on("connectionstatechange", self._state_changed)

    # --- signaling ---------------------------------------------------------------------------

    async def _negotiate(self, offer_sdp: str) -> None:
        pc = self.pc

        @pc.on("track")
        def on_track(track: MediaStreamTrack) -> None:
            if track.kind == "audio" and self.remote is None:
                self.remote = track

        @pc.on("datachannel")
        def on_channel(channel: Any) -> None:
            if self.channel is not None:
                channel.close()  # one event channel per call
                return
            self.channel = channel
            channel.on("open", self._flush_events)
            if channel.readyState == "open":
                self._flush_events()

        await pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
        audio = [t for t in pc.getTransceivers() if t.kind == "audio"]
        if not audio:
            raise OfferRejected("the offer has no audio section")
        if len(audio) > 1 or len(pc.getTransceivers()) > 1:
            raise OfferRejected("the offer must hold exactly one audio section (and nothing else)")
        if self.remote is None:
            raise OfferRejected("the offer sends no audio (it must be sendrecv or sendonly)")
        pc.addTrack(self.track)
        self._receiver = audio[0].receiver
        self._limit_packets(audio[0].receiver)
        self._shorten_jitter_buffer(audio[0].receiver)
        await pc.setLocalDescription(await pc.createAnswer())
        self.answer_sdp = pc.localDescription.sdp

    def _shorten_jitter_buffer(self, receiver: Any) -> None:
        """aiortc holds 4 packets (80 ms) before it decodes the first; its buffer already waits for
        a missing packet on its own, so the prefetch only adds delay.  ``jitter_prefetch`` (1: the
        next packet) replaces it (a private attribute of aiortc 1.16, checked at the call)."""
        name = "_RTCRtpReceiver__jitter_buffer"
        if not hasattr(receiver, name):
            raise RuntimeError("aiortc's receiver has no jitter buffer where 1.16 keeps it; pin aiortc==1.16.0")
        setattr(receiver, name, JitterBuffer(capacity=16, prefetch=self.cfg.jitter_prefetch))

    def _limit_packets(self, receiver: Any) -> None:
        """Drop RTP past the per-call packet rate before it reaches the jitter buffer and decoder."""
        handle = receiver._handle_rtp_packet

        async def limited(packet: Any, arrival_time_ms: int) -> None:
            self.stats.packets_in += 1
            verdict = self.limit.admit(FRAME, self.clock.now())
            if verdict is AudioVerdict.PASS:
                await handle(packet, arrival_time_ms=arrival_time_ms)
                return
            self.stats.packets_dropped += 1
            if verdict is AudioVerdict.FLOOD:
                self._request_end(EndReason.LIMIT, "audio_flood",
                                  f"more than {self.cfg.max_audio_packets_per_sec} RTP packets a second")

        setattr(receiver, "_handle_rtp_packet", limited)  # noqa: B010 - an instance override of aiortc's method

    def _state_changed(self) -> None:
        state = self.pc.connectionState
        if state == "connected":
            self.connected.set()
        elif state in ("failed", "closed"):
            self._remote_closed = state == "closed" and not self._closed
            self.broken.set()
            if self.ends is not None:
                self.ends.out.wake()

    async def send_text(self, text: str) -> None:
        """One engine event (JSON text) for the page, over its data channel.  Queued (at most
        ``MAX_PENDING_EVENTS``, oldest dropped) until the channel opens; dropped (counted) while
        the channel holds more than ``MAX_EVENT_BUFFER`` bytes unsent, so a page that stopped
        reading never holds the engine.  A call without a data channel gets no events."""
        channel = self.channel
        if channel is not None and channel.readyState == "open":
            if channel.bufferedAmount > MAX_EVENT_BUFFER:
                self.events_dropped += 1
                return
            channel.send(text)
            return
        if channel is not None and channel.readyState in ("closing", "closed"):
            self.events_dropped += 1
            return
        if len(self._pending_events) >= MAX_PENDING_EVENTS:
            self._pending_events.popleft()
            self.events_dropped += 1
        self._pending_events.append(text)

    def _flush_events(self) -> None:
        while self._pending_events and self.channel is not None:
            self.channel.send(self._pending_events.popleft())

    def _closed_by_browser(self) -> bool:
        """The browser closed the DTLS session (its ``pc.close()``): a hang-up, not a lost peer."""
        transport = getattr(self._receiver, "transport", None)
        return self._remote_closed or (not self._closed and getattr(transport, "state", None) == "closed")

    def hang_up(self) -> None:
        """The browser's DELETE."""
        self.hangup_requested.set()
        if self.ends is not None:
            self.ends.out.wake()

    async def close_peer(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            await bounded(self.clock, self.cfg.close_timeout, self.pc.close(), "webrtc close")
        except DeadlineExceeded:
            log.warning("webrtc call %s: the peer connection did not close within %.1f s", self.call_id,
                        self.cfg.close_timeout)

    # --- the call ----------------------------------------------------------------------------

    async def run(self, deliver: Callable[[CallLink], Awaitable[bool]], shutdown: asyncio.Event,
                  register: Callable[[CallEnds], Callable[[], None]] | None = None,
                  abandon_if: Callable[[], bool] | None = None) -> EndReason:
        """Serve the call until it ends; the reason it ended.  ``abandon_if`` (polled every
        ``CONNECT_POLL`` while connecting; the server's drain) ends a call that has not connected
        yet.  The peer connection is closed on every path."""
        try:
            reason = await self._run(deliver, shutdown, register, abandon_if)
        finally:
            await self.close_peer()
        self.stats.closes[reason.value] = self.stats.closes.get(reason.value, 0) + 1
        return reason

    async def _run(self, deliver: Callable[[CallLink], Awaitable[bool]], shutdown: asyncio.Event,
                   register: Callable[[CallEnds], Callable[[], None]] | None,
                   abandon_if: Callable[[], bool] | None) -> EndReason:
        if not await self._wait_connected(shutdown, abandon_if):
            return self.end_reason or EndReason.ABANDONED
        if self.end_reason is not None:  # the encoder failed while connecting: the engine never sees the call
            return self.end_reason
        metadata = dict(self.metadata)
        metadata.update({"transport": "webrtc", CallInfo.SAMPLE_RATE_KEY: str(self.cfg.input_rate),
                         CallInfo.OUTPUT_SAMPLE_RATE_KEY: str(self.cfg.output_rate), "encoding": "opus"})
        info = CallInfo(call_id=self.call_id, transport="webrtc", metadata=metadata)
        link, ends = call_pair(info)
        ends.events.try_send(WireStarted(info))
        if not await deliver(link):
            self.stats.refused_busy += 1
            return EndReason.BUSY
        self.ends = ends
        unregister = register(ends) if register is not None else None
        self.stats.calls_started += 1
        try:
            async with TaskScope(f"webrtc[{self.call_id}]") as scope:
                scope.spawn(self._reader(ends), name="reader")
                scope.spawn(self._monitor(ends), name="monitor")
                writer = scope.spawn(self._writer(ends, shutdown), name="writer")
                await writer
                scope.cancel()
        finally:
            ends.events.close()
            ends.out.close()
            if unregister is not None:
                unregister()
            self.stats.concealed_frames += self.inbound.concealed_frames
            self.stats.outbound_dropped += self.outbound.dropped
        return self.end_reason or EndReason.ENGINE

    async def _wait_connected(self, shutdown: asyncio.Event, abandon_if: Callable[[], bool] | None) -> bool:
        waits = [asyncio.ensure_future(e.wait()) for e in (self.connected, self.broken, self.hangup_requested,
                                                            shutdown)]
        until = self.clock.now() + self.cfg.connect_timeout
        try:
            while True:
                try:
                    await bounded(self.clock, min(CONNECT_POLL, max(0.0, until - self.clock.now())),
                                  asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED), "webrtc connect")
                    break
                except DeadlineExceeded:
                    if abandon_if is not None and abandon_if():
                        log.info("webrtc call %s abandoned before it connected: the server drains", self.call_id)
                        self.end_reason = EndReason.SHUTDOWN
                        return False
                    if self.clock.now() >= until:
                        self.stats.abandoned += 1
                        log.info("webrtc call %s abandoned: not connected within %.1f s", self.call_id,
                                 self.cfg.connect_timeout)
                        self.end_reason = EndReason.ABANDONED
                        return False
        finally:
            for w in waits:
                w.cancel()
            await asyncio.gather(*waits, return_exceptions=True)
        if self.connected.is_set() and not self.broken.is_set() and not self.hangup_requested.is_set():
            return True
        self.end_reason = (EndReason.SHUTDOWN if shutdown.is_set() else EndReason.HANGUP
                           if self.hangup_requested.is_set() else EndReason.ABANDONED)
        if self.end_reason is EndReason.ABANDONED:
            self.stats.abandoned += 1
        return False

    # --- reader --------------------------------------------------------------------------------

    async def _reader(self, ends: CallEnds) -> None:
        remote = self.remote
        assert remote is not None  # _negotiate refused offers without audio
        rate = self.cfg.input_rate
        while True:
            try:
                got = await bounded(self.clock, self.cfg.idle_timeout, remote.recv(), "caller audio")
            except DeadlineExceeded:
                self.stats.idle_timeouts += 1
                self._request_end(EndReason.LOST, None, f"no audio from the browser for {self.cfg.idle_timeout:g} s")
                return
            except MediaStreamError:
                self._request_end(EndReason.HANGUP if self._closed_by_browser() else EndReason.LOST, None,
                                  "the browser's track ended")
                return
            if not isinstance(got, av.AudioFrame):
                await self._fault("invalid_media", f"a {type(got).__name__} on the audio track")
                continue
            frame = got
            if frame.sample_rate != OPUS_RATE or frame.format.name != "s16":
                await self._fault("invalid_media", f"a decoded frame at {frame.sample_rate} Hz, {frame.format.name}")
                continue
            channels = len(frame.layout.channels)
            pcm = bytes(frame.planes[0])[:frame.samples * channels * 2]
            self.stats.frames_in += 1
            out = self.inbound.feed(pcm, channels=channels, pts=frame.pts)
            if out and not ends.events.closed:
                ends.audio.send(WireAudio(out, rate, next(self._seq), self.clock.now()))

    # --- writer --------------------------------------------------------------------------------

    async def _writer(self, ends: CallEnds, shutdown: asyncio.Event) -> None:
        out = ends.out
        floor = 0
        while True:
            if self.end_reason is not None or self.broken.is_set():
                return
            if shutdown.is_set():
                self.end_reason = EndReason.SHUTDOWN
                return
            if ends.ended.is_set() and not out:
                return
            try:
                got = await out.recv_or_wake()
            except ChannelClosed:
                return
            if got is WAKE:
                continue
            if isinstance(got, WireAudioOut):
                if got.frame.epoch >= floor:
                    self.outbound.push(got.frame.pcm, got.frame.sample_rate)
                    self.stats.frames_out += 1
            elif isinstance(got, WireClear):
                floor = max(floor, got.epoch)
                self.outbound.clear()
                self.track.reset_encoder()
                self.marks.clear()
            elif isinstance(got, WireMark):
                self.outbound.flush()
                self.marks.mark(got.id, self.outbound.queued_total)
                self.marks.sent(self.outbound.sent_total, self.clock.now())
            elif isinstance(got, WireHangupOut):
                if got.failure is not None:
                    log.info("webrtc call %s: the engine ended it: %s", self.call_id, got.failure.kind.value)
                return

    # --- monitor -------------------------------------------------------------------------------

    async def _monitor(self, ends: CallEnds) -> None:
        started = self.clock.now()
        while True:
            await self.clock.sleep(TICK)
            now = self.clock.now()
            for mark_id in self.marks.due(now):
                await self._lossless(WireMarkEcho(mark_id))
            if self.hangup_requested.is_set():
                self._request_end(EndReason.HANGUP, None, "DELETE")
            elif self.broken.is_set():
                self._request_end(EndReason.HANGUP if self._closed_by_browser() else EndReason.LOST, None,
                                  f"the peer connection is {self.pc.connectionState}")
            elif now - started > self.cfg.max_call_duration:
                self.stats.duration_limits += 1
                self._request_end(EndReason.LIMIT, "max_duration",
                                  f"the call reached its maximum duration of {self.cfg.max_call_duration:g} s")

    # --- ending --------------------------------------------------------------------------------

    def _request_end(self, reason: EndReason, fault: str | None, message: str) -> None:
        """End the call once: a hang-up for HANGUP, a fatal fault when ``fault`` names one, a lost peer
        otherwise."""
        if self.end_reason is not None:
            return
        if self.hangup_requested.is_set():
            reason = EndReason.HANGUP  # the DELETE came first; the transport's close follows it
        self.end_reason = reason
        ends = self.ends
        if ends is None:
            return
        log.info("webrtc call %s ends: %s (%s)", self.call_id, reason.value, message)
        if not ends.events.closed:
            if reason is EndReason.HANGUP:
                ends.events.try_send(WireHangup())
            elif fault is not None:
                ends.events.try_send(WireFault(fault, message, True))
        ends.events.close()
        ends.out.wake()

    def _encoder_failed(self, exc: BaseException) -> None:
        """The track's encoder failed (logged there with its traceback): the call ends with a fault."""
        self.stats.encoder_failures += 1
        self._request_end(EndReason.ENCODER, "encoder_failed", f"the Opus encoder failed: {type(exc).__name__}")

    async def _lossless(self, ev: WireEvent) -> None:
        assert self.ends is not None
        if not await hand_off(self.ends.events, ev, self.clock, self.cfg.send_timeout):
            self.stats.overloads += 1
            self._request_end(EndReason.LIMIT, "overloaded", "the engine does not keep up")

    async def _fault(self, kind: str, message: str) -> None:
        self._faults += 1
        if self._faults > self.cfg.max_faults:
            self._request_end(EndReason.LIMIT, "too_many_faults", f"more than {self.cfg.max_faults} faults")
            return
        log.info("webrtc call %s: %s: %s", self.call_id, kind, message)
        await self._lossless(WireFault(kind, message, False))
