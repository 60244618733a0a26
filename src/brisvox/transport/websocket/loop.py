"""The connection loop every WebSocket-based adapter shares (WebSocket, Twilio, Telnyx, RTVI).

One call over one accepted :class:`WsPeer` runs three tasks in one
:class:`~brisvox.core.tasks.TaskScope` until the call is over:

* the **reader** refreshes the liveness stamp on every frame and hands the frames to the
  adapter's :meth:`WsCall.on_frame` while the call is fed (after a hang-up or a fatal fault
  it only waits for the close frame); a close maps to a hang-up (a close frame) or a fatal
  fault (1002, 1007, 1009 from the WebSocket layer);
* the **writer** is the only task that writes: it flushes the adapter's pending messages,
  drops audio older than the last clear or at another rate than the call's, hands audio,
  clears and marks to the adapter's ``send_*`` methods, and says the goodbye (fatal fault,
  shutdown, the end of the call, an engine failure) through :meth:`WsCall.goodbye`;
* the **monitor** ends a call whose peer was silent for ``ping_timeout``, sent no caller
  audio for ``idle_timeout`` (where the adapter tracks it) or lasted ``max_call_duration``,
  pings every ``ping_interval`` (where the adapter pings), and aborts a write that was
  blocked for ``write_timeout`` (or, once the call is ending, ``min(write_timeout,
  close_grace)``).  Between its ticks it also wakes when the adapter's :meth:`WsCall.next_due`
  comes (an adapter with timed work of its own, such as RTVI's playout estimate, needs no fast
  tick: a monitor that woke every 20 ms cost every call 50 task wake-ups a second).

Faults are counted per call (past ``max_faults``: fatal, 1008); lossless events are handed
to the core within ``send_timeout`` (else the call ends as overloaded, 1013).  An adapter
subclasses :class:`WsCall` with its protocol (parse inbound into events, build outbound)
and names its fault kinds in a :class:`Kinds`.  All timers run on the injected clock.
"""

from __future__ import annotations

import abc
import asyncio
import contextlib
import enum
import itertools
import logging
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Generic, Protocol, TypeVar, runtime_checkable

from brisvox.core.channel import WAKE
from brisvox.core.clock import Clock, bounded, call_at
from brisvox.core.errors import ChannelClosed, DeadlineExceeded
from brisvox.core.frames import OutputAudioFrame
from brisvox.core.tasks import TaskScope
from brisvox.transport.events import (
    CallFailure,
    CallInfo,
    WireAudio,
    WireAudioOut,
    WireClear,
    WireEvent,
    WireFault,
    WireHangup,
    WireHangupOut,
    WireMark,
    WireStarted,
)
from brisvox.transport.link import CallEnds, call_pair, hand_off
from brisvox.transport.websocket.config import ServerConfig
from brisvox.transport.websocket.protocol import CloseCode, ErrorCode

__all__ = ["Ending", "Fatal", "Kinds", "LoopStats", "PeerClosed", "WsCall", "WsPeer", "close_peer"]

log = logging.getLogger(__name__)

_LAYER_CLOSES = (CloseCode.PROTOCOL_ERROR, 1007, CloseCode.TOO_BIG)  # the WebSocket layer refused a frame


class PeerClosed(Exception):
    """The connection is closed.  ``by_peer``: the client sent a close frame; ``code``: the
    code the WebSocket layer sent when it closed the connection itself (1002, 1007, 1009)."""

    def __init__(self, *, by_peer: bool, code: int | None = None) -> None:
        super().__init__(f"connection closed (by_peer={by_peer}, code={code})")
        self.by_peer = by_peer
        self.code = code


