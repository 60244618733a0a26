"""A model round's parts, for the LLM runner (:mod:`brisvox.engine.runner`).

:func:`stream_answer` streams one request: the model's text is spoken (``LlmTextFrame``)
as it arrives, every event goes to the response assembler, the round opens at the first
token, and a model that sends no first token within ``Timeouts.first_token`` (or goes
silent for ``Timeouts.idle``, or fails) raises :class:`NoAnswer`.  Every request carries
the call's date (:func:`with_date`, a message of its own after the system prompt).
:class:`TurnRounds` numbers a turn's spoken rounds;
:class:`WaitingFiller`, :class:`FillerState` and :class:`Opening` are a filler's life
(see the runner's module docs, "Fillers").
"""

from __future__ import annotations

import asyncio
import datetime
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from brisvox.agent.assemble import Assembled, ResponseAssembler
from brisvox.agent.context import Context, Message, SystemMessage, ToolCall
from brisvox.agent.flows import Screened
from brisvox.agent.tools import Execution, LateNote, Outcome, ToolRegistry
from brisvox.core.clock import deadline
from brisvox.core.errors import BrisvoxError
from brisvox.core.frames import LlmTextFrame, ReplyMode
from brisvox.core.processor import ProcessorContext
from brisvox.core.timeline import TimelineRecorder
from brisvox.engine.config import Timeouts
from brisvox.engine.events import CallEvents, ToolCallSettled, ToolCallStarted
from brisvox.providers.llm import (
    Done,
    LlmError,
    LlmProvider,
    LlmRequest,
    ProviderDataDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)

__all__ = ["FillerState", "NoAnswer", "Opening", "Streamed", "ToolCallEvents", "TurnRounds", "WaitingFiller",
           "date_note", "stream_answer", "with_date"]


@dataclass(slots=True)
class Streamed:
    """What one request's stream showed: when its first token came, the usage it reported."""

    first_token: float | None = None
    usage: Usage | None = None


def date_note(today: datetime.date) -> str:
    """The call's date for the model, and the week ahead spelled out: a small model cannot
    count days ("tomorrow" became today's date, measured), so "on Saturday" is read off."""
    ahead = [today + datetime.timedelta(days=n) for n in range(1, 8)]
    week = ", ".join(f"{d:%A} {d.isoformat()}" + (" (tomorrow)" if n == 0 else "") for n, d in enumerate(ahead))
    return f"Today is {today:%A}, {today.day} {today:%B %Y} ({today.isoformat()}). The next days: {week}."


def with_date(messages: tuple[Message, ...], today: datetime.date) -> tuple[Message, ...]:
    """``messages`` with :func:`date_note` as a system message of its own right after the
    system prompt (first when there is none).

    Its own message, not the prompt's last paragraph: a local model's prompt cache keeps the
    longest unchanged start of the prompt, and the tools' description follows the system
    prompt's text (``XLlamaLlm``), so a date inside the prompt put the change of date before
    the ~600 tokens of tools; at midnight the next turn evaluated the whole prefix again (9 s
    on one thread, past the first-token deadline).  After them it costs the date's own ~90
    tokens (docs/DEMO.md, "The local LLM's time").  A cloud API joins leading system messages
    (Anthropic, Gemini) or takes them as they are (OpenAI)."""
    note = SystemMessage(text=date_note(today))
    if messages and isinstance(messages[0], SystemMessage):
        return (messages[0], note, *messages[1:])
    return (note, *messages)


class NoAnswer(BrisvoxError):
    pass


class TurnRounds:
    """One turn's round ordinals: every round (model, filler, canned line) takes the next; ``reply``:
    how every round of the turn reaches the caller."""

    __slots__ = ("epoch", "filled", "next_round", "quiet_since", "reply")

    def __init__(self, epoch: int, reply: ReplyMode = ReplyMode.SPOKEN, quiet_since: float | None = None) -> None:
        self.epoch = epoch
        self.next_round = 0
        self.reply = reply
        # A filler was spoken in this turn: one is enough (several slow rounds said the same
        # phrase up to three times in one turn, docs/DEMO.md).
        self.filled = False
        # Since when the caller has heard nothing of this turn (its end); None once a round
        # spoke or a filler started.  A slow model's filler counts from here, not from its round.
        self.quiet_since = quiet_since

    def take(self) -> int:
        n = self.next_round
        self.next_round += 1
        return n


class WaitingFiller:
    """A spoken filler waiting for its place in the context."""

    __slots__ = ("epoch", "round", "text")

    def __init__(self, epoch: int, round_: int, text: str) -> None:
        self.epoch, self.round, self.text = epoch, round_, text


class FillerState:
    __slots__ = ("speaking",)

    def __init__(self) -> None:
        self.speaking = False


class Opening:
    """A model round not yet opened: its filler task, then its ordinal once opened."""

    __slots__ = ("filler", "round", "state")

    def __init__(self) -> None:
        self.filler: asyncio.Task[None] | None = None
        self.round: int | None = None
        self.state = FillerState()




