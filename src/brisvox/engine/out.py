"""Stage 5: TransportOut, the tail.  It only translates: frames to transport commands.

There is no pacer here: the transport session's pacer already releases one 20 ms frame
per tick.  Before the first audio of an epoch newer than the last one cleared it sends
``Clear(epoch)`` (the transport's ledger advances only through clears; on an idle
transport it cuts nothing, and the transport writes no clear to the client).

It is also the one owner of the playout facts.  Position reports do not travel through
the pipeline: the session hands each one to :meth:`TransportOut.released` in its output
task (``TransportSession.route_playout``), which records it in the PlayoutBook at once; so
does the lead a clear flushed on a carrier call (``PlaybackLead``: audio the carrier held and
never played, which the book takes off what the caller heard).
The first report of an epoch becomes ``BotAudioStarted``, and once the response is done
and has played out, ``BotAudioEnded``: both go straight to the turn driver's inbox, the
one stage that decides with them (``report_to``), and the played-out response to the
runner (a flow's EndCall waits for it).  The report that covers the epoch's first audible
sample (the PlayoutBook finds it in the audio sent) marks ``TurnEvent.BOT_AUDIBLE`` at the
moment that sample went out (the transport releases audio in real time, so it went out as
long ago as the audio released after it lasts) and emits ``BotAudible``: the latency the
caller perceives ends there.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import ClassVar

from brisvox.audio.pacer import FRAME_DURATION
from brisvox.core.frames import (
    BotAudioEnded,
    BotAudioStarted,
    BotResponseDone,
    Direction,
    Frame,
    InterruptFrame,
    OutputAudioFrame,
    UtteranceFlushed,
)
from brisvox.core.processor import EpochPolicy, Processor, ProcessorContext
from brisvox.core.timeline import TimelineRecorder, TurnEvent
from brisvox.engine.events import BotAudible, CallEvents
from brisvox.engine.playout import PlayoutBook
from brisvox.transport.events import PlaybackLead
from brisvox.transport.session import CommandSender, PlayoutReport

__all__ = ["PlayoutFact", "TransportOut"]

log = logging.getLogger(__name__)

PlayoutFact = BotAudioStarted | BotAudioEnded


class TransportOut(Processor):
    # It drops and counts stale audio itself, and must see BotResponseDone of every epoch.
    epoch_policy: ClassVar[EpochPolicy] = EpochPolicy.KEEP_ALL

    def __init__(self, commands: CommandSender, book: PlayoutBook, timeline: TimelineRecorder | None = None,
                 events: CallEvents | None = None) -> None:
        self._timeline = timeline or TimelineRecorder()
        self._events = events or CallEvents("")
        self._commands = commands
        self._book = book
        self._tell: Callable[[PlayoutFact], Awaitable[object]] | None = None
        self._cleared = 0
        self.stale_audio_dropped = 0
        self.frames_sent = 0
        self._newest = 0  # the newest epoch an interrupt opened
        self._news = asyncio.Event()  # an utterance was flushed or an epoch cut (speech_sent waits on it)

    @property
    def name(self) -> str:
        return "transport-out"

    def report_to(self, tell: Callable[[PlayoutFact], Awaitable[object]] | None) -> None:
        """Where ``BotAudioStarted`` and ``BotAudioEnded`` go (None: nowhere, an S2S call has no
        turn driver); ``tell`` waits for room and may raise ChannelClosed once its stage ended."""
        self._tell = tell

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if isinstance(frame, OutputAudioFrame):
            if frame.epoch < ctx.epoch:
                self.stale_audio_dropped += 1
                return
            if frame.epoch > self._cleared:
                self._cleared = frame.epoch
                self._commands.clear(frame.epoch)
            self._book.audio_sent(frame.utterance, frame.pcm, frame.sample_rate)
            await self._commands.audio(frame)
            self._timeline.mark(frame.epoch, TurnEvent.FIRST_AUDIO_SENT, ctx.clock.now())
            self.frames_sent += 1
            return
        if isinstance(frame, UtteranceFlushed):
            self._book.flushed(frame.utterance)
            self._news.set()
            return
        if isinstance(frame, InterruptFrame):
            self._newest = max(self._newest, frame.new_epoch)
            self._news.set()
        if isinstance(frame, BotResponseDone):
            if frame.epoch >= ctx.epoch and self._book.take_ended(frame.epoch):
                await self._report(BotAudioEnded(epoch=frame.epoch, at=ctx.clock.now()))
            return
        if direction is Direction.DOWNSTREAM and frame.frame_class.value != "system":
            return  # text, timings and turn markers end here
        await ctx.push(frame, direction)

    async def speech_sent(self, epoch: int) -> bool:
        """Wait until every utterance of ``epoch`` opened so far has all its audio with the
        transport (a mark sent then is behind the last of it); False once a barge-in cut the
        epoch.  Unbounded: the caller bounds it."""
        while True:
            if self._newest > epoch:
                return False
            if self._book.all_flushed(epoch):
                return True
            self._news.clear()
            await self._news.wait()

    async def released(self, report: PlayoutReport, now: float) -> None:
        """A position report from the transport (in the session's output task, not this
        stage's): into the book at once, and what it reveals to the driver.  A flushed lead
        only goes into the book."""
        if isinstance(report, PlaybackLead):
            self._book.unplayed(report.epoch, report.lead)
            return
        released = self._book.released(report.utterance, report.samples, report.sample_rate)
        if released.audible is not None:
            # The report comes as the frame ending at its position is released; frames go
            # out in real time, so the audible sample played as long ago as the audio
            # released from it on lasts, less the frame being released now.
            at = now - max(0.0, released.audible_ago - FRAME_DURATION)
            self._timeline.mark(released.audible, TurnEvent.BOT_AUDIBLE, at)
            self._events.emit(BotAudible(epoch=released.audible, at=at))
        if released.started is not None:
            self._timeline.mark(released.started, TurnEvent.BOT_AUDIO_STARTED, now)
            await self._report(BotAudioStarted(epoch=released.started, at=now))
        epoch = self._book.epoch_of(report.utterance)
        if epoch is not None and self._book.take_ended(epoch):
            await self._report(BotAudioEnded(epoch=epoch, at=now))

    async def _report(self, fact: PlayoutFact) -> None:
        if self._tell is not None:
            await self._tell(fact)
