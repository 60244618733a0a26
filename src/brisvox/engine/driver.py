"""Stage 2: the turn driver, the only authority over epochs.

It feeds the pure :class:`~brisvox.agent.turn.TurnMachine` with VAD events, transcripts,
bot-audio reports and its own timer, and carries out the machine's actions:

* ``Interrupt``: the transport's output is cleared first, on the fast path (applied
  inside the transport before the call returns), then the interrupt travels downstream;
* ``StartUserTurn``: ``UserTurnStarted`` of the new epoch;
* ``EndUserTurn``: the turn's transcript (``UserTextFrame``) then ``UserTurnEnded``;
* typed text (a ``UserTextFrame`` arriving from upstream of the driver) and caller keys
  (``DtmfFrame``, as :func:`dtmf_text`) go to the machine as ``UserText``: a turn of their
  own that ends at once (a barge-in when the bot is answering), or, while the caller is
  speaking, part of the turn in progress;
* the turn's ``UserTextFrame`` carries the reply its parts asked for
  (:class:`~brisvox.core.frames.ReplyMode`): TEXT only when every part was typed asking for a
  text-only answer; spoken words and keys ask for a spoken one;
* a pause with words (the machine is ``USER_PAUSED`` and the turn has a final's text):
  ``UserTurnTentative`` with the words so far, once per distinct text; the runner may
  start the model speculatively on it (``EngineConfig.speculation``);
* with ``greets`` (the call opens with the bot's greeting), the pipeline's
  ``StartFrame`` tells the machine the bot opens the call (:class:`~brisvox.agent.turn.BotOpens`):
  epoch 0 is the greeting's, the caller's first turn is epoch 1, and a caller who talks
  over the greeting barges in like on any reply;
* a bot line (``BotLineFrame``, an agent's ``say``, put into this stage's inbox by
  ``run_call``) goes to the machine as ``BotTurn``: when it starts a bot turn
  (``StartBotTurn``, after an ``Interrupt`` that clears the transport when the line
  interrupts) the line goes on downstream in the new epoch, for the runner to speak; until
  then it is held (at most :data:`~brisvox.engine.agent_input.HELD_LINES`, in order) and
  offered again after every frame; a line past that, or held when the call ends, is
  refused to the agent;
* ``ArmTimer`` / ``CancelTimer``: one timer task, which wakes the driver by putting a
  ``TimerFrame`` into the driver's own inbox, so the machine is only ever touched from
  the driver's task;
* ``RequestAnalysis``: the end-of-turn model runs on its own executor over the caller's
  last 8 s of audio (shared with the listen stage) and its verdict comes back the same
  way, as a ``TurnVerdictFrame``.  Without a model (or when its executor refuses the
  job) no verdict comes and the machine ends the turn at its fallback deadline.

Events (:mod:`brisvox.engine.events`): the driver is where turns are decided, so it emits
``TurnStarted`` (``barge_in`` after an interrupt), ``TurnEnded`` (with the caller's last
VAD stop inside the turn) and every non-empty transcript as a ``UserTranscript`` of the
turn it went to (the machine's epoch once the transcript was handled), and a
``ModelBusy`` for each ``ModelBusyFrame`` of the listen stage (the caller's words lost).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections import deque
from collections.abc import Callable
from typing import ClassVar, Protocol

import numpy as np
import numpy.typing as npt

from brisvox.agent import turn as T
from brisvox.core.frames import (
    BotAudioEnded,
    BotAudioStarted,
    BotLineFrame,
    Direction,
    DtmfFrame,
    Frame,
    InterruptFrame,
    ModelBusyFrame,
    ReplyMode,
    StartFrame,
    StopFrame,
    TimerFrame,
    TranscriptFrame,
    TurnVerdictFrame,
    UserTextFrame,
    UserTurnEnded,
    UserTurnStarted,
    UserTurnTentative,
    VadStartedFrame,
    VadStoppedFrame,
)
from brisvox.core.processor import EpochPolicy, Processor, ProcessorContext
from brisvox.core.tasks import TaskScope
from brisvox.core.timeline import TimelineRecorder, TurnEvent
from brisvox.engine.agent_input import HELD_LINES, AgentInput, Refusal
from brisvox.engine.events import CallEvents, ModelBusy, TurnEnded, TurnStarted, UserTranscript
from brisvox.inference.errors import InferenceError
from brisvox.inference.smart_turn import TurnAudio, TurnVerdict

__all__ = ["TurnAnalyzer", "TurnDriver", "dtmf_text"]

log = logging.getLogger(__name__)

_IN_TURN = (T.TurnState.USER_SPEAKING, T.TurnState.USER_PAUSED)


def dtmf_text(digit: str) -> str:
    """How a key the caller pressed reads in the conversation."""
    return f"[the caller pressed the key {digit}]"


class TurnAnalyzer(Protocol):
    """An end-of-turn model (``brisvox.inference.EndOfTurnAnalyzer`` is one)."""

    async def analyze(self, audio: npt.NDArray[np.int16]) -> TurnVerdict: ...


class _Words:
    """The pieces of a turn's text (or of typed text waiting for a turn) and the reply they ask
    for (None: no piece yet; see :meth:`ReplyMode.joined`)."""

    __slots__ = ("pieces", "reply")

    def __init__(self) -> None:
        self.pieces: list[str] = []
        self.reply: ReplyMode | None = None

    def add(self, text: str, reply: ReplyMode) -> None:
        self.pieces.append(text)
        self.reply = reply if self.reply is None else self.reply.joined(reply)

    def take(self, other: _Words) -> None:
        """Move ``other``'s pieces after these."""
        for text in other.pieces:
            self.add(text, other.reply or ReplyMode.SPOKEN)
        other.pieces, other.reply = [], None

    def text(self) -> str:
        return " ".join(self.pieces)


