"""``run_s2s_call``: one call whose model hears and speaks (a speech-to-speech session).

    pump → S2sStage → transport out

A separate entry point, not a mode of ``run_call``: the cascaded call's listen, turn driver,
LLM runner and speak stages have no part here, while the ends are the same objects (the
pump, ``TransportOut``, the ``PlayoutBook``, the ``ToolEngine``, the failure path of
``run_call``).  A mode flag would put an ``if`` in front of every cascaded stage.

The stage sends the caller's audio (resampled to ``S2sConfig.input_rate``) to the session
and reads the session's events in a reader task of the call's scope: the model's audio
(resampled to the transport's rate) goes downstream as ``OutputAudioFrame``s of one
utterance per vendor item, so ``TransportOut`` and the book know what was heard from the
transport's position reports.  Two counters: the *user turn* (the tool engine's epoch and
the events' epoch; the vendor's ``S2sSpeechStarted`` starts one, or our VAD with
``BargeIn.OURS``) and the *playout epoch* (advanced only by a cut: an ``InterruptFrame``
and a ``Clear`` stop the old audio).

Tool calls of one response run through the ``ToolEngine`` (ReadOnly/SideEffect rules,
idempotency, ``already_done``, the confirmation gate with the user turn marked at speech
start) in a task, so audio and events keep flowing; the results go back in call order with
one ``request_response``.  A cut cancels a running execution (its results never reach the
model; a SideEffect that finishes later is a late note, told once with ``add_note``).

Barge-in: ``BargeIn.MODEL``: the vendor's ``S2sInterrupted`` cuts; ``BargeIn.OURS``: our
VAD's speech start while the model's audio plays cuts and ``cancel_response`` is sent.  A
cut tells the model what was heard: ``truncate(item, heard_ms)`` at the transport's position.

Typed text (``UserTextFrame``) and keys (``DtmfFrame``, worded by the cascade's ``dtmf_text``) are a
user turn of their own, as in the cascade: a cut while the model's audio plays (any barge-in mode:
the vendor never hears them), ``add_user_text`` and one ``request_response``.  A screen's
``ContextNoteFrame`` is a note and opens no turn.

Guards: the delivery guard corrects a tool result (correction first) when a send was
claimed while the call ran and nothing was delivered (``Execution.delivered``: what the tool's
returned value listed under ``delivered``, carried by the tool engine); the work guard decides at each ``S2sInteractionEnded`` and its
``work-claim-without-tool`` decision is logged, its note added and at most one turn per
user utterance requested.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Sequence
from typing import Any, ClassVar

from brisvox.agent.context import Context, ToolCall
from brisvox.agent.guards import (
    ClaimPatterns,
    DeliveryClaimGuard,
    ThinkBudget,
    WorkClaimGuard,
    WorkClaimVerdict,
)
from brisvox.agent.tools import CancelToken, ToolEngine, ToolRegistry
from brisvox.agent.tools.execution import Execution
from brisvox.agent.tools.filler import FillerPlan, FillerPolicy
from brisvox.audio.resample import ResampleStream
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.frames import (
    ContextNoteFrame,
    Direction,
    DtmfFrame,
    Frame,
    InputAudioFrame,
    InterruptFrame,
    OutputAudioFrame,
    TurnEndReason,
    UserTextFrame,
    VadStartedFrame,
)
from brisvox.core.pipeline import Pipeline
from brisvox.core.processor import EpochPolicy, Processor, ProcessorContext
from brisvox.core.tasks import TaskScope
from brisvox.core.timeline import TimelineRecorder
from brisvox.engine.call import (
    CallFailed,
    CallReport,
    _audio_into,
    _Fault,
    _positions_into,
    _pump,
    call_failure,
    call_meta,
)
from brisvox.engine.config import Timeouts
from brisvox.engine.driver import dtmf_text
from brisvox.engine.events import (
    BotDone,
    BotHeard,
    BotText,
    CallEvents,
    CallObserver,
    ToolCallSettled,
    ToolCallStarted,
    TurnEnded,
    TurnStarted,
    UserTranscript,
)
from brisvox.engine.out import TransportOut
from brisvox.engine.phone import MarkWaits
from brisvox.engine.playout import PlayoutBook
from brisvox.inference.vad import VoiceActivityDetector
from brisvox.providers.s2s import (
    BargeIn,
    S2sAudio,
    S2sConfig,
    S2sError,
    S2sEvent,
    S2sInteractionEnded,
    S2sInterrupted,
    S2sProvider,
    S2sResponseDone,
    S2sSession,
    S2sSpeechStarted,
    S2sSpeechStopped,
    S2sToolCall,
    S2sToolCallsCancelled,
    S2sToolResult,
    S2sTranscript,
    Speaker,
)
from brisvox.transport.events import FailureKind
from brisvox.transport.session import CommandSender, TransportSession

__all__ = ["run_s2s_call"]

log = logging.getLogger(__name__)


class _S2sStats:
    """Counts of one S2S call (turns and cuts go into its :class:`CallReport`; all are logged at its end)."""

    __slots__ = ("cuts", "fillers", "late_answers", "late_notes", "still_running", "truncations", "turns",
                 "work_claims", "work_turns")

    def __init__(self) -> None:
        self.turns = 0  # user turns (speech starts)
        self.cuts = 0  # barge-ins that stopped the model's audio
        self.truncations = 0  # truncate() sent
        self.late_notes = 0  # late results told to the model
        self.work_claims = 0  # work-claim-without-tool decisions
        self.work_turns = 0  # of those, turns requested
        self.still_running = 0  # rounds answered "still running" past the think budget
        self.late_answers = 0  # their real results, told later (once each)
        self.fillers = 0  # holding lines the model was asked to say while a tool ran in silence


async def run_s2s_call(
    session: TransportSession,
    config: S2sConfig,
    provider: S2sProvider,
    clock: Clock,
    *,
    tools: ToolRegistry | None = None,
    observer: CallObserver | None = None,
    cancel: asyncio.Event | None = None,
    vad: VoiceActivityDetector | None = None,
    timeouts: Timeouts | None = None,
    patterns: ClaimPatterns | None = None,
) -> CallReport:
    """Run one call over a speech-to-speech session until the caller hangs up, the transport
    ends or ``cancel`` is set.  ``vad`` (at the transport's input rate) is required with
    ``BargeIn.OURS``.  ``config.tools`` are replaced by the registry's specs when ``tools``
    is given.  Raises :class:`CallFailed` like ``run_call``."""
    timeouts = timeouts or Timeouts()
    if config.barge_in is BargeIn.OURS and vad is None:
        raise ConfigError("run_s2s_call: BargeIn.OURS needs a vad (our voice activity detection decides)")
    if tools is not None:
        config = dataclasses.replace(config, tools=tools.specs())
    timeline = TimelineRecorder()
    events = CallEvents(session.info.call_id, observer, timeline)
    stats = _S2sStats()
    fault = _Fault(events, clock, lambda: stats.turns, asyncio.Event())
    out: TransportOut | None = None
    try:
        out = await _run(session, config, provider, clock, tools, events, timeline, fault, stats, cancel, vad,
                         timeouts, patterns or ClaimPatterns())
    except Exception as exc:  # a connect that failed, a helper failure the call's scope re-raises
        fault.record("run_s2s_call", exc)
    log.info("call %s: s2s ended: %d turns, %d cuts, %d truncations, %d late notes, %d work claims without a "
             "tool (%d turns requested), %d rounds past the think budget (%d late answers), %d fillers",
             session.info.call_id, stats.turns, stats.cuts, stats.truncations, stats.late_notes, stats.work_claims,
             stats.work_turns, stats.still_running, stats.late_answers, stats.fillers)
    told = None if fault.cause is None else call_failure(fault.cause)
    reason = await session.close(timeouts.stop, failure=told)
    report = CallReport(
        stop_reason=reason, context=Context(), turns=stats.turns, interrupts=stats.cuts, fallbacks=0,
        stale_audio_dropped=out.stale_audio_dropped if out is not None else 0, timeline=tuple(timeline.records()),
        failures=events.failures, failure=fault.failure,
    )
    if fault.failure is not None:
        raise CallFailed(report, crashed=told is not None and told.kind is FailureKind.INTERNAL_ERROR) from fault.cause
    return report


async def _run(session: TransportSession, config: S2sConfig, provider: S2sProvider, clock: Clock,
               tools: ToolRegistry | None, events: CallEvents, timeline: TimelineRecorder, fault: _Fault,
               stats: _S2sStats, cancel: asyncio.Event | None, vad: VoiceActivityDetector | None,
               timeouts: Timeouts, patterns: ClaimPatterns) -> TransportOut:
    rates = session.info.sample_rate()
    in_rate = rates.input if rates else config.input_rate
    out_rate = rates.output if rates else config.output_rate
    book = PlayoutBook()
    commands = session.commands()
    out = TransportOut(commands, book, timeline, events)
    async with TaskScope("s2s-call", on_failure=fault.record) as scope:
        s2s: S2sSession = await bounded(clock, timeouts.connect, provider.connect(config), f"connecting {provider.name}")
        if config.greeting:  # the model speaks first only when asked to
            await s2s.add_note(f"The call has started. Greet the caller now with these words, in their language: "
                               f"{config.greeting}")
            await s2s.request_response()
        engine = ToolEngine(tools, session.info.call_id, clock, meta=call_meta(session.info)) if tools is not None else None
        async with contextlib.AsyncExitStack() as stack:
            stack.push_async_callback(s2s.aclose)
            if engine is not None:
                await stack.enter_async_context(engine)
            stage = S2sStage(s2s, config, in_rate, out_rate, book, engine, events, commands, scope, clock, stats,
                             vad, patterns)
            pipeline = Pipeline("s2s-call").then(stage).then(out)
            running = pipeline.start(clock)
            session.route_caller_audio(_audio_into(running))
            session.route_playout(_positions_into(out, clock, fault))
            try:
                await _pump(session, running, cancel, fault, MarkWaits())
                if engine is not None:
                    engine.hang_up()  # no side effect starts once the caller is gone
            finally:
                session.route_caller_audio(None)
                session.route_playout(None)
                scope.cancel()
                await running.aclose()
                if engine is not None:
                    await engine.wait_side_effects(timeouts.stop)
    return out


class S2sStage(Processor):
    """The model's side of an S2S call (see the module docs)."""

    # Caller audio carries no epoch of ours.
    epoch_policy: ClassVar[EpochPolicy] = EpochPolicy.KEEP_ALL

    def __init__(self, s2s: S2sSession, config: S2sConfig, in_rate: int, out_rate: int, book: PlayoutBook,
                 engine: ToolEngine | None, events: CallEvents, commands: CommandSender, scope: TaskScope,
                 clock: Clock, stats: _S2sStats, vad: VoiceActivityDetector | None, patterns: ClaimPatterns) -> None:
        self._s2s, self._config, self._book, self._engine = s2s, config, book, engine
        if engine is not None:
            # The vendor's transcript of the caller may come after the model's call: the words
            # are not known when a from_caller argument is checked, so the check is off here.
            engine.grounds.check_words = False
        self._events, self._commands, self._scope, self._clock, self._stats = events, commands, scope, clock, stats
        self._vad = vad if config.barge_in is BargeIn.OURS else None
        self._in = ResampleStream(in_rate, config.input_rate) if in_rate != config.input_rate else None
        self._out = ResampleStream(config.output_rate, out_rate) if out_rate != config.output_rate else None
        self._out_rate = out_rate
        self._delivery = DeliveryClaimGuard(patterns)
        self._work = WorkClaimGuard(patterns)
        self._started = False
        self._epoch = 0  # playout epoch: advanced by cuts only
        self._round = 0
        self._item: str | None = None  # the vendor item being spoken
        self._utterance: int | None = None
        self._reply: list[str] = []  # the model's words of the current response
        self._pending: list[S2sToolCall] = []
        self._seq = 0
        self._token: CancelToken | None = None  # the running execution's
        self._executing = 0  # executions started and not yet answered
        self._fillers = FillerPolicy.from_config(config.filler)
        self._last_audio = float("-inf")  # when the model's audio last arrived
        # A response asked for or under way and not yet done (the greeting was asked before the stage ran).
        self._responding = config.greeting is not None

    @property
    def name(self) -> str:
        return "s2s"

    # --- caller side -----------------------------------------------------------------------

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if not self._started:
            self._started = True
            self._scope.spawn(self._read(ctx), name="s2s-reader")
        if isinstance(frame, InputAudioFrame):
            if self._vad is not None:
                at = frame.at or ctx.clock.now() - frame.duration
                for event in await self._vad.process(frame.pcm, at):
                    if isinstance(event, VadStartedFrame):
                        await self._user_speech(ctx, ours=True)
            pcm = frame.pcm if self._in is None else self._in.process(frame.pcm)
            if pcm:
                await self._s2s.send_audio(pcm)
            return
        if isinstance(frame, ContextNoteFrame):  # the caller's screen said something: context, no turn
            await self._s2s.add_note(frame.text)
            return
        if isinstance(frame, UserTextFrame | DtmfFrame):
            await self._typed(frame.text.strip() if isinstance(frame, UserTextFrame) else dtmf_text(frame.digit), ctx)
            return
        await ctx.push(frame, direction)

    async def _typed(self, text: str, ctx: ProcessorContext) -> None:
        """The caller typed a message or pressed a key: a user turn of its own that ends at once, as the
        cascade's turn driver makes of both (a barge-in while the model's audio plays); the model gets
        it as a user message and is asked to answer.  A send that fails raises: the call's failure path."""
        if not text:
            log.info("call %s: an empty typed message: no turn", self._events.call_id)
            return
        if self._responding and not self._playing():
            # A response the caller does not hear yet (the greeting being made): the typed turn replaces
            # it; OpenAI refuses a response.create while one is active.  When it plays, the cut cancels it.
            await self._s2s.cancel_response()
        await self._user_speech(ctx, ours=True)
        now, turn = self._clock.now(), self._stats.turns
        self._events.emit(UserTranscript(epoch=turn, at=now, text=text, final=True))
        if self._engine is not None:
            self._engine.note_user_turn(text)
        self._events.emit(TurnEnded(epoch=turn, at=now, reason=TurnEndReason.TEXT))
        await self._s2s.add_user_text(text)
        await self._request()

    async def _user_speech(self, ctx: ProcessorContext, *, ours: bool) -> None:
        """A user turn starts; with our barge-in, the model's playing audio is cut."""
        now = self._clock.now()
        self._stats.turns += 1
        playing = self._playing()
        if self._engine is not None:
            self._engine.confirmations.note_user_speech_started()
        self._work.user_utterance(now)
        self._events.emit(TurnStarted(epoch=self._stats.turns, at=now, barge_in=playing))
        if ours and playing:
            await self._s2s.cancel_response()
            await self._cut(ctx)

    async def _request(self) -> None:
        self._responding = True
        await self._s2s.request_response()

    def _playing(self) -> bool:
        """Audio of the current playout epoch was sent and not all of it released."""
        if self._utterance is None:
            return False
        heard = self._book.heard(self._utterance)
        return heard is not None and not heard[1].fully_played

    # --- model side ------------------------------------------------------------------------

    async def _read(self, ctx: ProcessorContext) -> None:
        async for event in self._s2s:
            await self._on(event, ctx)

    async def _on(self, event: S2sEvent, ctx: ProcessorContext) -> None:
        now, turn = self._clock.now(), self._stats.turns
        if isinstance(event, S2sAudio | S2sToolCall) or (isinstance(event, S2sTranscript)
                                                          and event.speaker is Speaker.MODEL):
            self._responding = True  # also a response the vendor started itself (its VAD heard a turn)
        elif isinstance(event, S2sResponseDone | S2sInteractionEnded):
            self._responding = False
        if isinstance(event, S2sAudio):
            await self._audio(event, ctx)
        elif isinstance(event, S2sTranscript):
            self._transcript(event, now)
        elif isinstance(event, S2sSpeechStarted):
            if self._vad is None:
                await self._user_speech(ctx, ours=False)
        elif isinstance(event, S2sSpeechStopped):
            if self._engine is not None:
                self._engine.confirmations.note_user_turn()
            self._events.emit(TurnEnded(epoch=turn, at=now, reason=TurnEndReason.MODEL))
        elif isinstance(event, S2sToolCall):
            self._pending.append(event)
            self._delivery.call_started(event.call_id, now)
            self._work.tool_call_started(event.call_id, now)
            self._events.emit(ToolCallStarted(epoch=turn, at=now, call_id=event.call_id, name=event.name,
                                              arguments=_json(event.arguments)))
        elif isinstance(event, S2sToolCallsCancelled):
            self._forget(event.call_ids, now)
        elif isinstance(event, S2sInterrupted):
            if self._config.barge_in is BargeIn.MODEL:
                await self._cut(ctx)
        elif isinstance(event, S2sResponseDone):
            await self._response_done(event, now)
        elif isinstance(event, S2sInteractionEnded):
            await self._interaction_ended(now)
        elif isinstance(event, S2sError):
            if event.fatal:
                raise event.error
            self._events.failed("s2s", event.error, epoch=turn, at=now, fatal=False)

    def _utterance_for(self, item: str | None) -> int:
        """The book's utterance of the vendor's item (one per item; a new one after a cut)."""
        if self._utterance is None or (item is not None and item != self._item):
            self._round += 1
            self._item = item
            self._utterance = self._book.open_utterance(self._epoch, self._round)
        return self._utterance

    async def _audio(self, event: S2sAudio, ctx: ProcessorContext) -> None:
        self._last_audio = self._clock.now()
        utterance = self._utterance_for(event.item_id)
        pcm = event.pcm if self._out is None else self._out.process(event.pcm)
        if pcm:
            await ctx.push(OutputAudioFrame(epoch=self._epoch, pcm=pcm, sample_rate=self._out_rate,
                                            utterance=utterance))

    def _transcript(self, event: S2sTranscript, now: float) -> None:
        turn = self._stats.turns
        if event.speaker is Speaker.CALLER:
            self._events.emit(UserTranscript(epoch=turn, at=now, text=event.text, final=event.final))
            return
        # OpenAI's final repeats the whole item's text; Gemini's pieces are never final.
        text = event.text if not (event.final and self._reply) else ""
        if not text:
            return
        self._reply.append(text)
        self._book.push_sent(self._utterance_for(event.item_id), text)
        self._delivery.agent_said(text, now)
        self._events.emit(BotText(epoch=turn, at=now, round=self._round, text=text))

    def _forget(self, call_ids: Sequence[str], now: float) -> None:
        for call_id in call_ids:
            self._delivery.call_cancelled(call_id, now)
            self._work.tool_call_finished(call_id, now)
        self._pending = [c for c in self._pending if c.call_id not in call_ids]

    async def _response_done(self, event: S2sResponseDone, now: float) -> None:
        self._work.agent_reply("".join(self._reply), now, interrupted=event.interrupted)
        self._reply = []
        self._events.emit(BotDone(epoch=self._stats.turns, at=now))
        self._book.response_done(self._epoch)
        calls, self._pending = self._pending, []
        if not calls:
            return
        if event.interrupted or self._engine is None:
            if self._engine is None:
                log.warning("call %s: the model called tools but the call has none", self._events.call_id)
            self._forget([c.call_id for c in calls], now)
            return
        self._token = token = CancelToken()
        self._executing += 1
        self._scope.spawn(self._execute(calls, self._stats.turns, token), name="s2s-tools")

    async def _execute(self, calls: list[S2sToolCall], turn: int, token: CancelToken) -> None:
        engine = self._engine
        assert engine is not None  # checked by the caller
        ours = []
        for c in calls:
            ours.append(ToolCall(id=f"t{turn}.{self._seq}", name=c.name, arguments=c.arguments, provider_id=c.call_id))
            self._seq += 1
        tool_round = _Round(ours, turn, token, self._clock.now())
        budget = self._config.think_budget
        watchers = []
        if budget is not None:
            watchers.append(self._scope.spawn(self._think_budget(tool_round, budget), name="s2s-think-budget"))
        plan = self._fillers.plan([spec for c in ours if (spec := engine.registry.spec(c.name)) is not None])
        if plan is not None:
            watchers.append(self._scope.spawn(self._filler(tool_round, plan), name="s2s-filler"))
        try:
            execution = await engine.execute(ours, turn, token)
            tool_round.done = True
            if tool_round.answered:
                await asyncio.gather(*watchers)  # a "still running" answer being sent finishes first
            now = self._clock.now()
            for call in ours:
                self._work.tool_call_finished(call.provider_id or call.id, now)
            if token.is_cancelled:
                execution.discard()  # a cut: these results never reach the model (late ones come as notes)
                for call in ours:
                    self._delivery.call_cancelled(call.provider_id or call.id, now)
                return
            await self._answer(ours, execution, turn, now, late=tool_round.answered)
        finally:
            for watcher in watchers:
                watcher.cancel()
            self._executing -= 1

    async def _think_budget(self, tool_round: _Round, budget: ThinkBudget) -> None:
        """Past the budget the calls are answered "still running" (their results come later, once)."""
        deadline = budget.deadline(tool_round.started)
        await self._clock.sleep_until(deadline)
        if tool_round.done or tool_round.token.is_cancelled:
            return
        tool_round.answered = True  # from here on this task is awaited, never cancelled
        if self._token is tool_round.token:
            self._token = None  # the caller was promised the answer: a barge-in no longer cancels the work
        # The loop's timer may wake a float rounding before the deadline: decide at the deadline at the earliest.
        now, results = max(self._clock.now(), deadline), []
        for call in tool_round.calls:
            vendor_id = call.provider_id or call.id
            outcome = budget.decide(vendor_id, call.name, tool_round.started, now, None)
            assert outcome is not None  # past the deadline with no result: "still running"
            results.append(S2sToolResult(call_id=vendor_id, name=call.name, content=outcome.content))
        log.info("call %s: %d tool call(s) still running after the think budget (%g s)", self._events.call_id,
                 len(results), budget.seconds)
        self._stats.still_running += 1
        await self._s2s.send_tool_results(results)
        await self._request()

    async def _filler(self, tool_round: _Round, plan: FillerPlan) -> None:
        """While the round runs and the model has been silent for the filler delay, ask it for a holding line."""
        quiet = tool_round.started
        while True:
            now = self._clock.now()
            if self._playing():  # the model speaks: the silence starts when its audio ends
                quiet = now
                await self._clock.sleep(_QUIET_POLL)
                continue
            quiet = max(quiet, self._last_audio)
            if now >= quiet + plan.delay:
                break
            await self._clock.sleep_until(quiet + plan.delay)
        if tool_round.answered or tool_round.token.is_cancelled:
            return
        choice = self._fillers.choose(plan.tool)
        if choice is None:
            return
        self._stats.fillers += 1
        await self._s2s.add_note(f"{plan.tool} is still running. Say only this short holding line to the caller "
                                 f"now, in the caller's language, and nothing else: {choice.text}")
        await self._request()

    async def _answer(self, calls: list[ToolCall], execution: Execution, turn: int, now: float, *,
                      late: bool) -> None:
        results = []
        for call, msg, outcome, delivered in zip(calls, execution.results, execution.outcomes, execution.delivered,
                                                 strict=True):
            vendor_id = call.provider_id or call.id
            verdict = self._delivery.result(vendor_id, delivered, now)
            content = verdict.apply(msg.content)
            results.append(S2sToolResult(call_id=vendor_id, name=call.name, content=content, is_error=msg.is_error))
            self._events.emit(ToolCallSettled(epoch=turn, at=now, call_id=vendor_id, name=call.name,
                                              outcome=outcome, content=content, is_error=msg.is_error))
        if late:  # the calls were answered "still running": their results go in as late answers, once
            for result in results:
                await self._s2s.add_note(ThinkBudget.late_answer(result.call_id, result.name, result.content).content)
            self._stats.late_answers += len(results)
        else:
            await self._s2s.send_tool_results(results)
        for note in execution.late_notes:
            await self._s2s.add_note(note.text)
            self._stats.late_notes += 1
        await self._request()
        execution.mark_delivered()

    async def _interaction_ended(self, now: float) -> None:
        # All of the model's audio of the exchange was sent (Gemini ends a reply with turnComplete alone, no
        # response-done): once released, it is fully played, so a later typed turn or speech start cuts nothing.
        self._book.response_done(self._epoch)
        decision = self._work.interaction_ended(now)
        if decision.verdict is WorkClaimVerdict.WITHOUT_TOOL and decision.note is not None:
            self._stats.work_claims += 1
            log.warning("call %s: %s (turn %d; a turn requested: %s)", self._events.call_id, decision.log_tag,
                        self._stats.turns, decision.request_turn)
            await self._s2s.add_note(decision.note)
            if decision.request_turn:
                self._stats.work_turns += 1
                await self._request()
        if self._engine is not None and self._executing == 0:
            notes = self._engine.take_late_notes()
            for note in notes:
                await self._s2s.add_note(note.text)
            self._stats.late_notes += len(notes)
            if notes:
                await self._request()

    async def _cut(self, ctx: ProcessorContext) -> None:
        """Stop the model's audio, cancel its running tools and tell it what was heard."""
        utterance, item = self._utterance, self._item
        if utterance is None and (self._token is None or self._token.is_cancelled):
            return  # nothing plays and nothing runs: an interruption of silence cuts nothing
        heard = None
        if utterance is not None:
            cut_epoch = self._book.epoch_of(utterance)
            if cut_epoch is not None:  # the clear below flushes what a carrier still holds: never heard
                self._book.unplayed(cut_epoch, self._commands.unplayed())
            heard = self._book.heard(utterance)
        self._epoch += 1
        self._stats.cuts += 1
        self._utterance = self._item = None
        await ctx.push(InterruptFrame(new_epoch=self._epoch))
        with contextlib.suppress(ChannelClosed):  # a transport that has ended plays nothing any more
            self._commands.clear(self._epoch)
        if self._token is not None:
            self._token.cancel("barge-in")
        if self._engine is not None:
            self._engine.confirmations.clear()
        if heard is not None:
            seconds, truncation = heard
            self._events.emit(BotHeard(epoch=self._stats.turns, at=self._clock.now(), round=self._round,
                                       text=truncation.text, played=seconds))
            await self._s2s.truncate(item, round(seconds * 1000))
            self._stats.truncations += 1


_QUIET_POLL = 0.05  # s: how often the filler watcher looks whether the model's audio still plays


@dataclasses.dataclass(slots=True)
class _Round:
    """One response's tool calls while they run."""

    calls: list[ToolCall]
    turn: int
    token: CancelToken
    started: float
    done: bool = False  # the execution finished
    answered: bool = False  # answered "still running" past the think budget


def _json(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)
