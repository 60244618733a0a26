"""TransportSession: the asyncio shell around the ledger, the pacer and one CallLink.

``await TransportSession.open(clock, link, config)`` starts four tasks in the session's
:class:`~brisvox.core.tasks.TaskScope` (``close()`` cancels and joins them).  Engine
commands have no queue or task of their own: :meth:`CommandSender.send` applies them in
the engine's task, in order: audio is cut into frames of at most one tick and pushed into
the :class:`~brisvox.audio.pacer.OutputPacer` (backpressure; audio of any epoch but the
current one is dropped), a mark is registered at the accepted position, ``Stop`` records
``REQUESTED`` and ends the session.

* **pacer** releases one frame per tick into the sink (``sink_capacity``).
* **output**, the only writer to the wire (with the pacing tick, below): applies a new ledger generation first
  (``WireClear``, then the cut utterances' final positions and the cut marks), then due
  marks, then takes the next frame from the sink, skips stale ones and writes it
  (bounded by ``wire_write_timeout``).  With a shared :class:`PaceTicker`, a frame the tick
  releases while this task waits with nothing else to do (the sink empty, no clear, mark or
  report pending, room on the wire) is released and queued on the wire in the tick's callback,
  as this task would have done, without waking it (a wake-up per 20 ms frame per call); when
  that leaves a mark or report due, the task is woken to send it.  Position reports are events, or, once the engine routed them
  (:meth:`TransportSession.route_playout`), handed to its sink in this task; so is the
  lead a clear flushed (below).
* **input** forwards WireEvents: caller audio re-tagged with the current epoch
  (drop-oldest; or straight to the sink given to ``route_caller_audio``; the adapter hands
  the audio to the session in its own task through ``link.audio`` while nothing else is
  queued, from the session's start to its end), DTMF and mark echoes (lossless), faults as errors, a hang-up ends the
  session as ``PEER_HANGUP``, a closed event side as ``PEER_DISCONNECTED``.
* **supervisor** waits for the first task to end (when the output found the wire closed
  it gives the input ``wire_closed_grace`` to deliver what the adapter queued before it
  left), cancels the rest, sends the final reports, ``WireHangupOut`` and sets
  ``link.ended``, then emits ``Stopped`` and closes the event queue (each send bounded by
  ``final_send_timeout``).

``Clear`` is out of band: :meth:`CommandSender.send` applies it before it returns (see
:meth:`CommandSender.clear`).  The client is told (``WireClear``) only when the clear cut
audio it may still play: audio queued in the session or on the wire, or released less
than ``SessionConfig.playout_grace`` ago (the client's own buffer).  A clear that only
advances the epoch of an idle call (the engine does that before every reply) writes
nothing.

What the caller heard of a cut: a client that reports its playout lead (a carrier's mark
echoes, ``WireLead``) holds that much audio sent and not played, and a ``WireClear`` flushes
it.  The session keeps the lead as a lag behind its own release schedule (the time the
released audio ends, played in real time) and, at a clear it tells the client about, hands
the playout consumer ``PlaybackLead(unplayed, epoch)``: the audio of the cut epoch the client
still held then (``max(0, release end + lag - now)``: a lead measured while the bot spoke
shrinks once its audio stopped).  A client that reports no lead gets none, and what it heard
is its released audio.

``close(failure=...)`` ends a call whose engine failed: the adapter gets
``WireHangupOut(failure)`` (a typed ``CallFailure``) and tells the client.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from brisvox.audio.pacer import FRAME_DURATION, OutputPacer, PaceTicker
from brisvox.core.channel import Channel, ItemPolicy, Overflow
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import ChannelClosed, ConfigError, DeadlineExceeded
from brisvox.core.frames import InputAudioFrame, OutputAudioFrame
from brisvox.core.tasks import TaskScope
from brisvox.transport.events import (
    CallerAudio,
    CallFailure,
    CallInfo,
    Clear,
    ContextNote,
    Dtmf,
    Mark,
    MarkCleared,
    MarkPlayed,
    PlaybackLead,
    PlaybackPosition,
    SendAudio,
    Started,
    Stop,
    Stopped,
    StopReason,
    TransportCommand,
    TransportError,
    TransportEvent,
    TypedText,
    WireAudio,
    WireAudioOut,
    WireClear,
    WireDtmf,
    WireFault,
    WireHangup,
    WireHangupOut,
    WireLead,
    WireMark,
    WireMarkEcho,
    WireNote,
    WireOut,
    WireStarted,
    WireText,
)
from brisvox.transport.ledger import Ledger
from brisvox.transport.link import CallLink

__all__ = ["CommandSender", "PlayoutReport", "SessionConfig", "TransportSession"]

PlayoutReport = PlaybackPosition | PlaybackLead
"""What the playout sink gets (:meth:`TransportSession.route_playout`)."""

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionConfig:
    events_capacity: int = 64
    # The only buffer between the engine and the pacer's tick (commands have no queue of
    # their own): 128 frames, 2.56 s, what the command queue and the pacer held together.
    pacer_capacity: int = 128
    sink_capacity: int = 4
    position_interval: float = 0.1
    frame_duration: float = FRAME_DURATION
    # A frame later than its slot by more than this restarts the pacer's grid (an underrun);
    # up to this much lateness (a busy loop, a jittery source) is caught up on the grid.
    pacer_resync_after: float = 0.06
    wire_write_timeout: float = 10.0
    final_send_timeout: float = 1.0
    wire_closed_grace: float = 1.0
    # Audio released this recently may still be in the client's playout buffer (its jitter
    # buffer, the network): a clear within it is written to the client.
    playout_grace: float = 0.5

    def validate(self) -> None:
        for name in ("events_capacity", "pacer_capacity", "sink_capacity"):
            if getattr(self, name) < 1:
                raise ConfigError(f"SessionConfig.{name} must be at least 1, got {getattr(self, name)}")
        for name in ("pacer_resync_after", "playout_grace"):
            if getattr(self, name) < 0:
                raise ConfigError(f"SessionConfig.{name} must be >= 0, got {getattr(self, name)}")
        for name in ("position_interval", "frame_duration", "wire_write_timeout", "final_send_timeout",
                     "wire_closed_grace"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"SessionConfig.{name} must be positive, got {getattr(self, name)}")


_AUDIO = ItemPolicy(Overflow.DROP_OLDEST, "audio")
_LOSSLESS = ItemPolicy(Overflow.BACKPRESSURE)
_LEAD = ItemPolicy(Overflow.DISPLACE, "lead")
_STOPPED = ItemPolicy(Overflow.DISPLACE, "stopped")


def _event_policy(ev: TransportEvent) -> ItemPolicy:
    if isinstance(ev, CallerAudio):
        return _AUDIO
    if isinstance(ev, PlaybackPosition):
        return ItemPolicy(Overflow.DISPLACE, ("position", ev.epoch, ev.utterance))
    if isinstance(ev, PlaybackLead):
        return _LEAD
    if isinstance(ev, Stopped):
        return _STOPPED
    return _LOSSLESS


def _is_old_wire_item(epoch: int) -> Any:
    def pred(w: WireOut) -> bool:
        return isinstance(w, WireMark) or (isinstance(w, WireAudioOut) and w.frame.epoch < epoch)

    return pred


class _WireClosed(Exception):
    """The adapter closed its outgoing end."""


class CommandSender:
    """Sends commands to one session; cheap to copy (``session.commands()``)."""

    __slots__ = ("_s",)

    def __init__(self, session: TransportSession) -> None:
        self._s = session

    async def send(self, cmd: TransportCommand) -> None:
        """Apply ``cmd`` in the caller's task: audio waits for room in the pacer
        (backpressure); ``Clear`` is applied before this returns.  Raises ChannelClosed
        once the session has ended."""
        s = self._s
        if s._finished:
            raise ChannelClosed("the transport session has ended")
        if isinstance(cmd, Clear):
            self.clear(cmd.epoch)
        elif isinstance(cmd, SendAudio):
            await s._accept_audio(cmd.frame)
        elif isinstance(cmd, Mark):
            s._ledger.add_mark(cmd.id)
            s._sink.wake()
        elif isinstance(cmd, Stop):
            s._set_reason(StopReason.REQUESTED)
            s._first_done.set()

    @property
    def epoch(self) -> int:
        """The current epoch (the newest clear's)."""
        return self._s._ledger.epoch

    async def audio(self, frame: OutputAudioFrame) -> None:
        """``send(SendAudio(frame))`` without the wrapper (the engine's hot path): waits for
        room in the pacer; raises ChannelClosed once the session has ended."""
        s = self._s
        if s._finished:
            raise ChannelClosed("the transport session has ended")
        await s._accept_audio(frame)

    def unplayed(self) -> float:
        """Seconds of released audio the client holds unplayed now, by its last lead (see the
        module docs; 0 for a client that reports none)."""
        s = self._s
        if s._lag is None:
            return 0.0
        return max(0.0, s._playout_end + s._lag - s._clock.now())

    def clear(self, epoch: int) -> bool:
        """Apply Clear{epoch} synchronously; False when it is not newer than the current epoch.

        Raises the ledger's epoch (cuts unechoed marks, ends the old utterances), pulls
        the stale audio and every mark out of the wire queue, drops stale frames from the
        sink, wakes the output task (which writes WireClear before anything else) and
        interrupts the pacer.
        """
        s = self._s
        if s._finished:
            raise ChannelClosed("the transport session has ended")
        queued = s._ledger.accepted > s._ledger.released  # in the pacer or the sink, not yet released
        if not s._ledger.clear(epoch):
            return False
        purged = s._link.out.purge(_is_old_wire_item(epoch))
        unplayed = self.unplayed()
        playing = unplayed > 0 or s._clock.now() < s._playout_end + s._config.playout_grace
        if queued or playing or any(isinstance(w, WireAudioOut) for w in purged):
            s._cut_pending = True  # the output task tells the client
            if s._lag is not None and s._released_epoch is not None:
                s._cut_lead = PlaybackLead(unplayed, s._released_epoch)  # flushed by the WireClear
        s._sink.purge(lambda f: f.epoch < epoch)
        s._sink.wake()
        s._pacer.interrupt(epoch)
        return True


class TransportSession:
    """One call's transport session (see module docs)."""

    def __init__(self, clock: Clock, link: CallLink, config: SessionConfig, ticker: PaceTicker | None = None) -> None:
        config.validate()
        self._clock = clock
        self.opened_at = clock.now()  # the call's origin: recordings count from here
        self._link = link
        self._config = config
        self._ledger = Ledger(position_interval=config.position_interval)
        self._events: Channel[TransportEvent] = Channel(config.events_capacity, name="engine events",
                                                        policy=_event_policy)
        self._sink: Channel[OutputAudioFrame] = Channel(config.sink_capacity, name="pacer sink")
        self._pacer: OutputPacer[OutputAudioFrame] = OutputPacer(clock, self._sink.send,
                                                                 capacity=config.pacer_capacity,
                                                                 resync_after=config.pacer_resync_after,
                                                                 ticker=ticker,
                                                                 try_sink=self._offer if ticker else None)
        self._reason: StopReason | None = None
        self._failure: BaseException | None = None
        self._ending: CallFailure | None = None  # the engine's failure, told to the caller with the hang-up
        self._wire_closed = False
        self._finished = False
        self._first_done = asyncio.Event()
        self._workers: list[asyncio.Task[None]] = []
        self._supervisor: asyncio.Task[None] | None = None
        self._scope = TaskScope(f"transport[{link.info.call_id}]")
        self._audio_sink: Callable[[InputAudioFrame], object] | None = None
        self._playout_sink: Callable[[PlayoutReport], Awaitable[None]] | None = None
        self._playout_end = -float("inf")  # when the audio released so far ends, played in real time
        self._released_epoch: int | None = None  # the epoch of the last audio released
        self._lag: float | None = None  # how far the client's playout trails _playout_end (its last lead)
        self._cut_lead: PlaybackLead | None = None  # what the pending WireClear flushes unplayed
        self._cut_pending = False  # a clear cut audio the client may still play: write WireClear
        self._seen = 0  # the ledger generation the output task has applied
        self._idle = False  # the output task waits on the sink with nothing else to do
        self.stale_audio_dropped = 0

    # --- public API ------------------------------------------------------------------------

    @classmethod
    async def open(cls, clock: Clock, link: CallLink, config: SessionConfig | None = None,
                   ticker: PaceTicker | None = None) -> TransportSession:
        """``ticker``: the process's shared pacing tick (a server's calls share one); without
        it the session's pacer sleeps per frame on its own."""
        session = cls(clock, link, config or SessionConfig(), ticker)
        session._start()
        return session

    @property
    def info(self) -> CallInfo:
        return self._link.info

    @property
    def pacer(self) -> OutputPacer[OutputAudioFrame]:
        return self._pacer

    async def recv(self) -> TransportEvent:
        """The next event; raises ChannelClosed after Stopped was read."""
        return await self._events.recv()

    def try_recv(self) -> TransportEvent | None:
        return self._events.try_recv()

    def route_caller_audio(self, sink: Callable[[InputAudioFrame], object] | None) -> None:
        """Hand each caller audio frame to ``sink`` in the session's input task, instead of
        queueing it as a :class:`CallerAudio` event (None: queue them again).

        The frame is already re-tagged and carries its arrival time in ``at``.  ``sink`` must
        not block or raise: it runs 50 times a second per call, and this saves the audio a
        hop through the events channel and a wake-up of the task reading it.  Every other
        event still comes through :meth:`recv`.  Audio already queued as events goes to the
        new sink first, so the sink sees the caller's frames in order.
        """
        self._audio_sink = sink
        if sink is not None:
            for ev in self._events.purge(lambda e: isinstance(e, CallerAudio)):
                assert isinstance(ev, CallerAudio)
                sink(ev.frame)

    def route_playout(self, sink: Callable[[PlayoutReport], Awaitable[None]] | None) -> None:
        """Hand each position report, and the lead each clear flushed (see the module docs), to
        ``sink`` in the task that makes it (the output task; the final reports, the supervisor,
        bounded by ``final_send_timeout``), instead of queueing it as an event (None: queue
        them again).  Routed, the client's lead measurements stay in the session.

        The reports reach whoever keeps the record of what was heard without a hop through
        the events channel and the task reading it.  ``sink`` may wait (it holds up the
        wire while it does) and must not raise but ChannelClosed, which drops the report.
        Route before any audio is sent: reports already queued stay events.
        """
        self._playout_sink = sink

    async def send(self, cmd: TransportCommand) -> None:
        await CommandSender(self).send(cmd)

    def commands(self) -> CommandSender:
        return CommandSender(self)

    def stop_reason(self) -> StopReason | None:
        return self._reason

    @property
    def events_dropped(self) -> int:
        return self._events.dropped

    async def close(self, timeout: float = 5.0, failure: CallFailure | None = None) -> StopReason:
        """End the session (REQUESTED unless it already had a reason) and join every task.
        Returns TIMEOUT, after aborting the supervisor, when that takes longer than ``timeout``.
        ``failure``: the engine failed; the hang-up carries it to the adapter (which tells the
        caller), unless the session had already ended.  Idempotent: the first failure wins."""
        if failure is not None and self._ending is None and not self._finished:
            self._ending = failure
        self._set_reason(StopReason.REQUESTED)
        self._first_done.set()
        sup = self._supervisor
        if sup is None:
            return self._reason or StopReason.REQUESTED
        try:
            await bounded(self._clock, timeout, asyncio.shield(sup), "transport session close")
        except DeadlineExceeded:
            await self._scope.aclose()
            return StopReason.TIMEOUT
        await self._scope.aclose()
        return self._reason or StopReason.REQUESTED

    async def wait_stopped(self) -> StopReason:
        """Wait (unbounded: wrap it in a timeout) until the session has ended by itself."""
        if self._supervisor is not None:
            await asyncio.shield(self._supervisor)
        return self._reason or StopReason.PEER_DISCONNECTED

    async def __aenter__(self) -> TransportSession:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.close()

    # --- tasks -----------------------------------------------------------------------------

    def _start(self) -> None:
        self._link.audio.handler = self._take_audio
        scope = self._scope
        for name, coro in (("pacer", self._pacer.run()),
                           ("output", self._run_output()), ("input", self._run_input())):
            self._workers.append(scope.spawn(self._worker(coro), name=name))
        self._supervisor = scope.spawn(self._supervise(), name="supervisor")

    async def _worker(self, coro: Coroutine[Any, Any, None]) -> None:
        try:
            await coro
        except asyncio.CancelledError:
            raise
        except _WireClosed:
            self._wire_closed = True
        except DeadlineExceeded as exc:
            log.warning("transport session %s: %s", self._link.info.call_id, exc)
            self._set_reason(StopReason.TIMEOUT)
        except ChannelClosed:
            pass
        except Exception as exc:
            log.exception("transport session %s: task failed", self._link.info.call_id)
            self._failure = exc
            self._set_reason(StopReason.TIMEOUT if isinstance(exc, TimeoutError) else StopReason.PEER_DISCONNECTED)
        finally:
            self._first_done.set()

    def _set_reason(self, reason: StopReason) -> None:
        if self._reason is None:
            self._reason = reason

    async def _supervise(self) -> None:
        cfg, clock, link = self._config, self._clock, self._link
        await self._first_done.wait()
        input_task = self._workers[2]
        if self._wire_closed and self._reason is None and not input_task.done():
            try:
                await bounded(clock, cfg.wire_closed_grace, asyncio.shield(input_task), "peer hang-up grace")
            except DeadlineExceeded:
                self._set_reason(StopReason.PEER_DISCONNECTED)
        self._set_reason(StopReason.PEER_DISCONNECTED)
        self._finished = True
        self._link.audio.handler = None
        for t in self._workers:
            t.cancel()
        await asyncio.gather(*self._workers, return_exceptions=True)
        self._pacer.close()
        try:
            for report in self._ledger.final_reports():
                await self._report(report, final=True)
                self._ledger.reported(report)
            for mid in self._ledger.take_cut_marks():
                await self._event(MarkCleared(mid))
        except (DeadlineExceeded, ChannelClosed):
            pass
        if not link.out.closed:
            with contextlib.suppress(DeadlineExceeded, ChannelClosed):
                await bounded(clock, cfg.final_send_timeout, link.out.send(WireHangupOut(self._ending)),
                              "hang-up")
        link.ended.set()
        link.out.wake()  # an adapter waiting for output sees the end at once
        assert self._reason is not None
        try:
            await self._event(Stopped(self._reason))
        except (DeadlineExceeded, ChannelClosed):
            log.info("transport session %s: Stopped was dropped (engine not reading)", link.info.call_id)
        self._events.close()

    async def _event(self, ev: TransportEvent) -> None:
        if not self._events.try_send(ev):
            await bounded(self._clock, self._config.final_send_timeout, self._events.send(ev), "event delivery")

    async def _accept_audio(self, frame: OutputAudioFrame) -> None:
        ledger = self._ledger
        if frame.epoch != ledger.epoch:
            self.stale_audio_dropped += 1
            return
        for chunk in _split(frame, self._config.frame_duration):
            if chunk.epoch != ledger.epoch:
                break  # a clear came while this task waited for room in the pacer
            ledger.accept_frame()
            await self._pacer.push(chunk)

    async def _wire(self, item: WireOut) -> None:
        out = self._link.out
        try:
            if out.try_send(item):
                return
            await bounded(self._clock, self._config.wire_write_timeout, out.send(item), "wire write")
        except ChannelClosed:
            raise _WireClosed() from None

    async def _report(self, report: PlayoutReport, *, final: bool = False) -> None:
        sink = self._playout_sink
        if sink is None:
            await (self._event(report) if final else self._events.send(report))
            return
        try:
            if final:
                await bounded(self._clock, self._config.final_send_timeout, sink(report), "final position report")
            else:
                await sink(report)
        except ChannelClosed:
            return  # whoever keeps the record has ended: the report has nobody to tell

    async def _flush_reports(self) -> None:
        ledger = self._ledger
        for report in ledger.due_reports():
            await self._report(report)
            ledger.reported(report)
        for mid in ledger.take_cut_marks():
            await self._events.send(MarkCleared(mid))

    def _offer(self, frame: OutputAudioFrame) -> bool:
        """The pacing tick's hand-off (see the module docs): False when the sink is full."""
        ledger, out = self._ledger, self._link.out
        if (not self._idle or len(self._sink) or ledger.generation != self._seen or ledger.has_work()
                or out.closed or len(out) >= out.capacity):
            return self._sink.try_send(frame)
        if frame.epoch == ledger.epoch:
            sent = out.try_send(self._release(frame))
            assert sent  # there was room, and nothing else runs in between
            if ledger.has_work():  # a mark or report is due behind this frame: the task sends it
                self._idle = False
                self._sink.wake()
        return True

    def _release(self, frame: OutputAudioFrame) -> WireAudioOut:
        ledger = self._ledger
        ledger.release(frame.epoch, frame.utterance, frame.sample_count, frame.sample_rate)
        self._playout_end = max(self._playout_end, self._clock.now()) + frame.duration
        self._released_epoch = frame.epoch
        if not len(self._pacer) and not len(self._sink):
            ledger.report_current()  # nothing follows for now: report where playback stands
        return WireAudioOut(frame)

    async def _run_output(self) -> None:
        ledger, sink = self._ledger, self._sink
        self._seen = seen = ledger.generation
        while True:
            if ledger.generation != seen:
                self._seen = seen = ledger.generation
                if self._cut_pending:
                    self._cut_pending = False
                    await self._wire(WireClear(ledger.epoch))
                    if (cut := self._cut_lead) is not None:
                        self._cut_lead = None
                        await self._report(cut)
                await self._flush_reports()
                continue
            for mid in ledger.due_marks():
                if ledger.generation != seen:
                    break  # the clear cut it; it is reported with the other cut marks
                await self._wire(WireMark(mid))
            if ledger.generation != seen:
                continue
            await self._flush_reports()
            if ledger.generation != seen:
                continue
            self._idle = True
            try:
                got = await sink.recv_or_wake()
            finally:
                self._idle = False
            if not isinstance(got, OutputAudioFrame):
                continue
            if got.epoch != ledger.epoch:
                continue
            await self._wire(self._release(got))

    def _take_audio(self, ev: WireAudio) -> None:
        frame = InputAudioFrame(epoch=self._ledger.epoch, pcm=ev.pcm, sample_rate=ev.sample_rate, seq=ev.seq, at=ev.at)
        sink = self._audio_sink
        if sink is None:
            self._events.try_send(CallerAudio(frame, ev.at))
        else:
            sink(frame)

    async def _run_input(self) -> None:
        try:
            await self._input()
        finally:
            self._link.audio.handler = None  # the input has ended: so has the caller's audio

    async def _input(self) -> None:
        ledger, events, link = self._ledger, self._events, self._link
        while True:
            try:
                ev = await link.events.recv()
            except ChannelClosed:
                self._set_reason(StopReason.PEER_DISCONNECTED)
                return
            if isinstance(ev, WireAudio):
                self._take_audio(ev)
            elif isinstance(ev, WireDtmf):
                await events.send(Dtmf(ev.digit, ev.at))
            elif isinstance(ev, WireText):
                await events.send(TypedText(ev.text, ev.at, ev.reply))
            elif isinstance(ev, WireNote):
                await events.send(ContextNote(ev.text, ev.at))
            elif isinstance(ev, WireMarkEcho):
                if ledger.echo(ev.id):
                    await events.send(MarkPlayed(ev.id))
            elif isinstance(ev, WireStarted):
                await events.send(Started(ev.info))
            elif isinstance(ev, WireFault):
                await events.send(TransportError(ev.kind, ev.message, ev.fatal))
            elif isinstance(ev, WireLead):
                # The lead behind the release schedule: the part a clear now would flush unplayed.
                # Not clamped at the schedule's end: a buffering phone echoes a reply's last mark
                # after its audio was all released, and then trails the schedule by the lead plus
                # the time since it ended (so unplayed() says what this echo said, and keeps
                # saying it into the next reply until an echo of that one comes).
                ended = self._playout_end if math.isfinite(self._playout_end) else self._clock.now()
                self._lag = ev.lead + self._clock.now() - ended
                if self._playout_sink is None:
                    events.try_send(PlaybackLead(ev.lead, ledger.epoch))
            elif isinstance(ev, WireHangup):
                self._set_reason(StopReason.PEER_HANGUP)
                return


def _split(frame: OutputAudioFrame, tick: float) -> list[OutputAudioFrame]:
    per = max(1, round(frame.sample_rate * tick)) * 2
    pcm = frame.pcm
    if len(pcm) <= per:
        return [frame]
    return [
        OutputAudioFrame(epoch=frame.epoch, pcm=pcm[i:i + per], sample_rate=frame.sample_rate,
                         utterance=frame.utterance, seq=frame.seq)
        for i in range(0, len(pcm), per)
    ]
