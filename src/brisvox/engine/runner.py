"""Stage 3: the LLM runner.  It owns the conversation context.

At each user turn's end it first settles the earlier turns (the context is cut to what
the caller heard, from the PlayoutBook), then adds the caller's words and starts one
*round task* for the new epoch.  The round task streams the model: text is spoken as it
arrives, the assistant message is pushed once the response is done, and
``BotResponseDone`` tells the later stages that nothing more will come for the epoch.

Memory and flows: each request carries the window of the context that
:class:`~brisvox.engine.memory.CallMemory` builds (the newest turns and a summary of the
rest, refreshed in the background when a turn's answer is done).  With a flow
(:class:`~brisvox.engine.flowrun.FlowRun`) the node prompt is message 0, a request offers
the node's tools, each round's calls are screened and applied through the flow, a decided
node is entered at once (its ``Say`` lines spoken first), and a node's ``EndCall`` hangs
up once its first response has played.  So does the ``end_call`` tool (through the call's
:class:`~brisvox.engine.phone.PhoneLine`): its turn's reply is released, then ``run_call``
waits for the mark echo; a barge-in calls it off.

Every request tells the model the call's date (:func:`date_note`, from the injected clock's
wall time) in a system message right after the system prompt (:func:`with_date`); it is not
kept in the context.

A model that sends no first token within ``first_token`` seconds, goes silent for
``idle`` seconds, or fails, is answered with a fallback line that restates what the caller
was heard to say (``LlmConfig.fallback_for``; in the context too, as what the bot said);
the failure is logged and emitted as an ``EngineFailure`` of stage ``llm``.  A barge-in (a newer interrupt) cancels the round task and joins
it before anything touches the context.

Fillers: a tool round races the filler timer of its :class:`FillerPolicy` (from
``LlmConfig.filler``; by default one fixed 1.2 s delay).  When the tools are still
running at the delay, the chosen phrase is spoken as a round of its own (its own
``LlmResponseStarted`` and ordinal in the PlayoutBook) while the tools keep running.  It
cannot enter the context while a call is open, so it is kept aside and placed as an
assistant message right before the turn's next assistant message (the request for that
message was built without it), or when the turn is settled (after the open calls were
closed, before the next user message); from then on it is cut to what was heard like
any round.  A model round gets a filler the same way when its first token has not come
``FillerPolicy.model_delay`` seconds after the request (``FillerStarted`` with an empty
``tool``), counted from the turn's end while the caller has heard nothing of the turn (a
round that only wrote a call, then a quick tool: the next round fills at once when that
silence already passed the delay, ``TurnRounds.quiet_since``): the round is opened
(``LlmResponseStarted``) only at its first text (a round that only writes a call, which a
local model does token by token for seconds, opens at its end), so the filler, once
started, is spoken whole as the round before it.  With ``FillerPolicy.at_call`` a round whose
first event names a call fills at once (:meth:`LlmRunner._acknowledge`).  A turn speaks at
most one filler (``TurnRounds.filled``).

Prefill: with speculation off, each ``UserTurnTentative`` sends the settled context plus the
words so far to a model with a prompt cache (``PrefixWarm.prefill``, which runs only when the
model is idle), so the turn's request pays only for what changed.  A turn that ends on the agent's
own line (a tool's ``confirm_question``, ``result_line`` or ``declined_line``: no model round read
its results) is prefilled as the line starts to play (``LlmRunner._line_ends_turn``).

Greeting: with ``LlmConfig.greeting`` set, the ``StartFrame`` starts a round task that
speaks it as epoch 0, round 0 (the turn driver gave epoch 0 to the bot).  It is in the
context as the assistant's first message and in the PlayoutBook like any reply, so a
caller who cuts it short leaves only the part they heard.

Bot lines (a ``BotLineFrame``: an agent's ``say``, in the epoch of the bot turn the turn
driver started for it): the runner settles the context as at a turn's end and speaks the
line as a round task through the canned-line path of the greeting: in the context as said,
in the PlayoutBook, cut to what was heard on a barge-in.  A ``farewell`` line requests the
end of the call through the phone line (the ``end_call`` rule: the call ends once it has
played; a barge-in calls the end off, and the agent is told ``called_off``).  A line a newer
turn overtook before it entered the context (it arrives stale: bot lines survive the epoch
layers for this; or its round task was cancelled before it ran) was never said: the agent is
told ``overtaken`` (``call_ended`` at the call's end).  The tools an
agent narrowed with ``tools.set`` (``ToolEngine.offer``) are the only ones each request lists.

Lost words: when the speech-to-text refused to transcribe because its model's pool is
full (a ``ModelBusyFrame`` from the listen stage), the next turn that ends with no words
is answered with the fallback line instead of silence.  Busy frames stop here (the turn
driver, which they passed, emitted each as a ``ModelBusy`` event).

Speculation (opt-in, :mod:`brisvox.engine.speculate`): at a ``UserTurnTentative`` the
runner may start the model on the caller's words so far, holding its text and its
side-effect calls.  The turn's first round then takes that answer when the turn ends
with the same words over the same context (its text is spoken, its held calls run once
through ``ToolEngine.commit``, its read-only results are reused); otherwise the run is
dropped and the round asks the model afresh.  A barge-in or the end of the call drops it.
The run starts on a settled copy of the context (calls a barge-in left open are closed
there), since the live context is settled only when the turn ends.

Text-only replies: a turn whose ``UserTextFrame`` asks for ``ReplyMode.TEXT`` (an RTVI
``send-text`` with ``audio_response: false``) is answered like any turn, but every round of it
opens with ``LlmResponseStarted(reply=TEXT)``: the speak stage shows its text (``BotText``) and
never synthesizes it, no filler is spoken for it, and its messages are not recorded in the
PlayoutBook, so no cut ever shortens them: the context keeps the whole reply the caller got.

Notes (a ``ContextNoteFrame``: an app event from the caller's screen) open no turn and are
never spoken: each goes into the context as a system message at once, or, while a tool call
is open, right after the round's results (so a tool round's next request reads it) or when
the next turn starts.

The end of the call: :meth:`LlmRunner.hang_up` (called by ``run_call`` as soon as the
transport reports it) stops every later side effect from starting; :meth:`LlmRunner.finish`
(called after the pipeline ended, cleanly or not) completes the call's record: open calls
closed, replies cut to what was heard, the side effects still running given
``Timeouts.stop`` to finish and their late notes appended.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import sys
from collections.abc import Callable

from brisvox.agent.assemble import Assembled, ResponseAssembler
from brisvox.agent.context import AssistantMessage, Context, SystemMessage
from brisvox.agent.flows import EndCall
from brisvox.agent.played import TruncationOutcome, apply_truncation
from brisvox.agent.tools import (
    CancelToken,
    Execution,
    FillerPolicy,
    Speculation,
    ToolEngine,
    ToolSpec,
)
from brisvox.core.clock import Clock
from brisvox.core.errors import BrisvoxError
from brisvox.core.frames import (
    BotLineFrame,
    BotResponseDone,
    BusyStage,
    ContextNoteFrame,
    Direction,
    Frame,
    InterruptFrame,
    LlmResponseEnded,
    LlmResponseStarted,
    LlmTextFrame,
    ModelBusyFrame,
    ReplyMode,
    StartFrame,
    StopFrame,
    UserTextFrame,
    UserTurnEnded,
    UserTurnTentative,
)
from brisvox.core.processor import Processor, ProcessorContext
from brisvox.core.tasks import TaskScope
from brisvox.core.timeline import TimelineRecorder, TurnEvent
from brisvox.engine.agent_input import AgentInput, Refusal
from brisvox.engine.config import LlmConfig, SpeculationMode, Timeouts
from brisvox.engine.events import (
    BotHeard,
    CallEvents,
    FillerStarted,
    FlowEntered,
    LlmRound,
    UserTurn,
)
from brisvox.engine.flowrun import FlowRun
from brisvox.engine.memory import CallMemory
from brisvox.engine.phone import PhoneLine
from brisvox.engine.playout import PlayoutBook
from brisvox.engine.rounds import (
    FillerState,
    Opening,
    Streamed,
    ToolCallEvents,
    TurnRounds,
    WaitingFiller,
    stream_answer,
    with_date,
)
from brisvox.engine.speculate import HeldAnswer, SpeculativeStart, settled_copy
from brisvox.providers.llm import (
    LlmProvider,
    LlmRequest,
    PrefixWarm,
    ToolChoice,
)

__all__ = ["LlmRunner", "RunnerStats"]

log = logging.getLogger(__name__)


class RunnerStats:
    __slots__ = (
        "confirmations_cleared",
        "cut_messages",
        "fallbacks",
        "filler_clips",
        "fillers",
        "fillers_in_context",
        "greetings",
        "interrupted_tool_calls",
        "late_notes",
        "lines",
        "notes",
        "prefills",
        "rounds",
        "speculations",
        "speculations_committed",
        "turns",
    )

    def __init__(self) -> None:
        self.fillers = 0
        self.filler_clips = 0
        self.fillers_in_context = 0
        self.greetings = 0  # greetings spoken to the end of their text (not cut by a barge-in)
        self.confirmations_cleared = 0
        self.interrupted_tool_calls = 0
        self.late_notes = 0
        self.lines = 0  # bot lines an agent asked for (``say``), started
        self.notes = 0  # notes that opened no turn (app events from the caller's screen) put in the context
        self.turns = 0
        self.rounds = 0
        self.fallbacks = 0
        self.cut_messages = 0
        self.speculations = 0  # speculative starts (committed or dropped)
        self.speculations_committed = 0
        self.prefills = 0  # the caller's words sent to a prompt-caching model at a pause (it may skip them)


class LlmRunner(Processor):
    def __init__(
        self,
        llm: LlmProvider,
        context: Context,
        book: PlayoutBook,
        config: LlmConfig,
        timeouts: Timeouts,
        scope: TaskScope,
        timeline: TimelineRecorder | None = None,
        tools: ToolEngine | None = None,
        memory: CallMemory | None = None,
        filler: FillerPolicy | None = None,
        speculation: SpeculationMode = SpeculationMode.OFF,
        flow: FlowRun | None = None,
        end_call: Callable[[], None] | None = None,
        events: CallEvents | None = None,
        line: PhoneLine | None = None,
        agent: AgentInput | None = None,
    ) -> None:
        self.events = events or CallEvents("")
        self.agent = agent  # told when the caller called an agent's farewell off
        self._farewell = False  # the phone line's pending end is an agent's farewell
        self._unsaid: BotLineFrame | None = None  # the agent's line of the round task, until it is in the context
        self.ending_farewell = False  # the end being carried out (end_call) is an agent's farewell
        self._calls = ToolCallEvents(self.events)  # the tool calls' started and settled events
        self._turn_epoch = 0  # the epoch of the last turn answered
        self.speculation = speculation
        self._speculative: SpeculativeStart | None = None
        self._prefill: asyncio.Task[bool] | None = None
        self.filler = filler if filler is not None else FillerPolicy.from_config(config.filler)
        self._pending_filler: WaitingFiller | None = None
        self.timeline = timeline or TimelineRecorder()
        self.tools = tools
        self.memory = memory
        self.flow = flow
        self._end_call = end_call
        self.line = line  # the call's phone line: an end_call's request is taken here
        self._end_armed = False  # a node with an EndCall post action was entered
        self._end_after: int | None = None  # the epoch whose played-out response ends the call
        self.llm = llm
        self.context = context
        self.book = book
        self.config = config
        self.timeouts = timeouts
        self._scope = scope
        self._round_task: asyncio.Task[None] | None = None
        self._user_text: dict[int, list[str]] = {}
        self._reply: dict[int, ReplyMode] = {}  # how each epoch's words ask to be answered
        self._heard = ""  # the caller's words of the turn being answered (the heard fallback restates them)
        self._words_lost = False  # the STT refused the caller's words since the last turn (see the module docs)
        self._notes: list[str] = []  # ContextNoteFrames waiting for a place in the context (see _append_notes)
        self.stats = RunnerStats()
        if flow is not None:
            flow.start(context)  # the node prompt is message 0; the flow's role holds the rest
        elif config.system_prompt and not len(context):
            context.push_system(config.system_prompt)

    @property
    def name(self) -> str:
        return "llm-runner"

    def response_played(self, epoch: int) -> None:
        """The epoch's response has played out (TransportOut, from the PlayoutBook): a node's
        EndCall waiting for it, or the ``end_call`` tool called in that turn (the phone line's
        request), ends the call now (through ``end_call``: once the farewell's mark echoes).
        Both in the same turn end it once."""
        end = False
        if self._end_armed and epoch == self._end_after:
            self._end_armed = False
            log.info("the flow's node ends the call: its response has played")
            end = True
        if self.line is not None and self.line.take_end(epoch):
            self.ending_farewell, self._farewell = self._farewell, False
            log.info("end_call: the turn's reply has been released; the call ends once it has played")
            end = True
        if end and self._end_call is not None:
            self._end_call()

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if isinstance(frame, ModelBusyFrame):
            self._words_lost = self._words_lost or frame.stage in (BusyStage.STT, BusyStage.VAD)
            return
        if isinstance(frame, UserTextFrame):
            if frame.text:
                self._user_text.setdefault(frame.epoch, []).append(frame.text)
                asked = self._reply.get(frame.epoch)
                self._reply[frame.epoch] = frame.reply if asked is None else asked.joined(frame.reply)
            return
        if isinstance(frame, ContextNoteFrame):  # no turn, nothing spoken: the next request reads it
            self._notes.append(frame.text)
            self._append_notes()
            return
        if isinstance(frame, UserTurnEnded):
            await ctx.push(frame, direction)
            await self._start_turn(frame.epoch, ctx)
            return
        if isinstance(frame, BotLineFrame):
            if frame.epoch < ctx.epoch:  # a newer turn overtook it between the driver and here
                self._line_unsaid(frame, Refusal.OVERTAKEN)
            else:
                await self._start_line(frame, ctx)
            return
        if isinstance(frame, UserTurnTentative):
            await self._maybe_speculate(frame, ctx)
            await ctx.push(frame, direction)
            return
        if isinstance(frame, StartFrame) and self.config.greeting is not None:
            await ctx.push(frame, direction)
            self._round_task = self._scope.spawn(self._greet(self.config.greeting, ctx), name="greeting")
            return
        if isinstance(frame, InterruptFrame | StopFrame):
            await self._drop_speculation()
        if isinstance(frame, InterruptFrame):
            if self.line is not None and self.line.drop_end("the caller barged in") and self._farewell:
                self._farewell = False  # the end of a discarded reply never happens
                if self.agent is not None:
                    self.agent.refuse("end", Refusal.CALLED_OFF, "the caller spoke over the farewell; the call goes on")
            await self._join_round()
            if self.tools is not None:
                # The caller may not have heard what they would confirm.
                self.stats.confirmations_cleared += self.tools.confirmations.clear()
        elif isinstance(frame, StopFrame):
            # The call is over (the caller hung up, the engine ended it, the server's drain ran
            # out): the round is cancelled at once, not waited for; a local model's round would
            # hold the stop (and its llama.cpp slot) for seconds to generate for nobody, past
            # Timeouts.stop.  Cancelling cuts its reply to what was heard, as a barge-in does.
            self.hang_up()
            await self._join_round(unsaid=Refusal.CALL_ENDED)
            self._settle(before_epoch=ctx.epoch + 1, at=ctx.clock.now())
            self._append_late_notes(ctx.clock.now())  # the record of the call ends with every known result
        await ctx.push(frame, direction)

    def hang_up(self) -> None:
        """The caller is gone: no side effect starts from now on, from any round or speculation.

        ``run_call`` calls it as soon as the transport reports the end of the call (before the
        pipeline's stop travels down to this stage); the ``StopFrame`` calls it again.
        """
        if self.tools is not None:
            self.tools.hang_up()

    async def finish(self, clock: Clock) -> None:
        """Completes the call's record after the pipeline ended, however it ended.

        A stop that went through the stages already settled the context; a pipeline that
        failed (a stage crashed, the transport closed under it) was cancelled before the
        ``StopFrame`` reached this stage.  Either way: the round still running is
        cancelled, calls it left open are closed, replies are cut to what was heard, and
        the side effects still running get up to ``Timeouts.stop`` to finish, so that every
        side effect that finished is in the context (its slot or a late note).
        """
        self.hang_up()
        await self._drop_speculation()
        await self._join_round(unsaid=Refusal.CALL_ENDED)
        self._settle(before_epoch=sys.maxsize, at=clock.now())
        if self.tools is not None:
            still = await self.tools.wait_side_effects(self.timeouts.stop)
            if still:
                log.warning("%d side-effect call(s) still running at the end of the call; outcome unknown", still)
        self._append_late_notes(clock.now())

    async def _join_round(self, cancel: bool = True, unsaid: Refusal = Refusal.OVERTAKEN) -> None:
        """Cancel (unless ``cancel`` is False) and join the round task; an agent's line it had not yet
        put into the context is refused ``unsaid`` (a newer turn by default, or the call's end)."""
        task, self._round_task = self._round_task, None
        if task is None:
            return
        if cancel:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        line, self._unsaid = self._unsaid, None
        if line is not None and not line.farewell:  # a farewell's fate is its end's (called off, or the call ended)
            self._line_unsaid(line, unsaid)

    def _line_unsaid(self, line: BotLineFrame, why: Refusal) -> None:
        """An agent's line that was never said: the agent is told (``overtaken``: a newer turn came
        first; ``call_ended``).  A farewell overtaken on its way here calls the end off: the end was
        never requested, the call goes on."""
        if self.agent is None:
            return
        if line.farewell:
            self.agent.refuse("end", Refusal.CALLED_OFF, "the caller spoke before the farewell was said; "
                              "the call goes on")
        elif why is Refusal.OVERTAKEN:
            self.agent.refuse("say", why, "a newer turn (a barge-in, or an interrupting say) came before "
                              "the line was said")
        else:
            self.agent.refuse("say", why, "the call ended before the line was said")

    def settle_all(self, at: float) -> None:
        """The end of a call whose pipeline is gone: every turn cut to what was heard, every
        known result in the context (no round task may run any more)."""
        self._settle(before_epoch=1 << 62, at=at)
        self._append_late_notes(at)

    def _interrupt_open_calls(self, at: float) -> int:
        """Close every open call with an ``interrupted`` result; emits one settled event each."""
        return self._calls.interrupted(self.context, self._turn_epoch, at)

    def _settle(self, before_epoch: int, at: float) -> None:
        """Close calls a barge-in left open, then cut older turns to what the caller heard
        (a ``BotHeard`` event for each round that was cut short)."""
        self.stats.interrupted_tool_calls += self._interrupt_open_calls(at)
        self._place_filler()
        for cut in self.book.cuts(before_epoch):
            said = self._text_at(cut.msg_index)
            try:
                outcome = apply_truncation(self.context, cut.msg_index, cut.truncation)
            except BrisvoxError as exc:  # a bookkeeping bug must not end the call
                log.error("could not cut message %d to what was heard: %s", cut.msg_index, exc)
                continue
            self.stats.cut_messages += 1
            text = cut.truncation.text
            # Trimming trailing blanks off a reply heard in full is not a cut worth showing.
            if outcome is not TruncationOutcome.UNCHANGED and text.rstrip() != said.rstrip():
                self.events.emit(BotHeard(epoch=cut.epoch, at=at, round=cut.round, text=text, played=cut.position))

    def _text_at(self, index: int) -> str:
        message = self.context[index] if -len(self.context) <= index < len(self.context) else None
        return message.text if isinstance(message, AssistantMessage) else ""

    async def _start_turn(self, epoch: int, ctx: ProcessorContext) -> None:
        await self._join_round()  # a round still running belongs to an older epoch
        self._settle(before_epoch=epoch, at=ctx.clock.now())
        self._append_late_notes(ctx.clock.now())
        if self._end_armed and (self._end_after is None or self._end_after < epoch):
            self._end_after = epoch  # the node's first response (or the one after a barge-in) is this turn's
        self.stats.turns += 1
        text = " ".join(self._user_text.pop(epoch, []))
        reply = self._reply.pop(epoch, ReplyMode.SPOKEN)
        for stale in [e for e in self._user_text if e < epoch]:
            del self._user_text[stale]
        for stale in [e for e in self._reply if e < epoch]:
            del self._reply[stale]
        lost, self._words_lost = self._words_lost, False
        if not text and lost:
            log.warning("turn %d: the caller's words were refused by a busy speech-to-text; speaking the fallback line",
                        epoch)
            self._round_task = self._scope.spawn(self._answer_lost(epoch, ctx), name="lost-words")
            return
        if not text:
            # Nothing to answer: tell the later stages at once, so the turn machine is not
            # left waiting for bot audio that never comes.
            await ctx.push(BotResponseDone(epoch=epoch))
            return
        head = self._speculative
        self._speculative = None
        if head is not None and not head.fits(epoch, text, self.context.messages):
            await head.drop()
            head = None
        self.context.push_user(text)
        self._heard = text
        self._turn_epoch = epoch
        self.events.emit(UserTurn(epoch=epoch, at=ctx.clock.now(), text=text))
        # A confirmation needs a later user turn; its words ground names; its no may drop a waiting call.
        declined = self.tools.note_user_turn(text) if self.tools is not None else None
        self._round_task = self._scope.spawn(self._respond(TurnRounds(epoch, reply, ctx.clock.now()), ctx, head, declined),
                                             name=f"turn-{epoch}")

    async def _start_line(self, frame: BotLineFrame, ctx: ProcessorContext) -> None:
        """An agent's bot line in its own epoch (see the module docs)."""
        await self._join_round()  # a round still running belongs to an older epoch
        now = ctx.clock.now()
        self._settle(before_epoch=frame.epoch, at=now)
        self._append_late_notes(now)
        self.stats.lines += 1
        self._unsaid = frame
        if frame.farewell and self.line is not None:
            self.line.request_end(frame.epoch)
            self._farewell = True
        self._round_task = self._scope.spawn(self._bot_line(frame.epoch, frame.text, ctx), name=f"line-{frame.epoch}")

    async def _maybe_speculate(self, frame: UserTurnTentative, ctx: ProcessorContext) -> None:
        if self.speculation is SpeculationMode.OFF:
            self._maybe_prefill(frame, ctx)
            return
        if self._round_task is not None and not self._round_task.done():
            return  # the bot is still answering the last turn: nothing to start yet
        current = self._speculative
        if current is not None:
            if current.answers(frame.epoch, frame.text):
                return
            await self._drop_speculation()
        cancel = CancelToken()
        context = settled_copy(self.context)
        base = context.messages
        context.push_user(frame.text)
        task = self._scope.spawn(self._speculate(frame.epoch, context, frame.text, cancel, ctx), name=f"speculation-{frame.epoch}")
        self._speculative = SpeculativeStart(frame.epoch, frame.text, base, task, cancel)
        self.stats.speculations += 1

    def _line_ends_turn(self, epoch: int, ctx: ProcessorContext) -> None:
        """A turn answered by the agent's own line (a tool's question, result or declined line) asked the
        model nothing, so its cache lacks the turn's results and the line: the next turn's request
        would evaluate them (about 140 tokens, 2 s on the demo's 0.5B model, measured as the next
        turn's wait).  They are prefilled now, while the line plays (prefilled once it had played,
        they were still being evaluated when the caller's next request came: docs/DEMO.md)."""
        self._start_prefill(lambda: self._request(ctx.clock.wall().date()), f"prefill-line-{epoch}")

    def _start_prefill(self, request: Callable[[], LlmRequest], name: str) -> None:
        """``request()`` sent to a model with a prompt cache, unless one prefill is still running
        (one at a time: the model does it only when idle)."""
        llm = self.llm
        if not isinstance(llm, PrefixWarm) or (self._prefill is not None and not self._prefill.done()):
            return
        self._prefill = self._scope.spawn(llm.prefill(request()), name=name)
        self.stats.prefills += 1

    def _maybe_prefill(self, frame: UserTurnTentative, ctx: ProcessorContext) -> None:
        """The caller's words so far to a model with a prompt cache (``PrefixWarm``), at their
        pause: evaluated while the turn's end is decided, the turn's request pays only for
        what changed (docs/DEMO.md, "The local LLM's time").  The model does it only when
        idle and gives way to any request."""
        if self._round_task is not None and not self._round_task.done():
            return

        def request() -> LlmRequest:
            context = settled_copy(self.context)
            context.push_user(frame.text)
            return self._request(ctx.clock.wall().date(), context, frame.text)

        self._start_prefill(request, f"prefill-{frame.epoch}")

    async def _drop_speculation(self) -> None:
        run, self._speculative = self._speculative, None
        if run is not None:
            await run.drop()

    async def _speculate(
        self, epoch: int, context: Context, words: str, cancel: CancelToken, ctx: ProcessorContext
    ) -> HeldAnswer | None:
        """The model on ``context`` (a settled copy plus the caller's ``words``): nothing is
        spoken, side effects are held."""
        assembler = ResponseAssembler()
        chunks: list[str] = []
        try:
            await stream_answer(self.llm, self.timeouts, self.timeline, self._request(ctx.clock.wall().date(), context, words),
                                epoch, None, ctx, assembler, chunks, None)
        except BrisvoxError as exc:
            log.info("a speculative start got no usable answer (%s); the turn will ask again", exc)
            assembler.cancel()
            return None
        response = assembler.finish(epoch, context)
        speculation: Speculation | None = None
        if response.calls and self.tools is not None:
            speculation = await self.tools.speculate(response.calls, epoch, cancel)
        return HeldAnswer(chunks, response.assistant_message(), response.calls, speculation)

    def _append_late_notes(self, at: float) -> None:
        """SideEffect results that finished after their turn, before the next user message (then
        the notes waiting)."""
        if self.tools is None or self.context.has_open_tool_calls():
            self._append_notes()
            return
        for note in self.tools.take_late_notes():
            self.context.push(note.message())
            self.stats.late_notes += 1
            self._calls.late_note_settled(note, at)
            if self.flow is not None:
                self.flow.late_result(note.call_id, note.tool, note.content, note.is_error)
        self._append_notes()

    def _append_notes(self) -> None:
        """Notes that open no turn, as system messages: at once, or, while a tool call is open
        (its result must follow it), once the round's results are in or the next turn starts."""
        if not self._notes or self.context.has_open_tool_calls():
            return
        for text in self._notes:
            self.context.push(SystemMessage(text=text))
        self.stats.notes += len(self._notes)
        self._notes.clear()

    def _deliver(self, execution: Execution, at: float) -> None:
        """The round's results (and late notes) into the context; one settled event per result."""
        execution.append_to(self.context)
        self._append_notes()  # the round's next request reads what the screen said meanwhile
        self._calls.settled(execution, at)

    def _place_filler(self) -> None:
        """The spoken filler into the context, once no call is open (see the module doc)."""
        filler = self._pending_filler
        if filler is None or self.context.has_open_tool_calls():
            return
        self._pending_filler = None
        self.context.push_assistant(filler.text)
        self.book.record_round(filler.epoch, filler.round, len(self.context) - 1)
        self.stats.fillers_in_context += 1

    async def _respond(self, turn: TurnRounds, ctx: ProcessorContext, head: SpeculativeStart | None = None,
                       declined: str | None = None) -> None:
        """The turn's round loop: stream, speak, run the calls, until an answer without calls.

        ``head``: a speculative run of this turn whose answer is the first round; ``declined``:
        the caller's no dropped a waiting call whose tool says this itself (its ``declined_line``):
        spoken, and the turn ends with no model round (nothing looked up or booked on a no).
        """
        cancel = CancelToken()
        epoch = turn.epoch
        try:
            if self.flow is not None and self.flow.pending is not None:
                await self._enter_node(turn, ctx)  # decided by a late result since the last turn
            if declined is not None:
                if head is not None:
                    await head.drop()
                await self._speak_line(turn, declined, ctx)
                self._line_ends_turn(epoch, ctx)
                return
            for round_ in range(self.config.max_tool_rounds + 1):
                if round_ > 0 and self.tools is not None and self.tools.hung_up:
                    # The caller is gone: the results are in the record, and a graceful stop
                    # would otherwise wait for more rounds (and tools) nobody hears.
                    return
                if round_ == self.config.max_tool_rounds:
                    log.warning("turn %d used all %d tool rounds; speaking the fallback line", epoch, round_)
                    await self._say(turn, self.config.fallback_line, ctx)
                    return
                held = await head.take() if head is not None else None
                head = None
                if held is not None:
                    calls = await self._commit_round(turn, held, ctx)
                else:
                    calls = await self._round(turn, ctx)
                if not calls:
                    return
                if self.tools is None:
                    log.error(
                        "the model called a tool, but this call offers no tools; speaking the fallback line"
                    )
                    self._interrupt_open_calls(ctx.clock.now())
                    await self._say(turn, self.config.fallback_line, ctx)
                    return
                self._calls.started(epoch, calls, ctx.clock.now(), self.tools.registry)
                if held is not None and held.speculation is not None:
                    execution = await self.tools.commit(held.speculation, cancel)  # reads reused, held calls run
                elif self.flow is not None:
                    if not await self._flow_round(self.flow, self.tools, turn, calls, cancel, ctx):
                        return
                    continue
                else:
                    execution = await self._run_tools(self.tools, turn, calls, cancel, ctx)
                self._deliver(execution, ctx.clock.now())
                if execution.budget_exhausted:
                    await self._say(turn, self.config.fallback_line, ctx)
                    return
                # The tool's own question, or every call's own result line, ends the turn (docs/TOOLS.md).
                if (said := self.tools.confirm_question(execution) or execution.spoken_line()) is not None:
                    await self._speak_line(turn, said, ctx)
                    self._line_ends_turn(epoch, ctx)
                    return
        except asyncio.CancelledError:
            cancel.cancel("barge-in")
            raise
        except Exception as exc:
            # A bug in one turn must not end the call: the caller hears the fallback line.
            self.events.failed("llm-runner", exc, epoch=epoch, at=ctx.clock.now(), fatal=False)
            self._interrupt_open_calls(ctx.clock.now())
            await self._say(turn, self.config.fallback_line, ctx)
        finally:
            if not cancel.is_cancelled:
                await ctx.push(BotResponseDone(epoch=epoch))
                if self.memory is not None:
                    self.memory.after_turn(self.context)  # the summary is refreshed in the background

    async def _flow_round(
        self,
        flow: FlowRun,
        tools: ToolEngine,
        turn: TurnRounds,
        calls: tuple[Assembled, ...],
        cancel: CancelToken,
        ctx: ProcessorContext,
    ) -> bool:
        """A tool round through the flow: screened, run, applied; a decided node entered.

        Returns whether the turn asks the model again.
        """
        screened = flow.screen(calls)
        admitted = tuple(screened.take_admitted())
        execution = await self._run_tools(tools, turn, admitted, cancel, ctx)
        applied = flow.decide(self.context, screened, execution)
        self._calls.settled(execution, ctx.clock.now(), screened)
        if applied.budget_exhausted:  # no transition is decided then
            await self._say(turn, self.config.fallback_line, ctx)
            return False
        if applied.pending is not None:
            await self._enter_node(turn, ctx)
        return applied.respond

    async def _enter_node(self, turn: TurnRounds, ctx: ProcessorContext) -> None:
        """Speaks the pending node's lines, then enters it (a summary may be made meanwhile)."""
        assert self.flow is not None
        for line in self.flow.pending_lines():
            await self._speak_line(turn, line, ctx, keep=False)
        entered = await self.flow.enter(self.context)
        if entered is not None:
            self.events.emit(FlowEntered(epoch=turn.epoch, at=ctx.clock.now(), node=entered.node,
                                         previous=entered.previous,
                                         tools=tuple(spec.name for spec in self.flow.tool_specs())))
        if entered is not None and any(isinstance(a, EndCall) for a in entered.post_actions):
            self._end_armed = True
            self._end_after = turn.epoch if entered.respond_immediately else None
        if entered is not None and entered.context_replaced:
            # Anything keyed by a message index refers to messages that are gone.
            self.book.forget_messages()
            if self.memory is not None:
                self.memory.context_replaced()

    async def _run_tools(
        self,
        tools: ToolEngine,
        turn: TurnRounds,
        calls: tuple[Assembled, ...],
        cancel: CancelToken,
        ctx: ProcessorContext,
    ) -> Execution:
        """``ToolEngine.execute`` raced against the filler timer (the filler is its own round)."""
        specs = [
            spec for c in calls if c.name is not None and (spec := tools.registry.spec(c.name)) is not None
        ]
        plan = self.filler.plan(specs) if self.filler.enabled and turn.reply is ReplyMode.SPOKEN else None
        if plan is None:
            return await tools.execute(calls, turn.epoch, cancel)
        state = FillerState()
        filler = self._scope.spawn(self._filler_after(plan.delay, plan.tool, turn, state, ctx), name="filler")
        try:
            execution = await tools.execute(calls, turn.epoch, cancel)
        except BaseException:
            filler.cancel()
            raise
        if not state.speaking:
            filler.cancel()  # the tools answered before the delay: no filler
        try:
            # A filler being spoken finishes its round before the next request starts.
            await asyncio.wait((filler,))
        except asyncio.CancelledError:
            filler.cancel()
            execution.discard()  # a barge-in: these results never reach the model
            raise
        return execution

    async def _filler_after(
        self, delay: float, tool: str, turn: TurnRounds, state: FillerState, ctx: ProcessorContext
    ) -> None:
        """``tool`` empty: a model round's first token is late (see the module docs)."""
        await ctx.clock.sleep(delay)
        if turn.filled:  # one filler a turn: a second slow round of the turn stays quiet
            return
        choice = self.filler.choose(tool)
        if choice is None:
            return
        state.speaking = True
        turn.filled = True
        turn.quiet_since = None
        round_ = turn.take()
        self.stats.fillers += 1
        if choice.clip is not None:
            self.stats.filler_clips += 1
        self.timeline.mark(turn.epoch, TurnEvent.FILLER_STARTED, ctx.clock.now())
        self.events.emit(FillerStarted(epoch=turn.epoch, at=ctx.clock.now(), round=round_, tool=tool))
        # Kept aside before it is spoken: a barge-in mid-phrase still cuts it to what was heard.
        self._pending_filler = WaitingFiller(turn.epoch, round_, choice.text)
        try:
            await ctx.push(LlmResponseStarted(epoch=turn.epoch, round=round_, clip=choice.clip))
            await ctx.push(LlmTextFrame(epoch=turn.epoch, text=choice.text, round=round_))
            await ctx.push(LlmResponseEnded(epoch=turn.epoch, round=round_))
        except BrisvoxError as exc:  # the pipeline is closing; the call ends anyway
            log.debug("filler not spoken: %s", exc)

    async def _greet(self, text: str, ctx: ProcessorContext) -> None:
        """The call's first words, epoch 0 (see the module docs)."""
        await self._bot_line(0, text, ctx)
        self.stats.greetings += 1  # not reached when a barge-in cancels it

    async def _bot_line(self, epoch: int, text: str, ctx: ProcessorContext) -> None:
        """A line the bot says of its own accord (the greeting, an agent's ``say``) as ``epoch``'s response."""
        await self._speak_line(TurnRounds(epoch), text, ctx)
        await ctx.push(BotResponseDone(epoch=epoch))  # not reached when a barge-in cancels it

    async def _answer_lost(self, epoch: int, ctx: ProcessorContext) -> None:
        await self._say(TurnRounds(epoch), self.config.fallback_line, ctx)
        await ctx.push(BotResponseDone(epoch=epoch))  # not reached when a barge-in cancels it

    async def _say(self, turn: TurnRounds, text: str, ctx: ProcessorContext) -> None:
        """A canned line: spoken as its own round and kept in the context as said."""
        self.stats.fallbacks += 1
        await self._speak_line(turn, text, ctx)

    async def _speak_line(self, turn: TurnRounds, text: str, ctx: ProcessorContext, keep: bool = True) -> None:
        """``keep`` False: spoken only (a flow's Say line), not added to the context."""
        epoch, round_ = turn.epoch, turn.take()
        await ctx.push(LlmResponseStarted(epoch=epoch, round=round_, reply=turn.reply))
        await ctx.push(LlmTextFrame(epoch=epoch, text=text, round=round_))
        if keep:
            self._keep_round(turn, round_, AssistantMessage(text=text))
            self._unsaid = None  # an agent's line is in the context: a cut from now on is told as bot_heard
        await ctx.push(LlmResponseEnded(epoch=epoch, round=round_))

    async def _commit_round(self, turn: TurnRounds, held: HeldAnswer, ctx: ProcessorContext) -> tuple[Assembled, ...]:
        """A speculative answer taken as the turn's first round: spoken now, its message pushed."""
        epoch, round_ = turn.epoch, turn.take()
        self.stats.rounds += 1
        self.stats.speculations_committed += 1
        now = ctx.clock.now()
        timed = self.timeline.llm_request(epoch, now)  # the answer is there at once
        self.timeline.llm_first_token(epoch, timed, now)
        self.timeline.llm_done(epoch, timed, now)
        await ctx.push(LlmResponseStarted(epoch=epoch, round=round_, reply=turn.reply))
        for chunk in held.chunks:
            await ctx.push(LlmTextFrame(epoch=epoch, text=chunk, round=round_))
        self._keep_round(turn, round_, held.message)
        await ctx.push(LlmResponseEnded(epoch=epoch, round=round_))
        return held.calls

    def _keep_round(self, turn: TurnRounds, round_: int, message: AssistantMessage | None) -> None:
        """A round's message into the context, after any filler waiting for its place.  A spoken
        round's is recorded in the PlayoutBook (cut to what was heard at the next turn); a text
        round was delivered whole, so nothing will cut it."""
        self._place_filler()
        if message is not None:
            self.context.push(message)
            if turn.reply is ReplyMode.SPOKEN:
                self.book.record_round(turn.epoch, round_, len(self.context) - 1)

    def _request(self, today: datetime.date, context: Context | None = None, tentative: str | None = None) -> LlmRequest:
        """``context``/``tentative``: a speculative or prefill request on the caller's words so
        far (a copy of the context with them, and the words)."""
        context = context if context is not None else self.context
        messages = self.memory.request_messages(context) if self.memory is not None else context.messages
        messages = with_date(messages, today)
        tools = self.tools
        node = self.flow.tool_specs() if self.flow is not None else None
        choice = ToolChoice.AUTO
        if tools is None:
            specs: tuple[ToolSpec, ...] = tuple(node) if node is not None else ()
            described = specs
        else:
            # The caller named the slots a lookup needs: the round is that call (docs/TOOLS.md).
            offered, required = tools.heard_offer(tools.offered_specs(node), today, tentative)
            specs = tuple(offered)
            choice = ToolChoice.REQUIRED if required else ToolChoice.AUTO
            described = tuple(tools.listed_specs(node))
        return LlmRequest(
            messages=messages,
            tools=specs,
            tool_choice=choice,
            described=described,
            max_tokens=self.config.max_tokens,
            temperature=self.config.temperature,
        )

    async def _round(self, turn: TurnRounds, ctx: ProcessorContext) -> tuple[Assembled, ...]:
        """One request: its text spoken as it streams, its message pushed before any call runs.

        The round opens (``LlmResponseStarted``) at its first text (a call-only round at its
        end), so a filler that a slow first token or a slowly written call let start is spoken
        whole before it (see the module docs)."""
        self.stats.rounds += 1
        opening = Opening()
        delay = self.filler.model_delay if turn.reply is ReplyMode.SPOKEN else None  # nothing to fill in a text
        if delay is not None and turn.quiet_since is not None:
            # The caller has waited since the turn's end (a round that only wrote a call, a
            # tool): the silence is what the filler bounds, so a later round fills sooner.
            delay = max(0.0, delay - (ctx.clock.now() - turn.quiet_since))
        if delay is not None:
            opening.filler = self._scope.spawn(self._filler_after(delay, "", turn, opening.state, ctx),
                                               name="model-filler")
        try:
            return await self._model_round(turn, opening, ctx)
        finally:
            if opening.filler is not None:  # a barge-in or a bug: the filler never outlives its round
                opening.filler.cancel()

    def _acknowledge(self, turn: TurnRounds, opening: Opening, tool: str, ctx: ProcessorContext) -> None:
        """The round is a call of ``tool`` (its first event named it): its filler now, not at
        the model's delay, as a person says "one moment" when they decide to look.  Only where
        the model filler was waiting (a spoken turn, nothing said yet in this round), and not
        for a tool that opts out of fillers (``filler_after=None``)."""
        waiting = opening.filler
        if not self.filler.at_call or waiting is None or opening.state.speaking or turn.filled or self.tools is None:
            return
        spec = self.tools.registry.spec(tool)
        if spec is None or self.filler.delay_for(spec) is None:
            return
        waiting.cancel()
        opening.filler = self._scope.spawn(self._filler_after(0.0, tool, turn, opening.state, ctx),
                                           name="call-filler")

    async def _open(self, turn: TurnRounds, opening: Opening, ctx: ProcessorContext) -> int:
        """The round's ordinal, its ``LlmResponseStarted`` sent on the first call (after the
        filler's round when one is being spoken, which then finishes first)."""
        if opening.round is not None:
            return opening.round
        task, opening.filler = opening.filler, None
        if task is not None:
            if not opening.state.speaking:
                task.cancel()  # the first token came before the delay: no filler
            await asyncio.wait((task,))
        opening.round = turn.take()
        await ctx.push(LlmResponseStarted(epoch=turn.epoch, round=opening.round, reply=turn.reply))
        return opening.round

    async def _model_round(self, turn: TurnRounds, opening: Opening, ctx: ProcessorContext) -> tuple[Assembled, ...]:
        epoch = turn.epoch

        async def open_round() -> int:
            return await self._open(turn, opening, ctx)

        def decided(tool: str) -> None:
            self._acknowledge(turn, opening, tool, ctx)

        assembler = ResponseAssembler()
        requested = ctx.clock.now()
        timed = self.timeline.llm_request(epoch, requested)
        spoken: list[str] = []
        failed = False
        seen = Streamed()
        try:
            await stream_answer(self.llm, self.timeouts, self.timeline, self._request(ctx.clock.wall().date()), epoch,
                                open_round, ctx, assembler, spoken, timed, seen, decided)
        except BrisvoxError as exc:
            # Logged with its traceback and counted (engine_failures_total{stage="llm"}).
            self.events.failed("llm", exc, epoch=epoch, at=ctx.clock.now(), fatal=False)
            self.stats.fallbacks += 1
            failed = True
            fallback = (" " if spoken else "") + self.config.fallback_for(self._heard)
            await ctx.push(LlmTextFrame(epoch=epoch, text=fallback, round=await open_round()))
            spoken.append(fallback)
        round_ = await open_round()  # a round with no text (a call only) opens too: its message is kept
        if spoken:
            turn.quiet_since = None
        done = ctx.clock.now()
        self.timeline.llm_done(epoch, timed, done)
        usage = seen.usage
        self.events.emit(LlmRound(
            epoch=epoch, at=done, round=round_, model=self.llm.name, requested=requested,
            first_token=seen.first_token, failed=failed,
            input_tokens=None if usage is None else usage.input_tokens,
            output_tokens=None if usage is None else usage.output_tokens,
        ))
        if failed:
            assembler.cancel()
            message: AssistantMessage | None = AssistantMessage(text="".join(spoken))
            calls: tuple[Assembled, ...] = ()
        else:
            response = assembler.finish(epoch, self.context)
            message, calls = response.assistant_message(), response.calls
        self._keep_round(turn, round_, message)  # the filler goes after the request that answered it
        await ctx.push(LlmResponseEnded(epoch=epoch, round=round_))
        return calls