class WsPeer(Protocol):
    """What the loop needs from a WebSocket connection (websockets, Starlette, ...).
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


@runtime_checkable
class TapPeer(Protocol):
    """A peer that can hand binary messages over in its read callback (the server's edge)."""

    def tap(self, handler: Callable[[bytes], bool] | None) -> bool:
        """Offer each binary message to ``handler`` while ``recv()`` waits (True: taken, never
        returned by ``recv()``); None stops it.  False when this connection cannot."""
        ...


class LoopStats(Protocol):
    """The counters the loop writes (every adapter's stats have them)."""

    calls_started: int
    refused_busy: int
    faults: int
    write_timeouts: int
    idle_timeouts: int
    duration_limits: int
    output_rate_mismatches: int
    closes: dict[int, int]


@dataclass(frozen=True, slots=True)
class Kinds:
    """The fault kinds (members of the adapter's own enum) the loop reports for its own faults."""

    overloaded: enum.Enum
    too_many_faults: enum.Enum
    too_big: enum.Enum
    protocol_error: enum.Enum  # the WebSocket layer closed the connection (1002, 1007)
    rate_mismatch: enum.Enum
    silence: enum.Enum  # nothing from the peer for ping_timeout
    idle: enum.Enum  # no caller audio for idle_timeout
    max_duration: enum.Enum


@dataclass(frozen=True, slots=True)
class Fatal:
    """The first fatal fault of a call: the close code, the kind and the message."""

    close: int
    kind: enum.Enum
    message: str


class Ending(enum.Enum):
    """Why the writer says goodbye."""

    FATAL = "fatal"  # a fatal fault (``WsCall.fatal``)
    SHUTDOWN = "shutdown"
    ENDED = "ended"  # the engine hung up, or the call is over and everything was written
    FAILED = "failed"  # the engine hung up because it failed


async def close_peer(peer: WsPeer, clock: Clock, config: ServerConfig, code: int, reason: str) -> None:
    """Send a close frame (bounded by twice ``close_grace``); drop the connection if that fails."""
    try:
        await bounded(clock, config.close_grace * 2, peer.close(code, reason), "close")
    except (PeerClosed, DeadlineExceeded):
        peer.abort()


S = TypeVar("S", bound=LoopStats)


def _ring(alarm: asyncio.Future[None]) -> None:
    if not alarm.done():
        alarm.set_result(None)


class WsCall(abc.ABC, Generic[S]):
    """One call's loop (see the module docs).  An adapter supplies ``label``,
    :meth:`on_frame`, the ``send_*`` methods and :meth:`goodbye`; the other hooks default to
    nothing."""

    label: ClassVar[str]  # the transport's name in task names and logs
    kinds: ClassVar[Kinds] = Kinds(  # the WebSocket protocol's error codes (RTVI uses them too)
        overloaded=ErrorCode.OVERLOADED, too_many_faults=ErrorCode.TOO_MANY_FAULTS, too_big=ErrorCode.MESSAGE_TOO_BIG,
        protocol_error=ErrorCode.PROTOCOL_ERROR, rate_mismatch=ErrorCode.OUTPUT_RATE_MISMATCH,
        silence=ErrorCode.PING_TIMEOUT, idle=ErrorCode.IDLE_TIMEOUT, max_duration=ErrorCode.MAX_DURATION)
    peer_name: ClassVar[str] = "the client"
    pings: ClassVar[bool] = True  # WebSocket pings keep the peer's liveness fresh
    tracks_audio: ClassVar[bool] = True  # idle_timeout applies to caller audio
    silence_counter: ClassVar[str] = "ping_timeouts"  # the stats field a silent peer counts in
    fatal_log_level: ClassVar[int] = logging.INFO

    def __init__(self, peer: WsPeer, clock: Clock, config: ServerConfig, info: CallInfo,
                 shutdown: asyncio.Event, stats: S, out_rate: int | None) -> None:
        self.peer = peer
        self.clock = clock
        self.cfg = config
        self.link, self.ends = call_pair(info)
        self.ends.events.try_send(WireStarted(info))
        self.call_id = info.call_id
        self.shutdown = shutdown
        self.stats = stats
        self.out_rate = out_rate  # bot audio at another rate is dropped (None: any rate)
        self.last_seen = self.last_audio = self.started_at = clock.now()
        self.writing_since: float | None = None
        self.fatal: Fatal | None = None
        self.faults = 0
        self.feeding = True
        self.peer_gone = False
        self.rate_mismatch_reported = False
        self.seq = itertools.count()
        self._alarm: asyncio.Future[None] | None = None  # the monitor's nap, while it naps
        self._alarm_at = 0.0  # when that nap ends

    # --- the adapter's part ----------------------------------------------------------------

    @abc.abstractmethod
    async def on_frame(self, frame: bytes | str) -> None:
        """One inbound frame while the call is fed."""

    @abc.abstractmethod
    async def send_audio(self, frame: OutputAudioFrame) -> None:
        ...

    @abc.abstractmethod
    async def send_clear(self, epoch: int) -> None:
        ...

    @abc.abstractmethod
    async def send_mark(self, mark_id: str) -> None:
        ...

    @abc.abstractmethod
    async def goodbye(self, ending: Ending, failure: CallFailure | None = None) -> None:
        """The last writes and the close frame (use :meth:`close`)."""
        ...

    @abc.abstractmethod
    async def refuse_busy(self) -> None:
        """The engine did not take the call."""
        ...

    async def begin(self) -> None:
        """Before the loop starts (the engine took the call)."""

    def count_started(self) -> None:
        """The engine took the call (an adapter that hands it over later counts it then)."""
        self.stats.calls_started += 1

    def next_pending(self) -> bytes | str | None:
        """The adapter's next queued message (notices, replies), written before anything else."""
        return None

    def notify_fault(self, kind: enum.Enum, message: str) -> None:
        """A non-fatal fault (the loop reports it to the engine after this)."""

    def try_frame(self, frame: bytes) -> bool:
        """Take one binary message at once, in the connection's read callback (True), or leave it
        to :meth:`on_frame` (False); must not block.  Offered only while the reader waits, with
        ``last_seen`` already stamped, on peers that can (:class:`TapPeer`).  The default takes
        none."""
        return False

    async def on_tick(self, now: float) -> None:
        """Every monitor tick, and at :meth:`next_due`."""

    def next_due(self) -> float | None:
        """When :meth:`on_tick` has work next (None: nothing but the tick); call :meth:`nudge`
        when it moved earlier."""
        return None

    def nudge(self) -> None:
        """:meth:`next_due` may have moved earlier than the monitor's nap: wake it to plan again."""
        alarm = self._alarm
        if alarm is not None and (due := self.next_due()) is not None and due < self._alarm_at:
            _ring(alarm)

    async def before_close(self) -> None:
        """The peer closed: release what the adapter holds back."""

    def extra_tasks(self) -> dict[str, Coroutine[Any, Any, None]]:
        return {}

    def writer_done(self) -> None:
        """The writer returned (the loop waits for the close handshake next)."""

    async def finish(self) -> None:
        """After every task ended."""

    def release(self) -> None:
        """The call that ran is over."""

    def tick(self) -> float:
        cfg = self.cfg
        watch = cfg.ping_interval if self.pings else cfg.ping_timeout
        return max(0.005, min(watch, cfg.write_timeout, cfg.close_grace) / 2)

    def ping_bound(self) -> float:
        return self.tick()

    # --- hosting ---------------------------------------------------------------------------

    async def host(self, delivered: Awaitable[bool],
                   register: Callable[[CallEnds], Callable[[], None]] | None) -> None:
        """Run the call once the engine took it (``delivered``), else :meth:`refuse_busy`.  A
        connection that broke, a write past its deadline or a closed channel end the call
        quietly: each was already counted and reported where it happened."""
        try:
            if not await delivered:
                self.stats.refused_busy += 1
                await self.refuse_busy()
                return
            unregister = register(self.ends) if register is not None else None
            self.count_started()
            try:
                await self.begin()
                await self.run()
            finally:
                self.ends.events.close()
                self.ends.out.close()
                self.release()
                if unregister is not None:
                    unregister()
        except (PeerClosed, DeadlineExceeded, ChannelClosed):
            pass

    async def run(self) -> None:
        self.last_seen = self.last_audio = self.started_at = self.clock.now()
        # caller audio taken in the read callback: no reader wake-up per 20 ms frame
        peer = self.peer
        tapped = type(self).try_frame is not WsCall.try_frame and isinstance(peer, TapPeer) and peer.tap(self._tapped)
        try:
            async with TaskScope(f"{self.label}[{self.call_id}]") as scope:
                reader = scope.spawn(self._reader(), name="reader")
                writer = scope.spawn(self._writer(), name="writer")
                scope.spawn(self._monitor(), name="monitor")
                for name, coro in self.extra_tasks().items():
                    scope.spawn(coro, name=name)
                await writer
                self.writer_done()
                if not reader.done():
                    with contextlib.suppress(DeadlineExceeded):  # the close handshake may not finish: fine
                        await bounded(self.clock, self.cfg.close_grace, asyncio.shield(reader), "close handshake")
                scope.cancel()
        finally:
            if tapped and isinstance(peer, TapPeer):
                peer.tap(None)
        await self.finish()

    # --- reader ----------------------------------------------------------------------------

    async def _reader(self) -> None:
        while True:
            try:
                frame = await self.peer.recv()
            except PeerClosed as exc:
                await self.before_close()
                self._peer_closed(exc)
                return
            self.last_seen = self.clock.now()
            if self.feeding:
                await self.on_frame(frame)

    def _tapped(self, frame: bytes) -> bool:
        if not self.feeding:
            return False
        self.last_seen = self.clock.now()
        try:
            return self.try_frame(frame)
        except Exception:
            # the reader's on_frame gets the frame instead (and fails the call in its task if it
            # fails there too); never an exception in the connection's read callback
            log.exception("%s call %s: a frame failed in the read callback", self.label, self.call_id)
            return False

    def audio_in(self, pcm: bytes, rate: int, at: float) -> None:
        """Caller audio to the core (drop-oldest: never waits)."""
        if not self.ends.events.closed:
            self.ends.audio.send(WireAudio(pcm, rate, next(self.seq), at))

    def hung_up(self) -> None:
        """The peer hung up (its stop message was queued): stop feeding the core."""
        self.feeding = False
        self.ends.events.close()

    def _peer_closed(self, exc: PeerClosed) -> None:
        self.peer_gone = True
        events = self.ends.events
        if self.feeding and not events.closed:
            if exc.code in _LAYER_CLOSES:
                kind = self.kinds.too_big if exc.code == CloseCode.TOO_BIG else self.kinds.protocol_error
                self.stats.faults += 1
                events.try_send(WireFault(kind.value, f"the WebSocket layer closed the connection ({exc.code})", True))
            elif exc.by_peer:
                events.try_send(WireHangup())
        self.feeding = False
        events.close()
        self.ends.out.wake()

    async def lossless(self, ev: WireEvent) -> None:
        if not await hand_off(self.ends.events, ev, self.clock, self.cfg.send_timeout):
            self.request_fatal(CloseCode.TRY_AGAIN, self.kinds.overloaded, "the engine does not keep up")

    async def fault(self, kind: enum.Enum, message: str, *, notify: bool = True) -> None:
        """A non-fatal fault: reported to the engine (and, with ``notify``, the peer); past
        ``max_faults`` in the call it is fatal."""
        self.faults += 1
        self.stats.faults += 1
        if self.faults > self.cfg.max_faults:
            self.request_fatal(CloseCode.POLICY, self.kinds.too_many_faults,
                               f"more than {self.cfg.max_faults} faults in this call")
            return
        if notify:
            self.notify_fault(kind, message)
        await self.lossless(WireFault(kind.value, message, False))

    def request_fatal(self, close: int, kind: enum.Enum, message: str) -> None:
        """End the call with ``close``: the first fatal fault wins; the writer says goodbye."""
        if self.fatal is not None:
            return
        self.fatal = Fatal(close, kind, message)
        self.stats.faults += 1
        # one line per call at most; the message names no peer data
        log.log(self.fatal_log_level, "%s call %s: closing with %s (%d): %s",
                self.label, self.call_id, kind.value, int(close), message)
        events = self.ends.events
        if self.feeding and not events.closed:
            events.try_send(WireFault(kind.value, message, True))
        self.feeding = False
        events.close()
        self.ends.out.wake()

    # --- writer ----------------------------------------------------------------------------

    async def write(self, data: bytes | str) -> None:
        self.writing_since = self.clock.now()
        try:
            await self.peer.send(data)
        finally:
            self.writing_since = None

    async def close(self, code: int, reason: str = "", last: Sequence[bytes | str] = ()) -> None:
        """The goodbye: the ``last`` messages, then the close frame (counted per code); the
        connection is dropped when either fails."""
        self.stats.closes[int(code)] = self.stats.closes.get(int(code), 0) + 1
        try:
            for data in last:
                await self.write(data)
            await bounded(self.clock, self.cfg.close_grace * 2, self.peer.close(code, reason), "close")
        except (PeerClosed, DeadlineExceeded):
            self.peer.abort()

    async def flush(self) -> None:
        """Write the adapter's queued messages."""
        while (data := self.next_pending()) is not None:
            await self.write(data)

    async def _writer(self) -> None:
        out, ended, rate = self.ends.out, self.ends.ended, self.out_rate
        floor = 0  # audio of an epoch under the last clear's is stale
        # this loop runs once per frame: an adapter without a queue of its own is not asked
        pending = self.next_pending if type(self).next_pending is not WsCall.next_pending else None
        try:
            while True:
                if self.fatal is not None:
                    await self.goodbye(Ending.FATAL)
                    return
                if pending is not None:
                    while (data := pending()) is not None:
                        await self.write(data)
                if self.peer_gone:
                    return
                if self.shutdown.is_set():
                    await self.goodbye(Ending.SHUTDOWN)
                    return
                if ended.is_set() and not out:
                    await self.goodbye(Ending.ENDED)
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
                    if rate is not None and frame.sample_rate != rate:
                        self._rate_mismatch(frame.sample_rate, rate)
                        continue
                    await self.send_audio(frame)
                elif isinstance(got, WireClear):
                    floor = max(floor, got.epoch)
                    await self.send_clear(got.epoch)
                elif isinstance(got, WireMark):
                    await self.send_mark(got.id)
                elif isinstance(got, WireHangupOut):
                    await self.goodbye(Ending.ENDED if got.failure is None else Ending.FAILED, got.failure)
                    return
        except PeerClosed:
            self.peer_gone = True

    def _rate_mismatch(self, got: int, rate: int) -> None:
        self.stats.output_rate_mismatches += 1
        if self.rate_mismatch_reported:
            return
        self.rate_mismatch_reported = True
        events = self.ends.events
        if not events.closed:
            events.try_send(WireFault(self.kinds.rate_mismatch.value,
                                      f"bot audio at {got} Hz on a {rate} Hz {self.label} call is dropped", False))

    # --- monitor ---------------------------------------------------------------------------

    async def _monitor(self) -> None:
        cfg, clock = self.cfg, self.clock
        tick = self.tick()
        next_ping = clock.now() + cfg.ping_interval
        next_check = clock.now() + tick
        while True:
            await self._nap(next_check)
            now = clock.now()
            await self.on_tick(now)
            if now < next_check:
                continue  # woken for the adapter's due work: the limits keep their tick
            next_check = now + tick
            since = self.writing_since
            if since is not None:
                ending = self.ends.ended.is_set() or self.shutdown.is_set() or self.fatal is not None
                limit = min(cfg.write_timeout, cfg.close_grace) if ending else cfg.write_timeout
                if now - since > limit:
                    log.warning("%s call %s: a write was blocked for %.1f s; dropping the connection",
                                self.label, self.call_id, now - since)
                    self.stats.write_timeouts += 1
                    self.peer.abort()
                    return
            if self.shutdown.is_set():
                self.ends.out.wake()
            if self.fatal is None and self._overdue(now):
                continue
            if self.pings and now >= next_ping:
                next_ping = now + cfg.ping_interval
                try:
                    pong = await bounded(clock, self.ping_bound(), self.peer.ping(), "ping")
                except (PeerClosed, DeadlineExceeded):
                    continue
                asyncio.ensure_future(pong).add_done_callback(self._on_pong)

    async def _nap(self, until: float) -> None:
        """Sleep until ``until`` or the adapter's :meth:`next_due`, whichever comes first (or a
        :meth:`nudge`)."""
        due = self.next_due()
        at = until if due is None else min(until, due)
        alarm: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        timer = call_at(self.clock, at, lambda: _ring(alarm))
        self._alarm, self._alarm_at = alarm, at
        try:
            await alarm
        finally:
            timer.cancel()
            self._alarm = None

    def _overdue(self, now: float) -> bool:
        """Apply the call's time limits; True when one ended the call."""
        cfg, stats, kinds = self.cfg, self.stats, self.kinds
        if self.feeding and now - self.last_seen > cfg.ping_timeout:
            setattr(stats, self.silence_counter, getattr(stats, self.silence_counter) + 1)
            self.request_fatal(CloseCode.POLICY, kinds.silence, f"nothing from {self.peer_name} for {cfg.ping_timeout:g} s")
        elif self.tracks_audio and now - self.last_audio > cfg.idle_timeout:
            stats.idle_timeouts += 1
            self.request_fatal(CloseCode.POLICY, kinds.idle, f"no caller audio for {cfg.idle_timeout:g} s")
        elif now - self.started_at > cfg.max_call_duration:
            stats.duration_limits += 1
            self.request_fatal(CloseCode.POLICY, kinds.max_duration,
                               f"the call reached its maximum duration of {cfg.max_call_duration:g} s")
        else:
            return False
        return True

    def _on_pong(self, fut: asyncio.Future[object]) -> None:
        if not fut.cancelled() and fut.exception() is None:
            self.last_seen = self.clock.now()