async def stream_answer(
    llm: LlmProvider,
    timeouts: Timeouts,
    timeline: TimelineRecorder,
    request: LlmRequest,
    epoch: int,
    open_round: Callable[[], Awaitable[int]] | None,
    ctx: ProcessorContext,
    assembler: ResponseAssembler,
    spoken: list[str],
    timed: int | None,
    seen: Streamed | None = None,
    decided: Callable[[str], None] | None = None,
) -> None:
    """Speak the model's text as it streams; everything goes to the assembler as well.

    ``open_round`` gives the round's ordinal (opening it the first time); None: a
    speculative run, the text is only collected in ``spoken``.  ``decided`` is told the
    tool's name when the round's first event names a call (the round is a call, no text
    before it): the moment a person says "one moment" (the runner's acknowledgement).
    """
    stream = llm.stream(request)
    first = True
    try:
        it = aiter(stream)
        wait = timeouts.first_token
        while True:
            try:
                async with deadline(ctx.clock, wait, "llm token"):
                    event = await anext(it)
            except StopAsyncIteration:
                break
            except TimeoutError:
                what = "first token" if first else "next token"
                raise NoAnswer(f"no {what} within {wait:g} s") from None
            wait = timeouts.idle
            if first and isinstance(event, TextDelta | ToolCallDelta):
                first = False
                if decided is not None and isinstance(event, ToolCallDelta) and event.name:
                    decided(event.name)
                if seen is not None:
                    seen.first_token = ctx.clock.now()
                if open_round is not None:
                    timeline.llm_first_token(epoch, timed, ctx.clock.now())
            if isinstance(event, TextDelta):
                assembler.push(event)
                spoken.append(event.text)
                if open_round is not None:
                    await ctx.push(LlmTextFrame(epoch=epoch, text=event.text, round=await open_round()))
            elif isinstance(event, ToolCallDelta | ProviderDataDelta):
                assembler.push(event)
            elif isinstance(event, LlmError):
                raise NoAnswer(str(event.error))
            elif isinstance(event, Done):
                if seen is not None:
                    seen.usage = event.usage
                break
    finally:
        await stream.aclose()


class ToolCallEvents:
    """The events of a call's tool calls: one ``ToolCallStarted`` each, then one
    ``ToolCallSettled`` (a result, a flow's refusal, an interruption or a late note)."""

    __slots__ = ("_events", "_started")

    def __init__(self, events: CallEvents) -> None:
        self._events = events
        self._started: dict[str, tuple[int, str]] = {}  # call id -> (epoch, tool), until settled

    def started(self, epoch: int, calls: tuple[Assembled, ...], at: float, registry: ToolRegistry) -> None:
        for call in calls:
            self._started[call.id] = (epoch, call.name or "")
            arguments = json.dumps(call.arguments, separators=(",", ":")) if isinstance(call, ToolCall) \
                else call.raw_arguments
            spec = registry.spec(call.name) if call.name else None
            self._events.emit(ToolCallStarted(epoch=epoch, at=at, call_id=call.id, name=call.name or "",
                                              arguments=arguments, kind=None if spec is None else spec.kind,
                                              parsed=call.arguments if isinstance(call, ToolCall) else None))

    def settled(self, execution: Execution, at: float, screened: Screened | None = None) -> None:
        """One settled event per result of the round (a flow's refusals included) and late note."""
        for message, outcome in zip(execution.results, execution.outcomes, strict=True):
            self._settled(execution.epoch, at, message.call_id, outcome, message.content, message.is_error)
        for refusal in screened.refused if screened is not None else ():
            # A tool the node does not offer: answered tool_not_available, never run.
            self._settled(execution.epoch, at, refusal.call_id, Outcome.UNKNOWN_TOOL, refusal.content,
                          refusal.is_error)
        for note in execution.late_notes:
            self.late_note_settled(note, at)

    def late_note_settled(self, note: LateNote, at: float) -> None:
        self._events.emit(ToolCallSettled(epoch=note.epoch, at=at, call_id=note.call_id, name=note.tool,
                                          outcome=Outcome.LATE_RESULT, content=note.content, is_error=note.is_error))

    def interrupted(self, context: Context, turn_epoch: int, at: float) -> int:
        """Close every open call of ``context`` with an ``interrupted`` result (a call cut
        before it started counts as ``turn_epoch``'s); returns how many."""
        names = {call.id: call.name for call in context.open_tool_calls()}
        closed = context.interrupt_pending_tool_calls()
        for call_id in closed:
            epoch, _ = self._started.pop(call_id, (turn_epoch, ""))
            self._events.emit(ToolCallSettled(epoch=epoch, at=at, call_id=call_id, name=names.get(call_id, ""),
                                              outcome=Outcome.INTERRUPTED, content="", is_error=True))
        self._started.clear()  # nothing is open any more
        return len(closed)

    def _settled(self, epoch: int, at: float, call_id: str, outcome: Outcome, content: str, is_error: bool) -> None:
        _, name = self._started.pop(call_id, (0, ""))
        self._events.emit(ToolCallSettled(epoch=epoch, at=at, call_id=call_id, name=name, outcome=outcome,
                                          content=content, is_error=is_error))