class TurnDriver(Processor):
    epoch_policy: ClassVar[EpochPolicy] = EpochPolicy.KEEP_ALL

    def __init__(
        self,
        machine: T.TurnMachine,
        clear: Callable[[int], object],
        scope: TaskScope,
        analyzer: TurnAnalyzer | None = None,
        turn_audio: TurnAudio | None = None,
        timeline: TimelineRecorder | None = None,
        greets: bool = False,
        events: CallEvents | None = None,
        agent: AgentInput | None = None,
    ) -> None:
        self.machine = machine
        self._agent = agent  # where a bot line that cannot be said is refused
        self._lines: deque[BotLineFrame] = deque()  # bot lines waiting for the machine
        self._events = events or CallEvents("")
        self._barge_in = False  # an Interrupt came before the StartUserTurn being carried out
        self._turn_at: float | None = None  # when the turn in progress started
        self._speech_ended: float | None = None  # the caller's latest VAD stop
        self._greets = greets
        self._timeline = timeline or TimelineRecorder()
        self._analyzer = analyzer
        self._turn_audio = turn_audio
        self.analyses_failed = 0
        self._clear = clear
        self._scope = scope
        self._timer_token = 0
        self._timer_task: asyncio.Task[None] | None = None
        self._turn_text = _Words()
        self._typed = _Words()  # typed text and keys waiting for their turn's text
        self.late_finals = 0  # finals that came after their turn ended (see the module docs)
        self._tentative: tuple[int, str] | None = None  # the last UserTurnTentative sent
        self.interrupts = 0

    @property
    def name(self) -> str:
        return "turn-driver"

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if isinstance(frame, BotLineFrame):
            if len(self._lines) >= HELD_LINES:
                self._refuse(frame, Refusal.BUSY, f"{HELD_LINES} lines are already waiting to be said")
                return
            self._lines.append(frame)
        else:
            await self._handle(frame, direction, ctx)
        if isinstance(frame, StopFrame):
            self.refuse_lines()
        while self._lines and self.machine.bot_turn_possible(self._lines[0].interrupt):
            await self._say(self._lines.popleft(), ctx)

    def refuse_lines(self) -> None:
        """The call ends: every line still held is refused ``call_ended``."""
        while self._lines:
            self._refuse(self._lines.popleft(), Refusal.CALL_ENDED, "the call ended before the line was said")

    def _refuse(self, line: BotLineFrame, why: Refusal, message: str) -> None:
        if self._agent is not None:
            self._agent.refuse("end" if line.farewell else "say", why, message)

    async def _say(self, line: BotLineFrame, ctx: ProcessorContext) -> None:
        """A bot turn for ``line`` (the machine said it can start one): the reply playing now is
        cut first when the line interrupts it; the line goes on in the new epoch."""
        for action in self.machine.handle(T.BotTurn(at=ctx.clock.now(), interrupt=line.interrupt)):
            if isinstance(action, T.Interrupt):
                self._clear(action.epoch)  # fast path, as at a barge-in
                await ctx.push(InterruptFrame(new_epoch=action.epoch))
            elif isinstance(action, T.StartBotTurn):
                self._barge_in = False
                await ctx.push(dataclasses.replace(line, epoch=action.epoch))
            else:
                await self._act([action], ctx)

    async def _handle(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        inp = self._input_for(frame, ctx)
        if inp is None:
            if isinstance(frame, StopFrame):
                await self._act(self.machine.handle(T.Hangup(at=ctx.clock.now())), ctx)
            elif isinstance(frame, StartFrame) and self._greets:
                await self._act(self.machine.handle(T.BotOpens(at=ctx.clock.now())), ctx)
            elif isinstance(frame, ModelBusyFrame):  # the caller's words were lost: tagged with their turn
                self._events.emit(ModelBusy(epoch=self.machine.epoch, at=ctx.clock.now(), stage=frame.stage,
                                            provider=frame.provider))
            if not isinstance(frame, TimerFrame | TurnVerdictFrame | BotAudioStarted | BotAudioEnded):
                await ctx.push(frame, direction)
            return
        if isinstance(frame, VadStoppedFrame):
            self._speech_ended = frame.at
        actions = self.machine.handle(inp)
        # A final that completes the turn it came too late for (the machine starts and ends
        # the turn that replaces it): not a barge-in, and the caller's speech end stands.
        await self._act(actions, ctx, completes=isinstance(inp, T.SttFinal)
                        and any(isinstance(a, T.StartUserTurn) for a in actions))
        if isinstance(frame, TranscriptFrame):
            self._transcript(frame)
        if self._typed.pieces:  # the caller is speaking: the text joins the turn in progress
            self._turn_text.take(self._typed)
        if isinstance(inp, T.SttFinal | T.VadStop) and self.machine.state is T.TurnState.USER_PAUSED:
            await self._tentative_end(inp.at, ctx)

    def _transcript(self, frame: TranscriptFrame) -> None:
        text = frame.text.strip()
        if text:
            self._events.emit(UserTranscript(epoch=self.machine.epoch, at=frame.at, text=text, final=frame.is_final))

    async def _tentative_end(self, at: float, ctx: ProcessorContext) -> None:
        text = self._turn_text.text()
        mark = (self.machine.epoch, text)
        if text and mark != self._tentative:
            self._tentative = mark
            await ctx.push(UserTurnTentative(epoch=self.machine.epoch, at=at, text=text))

    def _input_for(self, frame: Frame, ctx: ProcessorContext) -> T.TurnInput | None:
        if isinstance(frame, VadStartedFrame):
            return T.VadStart(at=frame.at)
        if isinstance(frame, VadStoppedFrame):
            return T.VadStop(at=frame.at)
        if isinstance(frame, TranscriptFrame):
            if frame.is_final:
                machine = self.machine
                if frame.text.strip() and (machine.state in _IN_TURN or machine.owes_ended_turn):
                    # The turn's words; a late final's join the turn that completes or follows it.
                    # (Outside a turn, a final with no turn of its own is a vetoed barge-in's: dropped.)
                    self.late_finals += machine.state not in _IN_TURN
                    self._turn_text.add(frame.text.strip(), ReplyMode.SPOKEN)
                return T.SttFinal(at=frame.at, text=frame.text)
            return T.SttInterim(at=frame.at, text=frame.text)
        if isinstance(frame, BotAudioStarted):
            return T.BotAudioStarted(at=frame.at, epoch=frame.epoch)
        if isinstance(frame, BotAudioEnded):
            return T.BotAudioEnded(at=frame.at, epoch=frame.epoch)
        if isinstance(frame, UserTextFrame | DtmfFrame):
            text = frame.text.strip() if isinstance(frame, UserTextFrame) else dtmf_text(frame.digit)
            if not text:
                return None
            self._typed.add(text, frame.reply if isinstance(frame, UserTextFrame) else ReplyMode.SPOKEN)
            return T.UserText(at=ctx.clock.now(), text=text)
        if isinstance(frame, TurnVerdictFrame):
            return T.Verdict(at=frame.at, analysis=frame.analysis, complete=frame.complete)
        if isinstance(frame, TimerFrame):
            if frame.token != self._timer_token:
                return None  # a timer that was replaced after it fired
            self._timer_task = None
            return T.Tick(at=frame.at)
        return None

    async def _act(self, actions: list[T.TurnAction], ctx: ProcessorContext, *, completes: bool = False) -> None:
        for action in actions:
            if isinstance(action, T.Interrupt):
                if not completes:
                    self.interrupts += 1
                    self._timeline.mark(action.epoch, TurnEvent.BARGE_IN, ctx.clock.now())
                self._clear(action.epoch)  # fast path: the caller stops hearing the bot now
                self._timeline.mark(action.epoch, TurnEvent.CLEAR_APPLIED, ctx.clock.now())
                self._barge_in = not completes
                await ctx.push(InterruptFrame(new_epoch=action.epoch))
            elif isinstance(action, T.StartUserTurn):
                self._turn_text.take(self._typed)  # after a late final's words, if any
                self._timeline.mark(action.epoch, TurnEvent.USER_TURN_STARTED, action.at)
                if not completes:  # a completed turn keeps its start: the caller's speech end is in it
                    self._turn_at = action.at
                self._events.emit(TurnStarted(epoch=action.epoch, at=action.at, barge_in=self._barge_in))
                self._barge_in = False
                await ctx.push(UserTurnStarted(epoch=action.epoch, at=action.at))
            elif isinstance(action, T.EndUserTurn):
                self._turn_text.take(self._typed)
                text, reply = self._turn_text.text(), self._turn_text.reply or ReplyMode.SPOKEN
                self._turn_text = _Words()
                now = ctx.clock.now()
                self._timeline.mark(action.epoch, TurnEvent.USER_TURN_ENDED, now)
                speech = self._speech_ended
                if speech is not None and self._turn_at is not None and speech < self._turn_at:
                    speech = None  # the stop belongs to an earlier turn (this one was typed)
                self._events.emit(TurnEnded(epoch=action.epoch, at=now, reason=action.reason.frame_reason,
                                            speech_ended=speech))
                await ctx.push(UserTextFrame(epoch=action.epoch, text=text, reply=reply))
                await ctx.push(UserTurnEnded(epoch=action.epoch, at=action.at, reason=action.reason.frame_reason))
            elif isinstance(action, T.ArmTimer):
                self._arm(action.deadline, ctx)
            elif isinstance(action, T.CancelTimer):
                self._cancel_timer()
            elif isinstance(action, T.RequestAnalysis):
                self._analyze(action.id, ctx)

    def _analyze(self, analysis: int, ctx: ProcessorContext) -> None:
        analyzer, audio = self._analyzer, self._turn_audio
        if analyzer is None or audio is None:
            return
        snapshot = audio.snapshot()

        async def run() -> None:
            try:
                verdict = await analyzer.analyze(snapshot)
            except InferenceError as exc:
                self.analyses_failed += 1
                log.debug("end-of-turn analysis %d failed: %s", analysis, exc)
                return
            ctx.inbox.try_put(
                TurnVerdictFrame(at=ctx.clock.now(), analysis=analysis, complete=verdict.complete),
                Direction.DOWNSTREAM,
            )

        self._scope.spawn(run(), name=f"end-of-turn-{analysis}")

    def _arm(self, deadline: float, ctx: ProcessorContext) -> None:
        self._cancel_timer()
        self._timer_token += 1
        token = self._timer_token

        async def fire() -> None:
            await ctx.clock.sleep_until(deadline)
            ctx.inbox.try_put(TimerFrame(at=ctx.clock.now(), token=token), Direction.DOWNSTREAM)

        self._timer_task = self._scope.spawn(fire(), name=f"turn-timer-{token}")

    def _cancel_timer(self) -> None:
        task = self._timer_task
        if task is not None:
            task.cancel()
            self._timer_task = None
        self._timer_token += 1
