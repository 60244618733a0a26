"""Model-backed brains: a brain that runs its own model and tools, and answers the call's turns.

:class:`ModelBrain` answers each caller turn with its own model (any
:class:`~brisvox.providers.llm.LlmProvider`; :mod:`brisvox.sdk.models` builds the
OpenAI-compatible, Anthropic and Gemini ones) and its own tools, in its own process.  It
declares ``answers_turns`` in ``ready`` (brain mode, docs/AGENT_PROTOCOL.md): the call runs no
model of its own for the turns, asks the brain with a ``turn.request`` for each, and speaks the
brain's reply lines (``say`` naming the request in ``reply_to``; the last one ``final``) as a
model's text.  Its tools are the brain's
``brisvox.tool`` methods (:meth:`~brisvox.sdk.brain.Brain.tools`), read **once per turn**
(override ``tools()`` to offer a different list as the call goes on), and are not offered
to the call's model (``ready`` declares none).

One turn is this loop (the same for every model):

* One request with the context and the turn's tools.  Its text goes out as reply lines,
  one per sentence as the sentence ends; the text in front of a tool call goes
  out before the call runs.  The calls run when the
  response has ended, in stream order; each result goes into the context after its call.
* The model is **not** asked again for those results (it reads them with the caller's
  next words), unless a tool the response called is marked :func:`needs_result_now`:
  then it is asked again at once with every result of that response.  At most
  ``max_tool_hops`` (default :data:`MAX_TOOL_HOPS`) such re-asks per turn; the last one
  offers no tool (``tool_choice`` none: the model must answer), with a warning.
* A tool is timed on the brain's clock from its call to its return: over
  :data:`~brisvox.tool.TOOL_BUDGET` (20 ms) one warning names it and its time; nothing
  is cancelled (the caller waited for it).  A tool's failure is a result the model reads.
* The speaking watchdog: a turn whose model has produced no text :data:`SPEAKING_WATCHDOG`
  seconds after it began says :data:`WATCHDOG_LINE`.  A turn whose responses said nothing calls
  :meth:`ModelBrain.on_speechless` (override it: :meth:`~brisvox.sdk.brain.Brain.say_line`,
  or :meth:`ModelBrain.respond_with` with ``ToolChoice.NONE``).
* One log line per turn: ``turn N: hops= calls= awaited= speechless=`` (hops: re-asks;
  awaited: calls of marked tools); the same facts are :attr:`ModelBrain.last_turn`.
* A model error or a bug in the loop: logged with its traceback, and the caller hears
  :data:`FALLBACK_LINE` rather than silence.

The caller speaking (``turn_started``) cancels the running turn (no ``final`` follows: the call
dropped the request); ``bot_heard`` (what the caller heard of a cut reply, from its start) cuts
the reply in the context to what was heard, across its lines and messages.
App events (:attr:`~brisvox.sdk.brain.Brain.ui`) and :meth:`ModelBrain.append_note` become
system notes in the brain's own context, placed before the next request (after the
results of an open call).
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from dataclasses import dataclass
from typing import ClassVar, TypeVar

from brisvox.agent.assemble import InvalidCall, Response, ResponseAssembler
from brisvox.agent.context import AssistantMessage, Context, SystemMessage, ToolCall
from brisvox.agent.tools import CancelToken, ToolCallContext, ToolError, ToolSpec
from brisvox.agent.tools.results import ErrorKind, error_message
from brisvox.core.clock import Clock
from brisvox.core.errors import BrisvoxError, ConfigError
from brisvox.providers.llm import (
    Done,
    LlmError,
    LlmProvider,
    LlmRequest,
    ProviderDataDelta,
    TextDelta,
    ToolCallDelta,
    ToolChoice,
    ToolChoiceMode,
)
from brisvox.sdk import protocol as p
from brisvox.sdk.brain import Brain
from brisvox.tool import TOOL_BUDGET, FunctionTool

__all__ = [
    "FALLBACK_LINE",
    "MAX_TOOL_HOPS",
    "SPEAKING_WATCHDOG",
    "WATCHDOG_LINE",
    "ModelBrain",
    "TurnReport",
    "needs_result_now",
]

log = logging.getLogger(__name__)

MAX_TOOL_HOPS = 6
"""Re-asks one turn may make for marked tools' results; the last one offers no tool."""

SPEAKING_WATCHDOG = 10.0
"""Seconds a turn may stay silent before :data:`WATCHDOG_LINE` is said."""

WATCHDOG_LINE = "Sorry — that's taking longer than I expected."

FALLBACK_LINE = "Sorry, something went wrong on my side. Could you say that again?"
"""What the caller hears when a turn fails (the model's error, a bug in the loop)."""

_MARK = "__brisvox_needs_result_now__"

_SENTENCE_END = re.compile(r"[.!?…][\"')\]]?\s*$")
"""Text that ends a sentence: what is pending goes out as one ``say`` once the next piece begins with a space."""

_T = TypeVar("_T")


def needs_result_now(tool: _T) -> _T:
    """Mark a tool whose result the model must read before it can answer (a balance, a cart,
    the screen): a response that calls it is followed at once by another request with its
    results.  Above or below ``@brisvox.tool.read_only``; it sets an attribute, nothing else."""
    function = tool.function if isinstance(tool, FunctionTool) else tool
    try:
        setattr(function, _MARK, True)
    except (AttributeError, TypeError):
        raise ConfigError(f"needs_result_now: {tool!r} is not a function or a brisvox tool") from None
    return tool


def _marked(tool: FunctionTool) -> bool:
    return bool(getattr(tool.function, _MARK, False))


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnReport:
    """What one turn did (the facts of its log line).  ``completed``: it ran to its end."""

    turn: int
    hops: int
    calls: int
    awaited: int
    speechless: bool
    failed: bool = False
    cancelled: bool = False

    @property
    def completed(self) -> bool:
        return not (self.failed or self.cancelled)


@dataclass(slots=True)
class _Said:
    """One ``say`` of the turn: the context index of its assistant message, where in its text it
    starts, and its length."""

    index: int
    offset: int
    length: int


class _Turn:
    """The counters of the running turn."""

    def __init__(self, number: int, tools: dict[str, FunctionTool], reply_to: str | None = None) -> None:
        self.number = number
        self.tools = tools
        self.reply_to = reply_to  # the turn.request this turn answers (None: its lines are says of their own)
        self.specs: tuple[ToolSpec, ...] = tuple(t.spec for t in tools.values())
        self.hops = 0
        self.calls = 0
        self.awaited = 0
        self.said = False


class ModelBrain(Brain):
    """A brain that owns its model loop (see the module docs).

    ``llm``: the model; ``system``: its instructions (the context's first message);
    ``max_tool_hops``: re-asks per turn for marked tools' results (at least 1).

    ``answers_turns`` (True): the brain answers the call's turns itself: ``ready`` declares it, the
    server runs no model of its own for the turns and sends a ``turn.request`` for each, and the
    brain's reply streams back as ``say`` lines naming it (``reply_to``), the last one ``final``.
    A subclass that sets it False answers each ``user_turn`` event with says of their own instead,
    while the call's model answers too."""

    answers_turns: ClassVar[bool] = True

    def __init__(self, llm: LlmProvider, *, system: str = "", max_tool_hops: int = MAX_TOOL_HOPS,
                 max_tokens: int | None = None, temperature: float | None = None, clock: Clock | None = None) -> None:
        super().__init__(clock=clock)
        if max_tool_hops < 1:
            raise ConfigError(f"max_tool_hops must be at least 1, got {max_tool_hops}")
        self.llm = llm
        self.max_tool_hops = max_tool_hops
        self.max_tokens = max_tokens
        self.temperature = temperature
        self.context = Context([SystemMessage(text=system)] if system else [])
        self.last_turn: TurnReport | None = None
        self._notes: list[str] = []
        self._turns = 0
        self._turn: _Turn | None = None
        self._task: asyncio.Task[None] | None = None
        self._watchdog: asyncio.Task[None] | None = None
        self._said: list[_Said] = []  # the says of the latest turn, for bot_heard
        self._asked: int | None = None  # the caller's turn of the latest turn.request (its words are in the context)

    def remote_tools(self) -> list[FunctionTool]:
        return []  # the brain runs its tools itself: the call's model is not offered them

    # --- the call's events ---

    async def on_event(self, event: p.CallEvent) -> None:
        if event.kind in ("turn_started", "call_ended"):  # the caller speaks (or is gone): the turn is stale
            await self._stop()
        elif event.kind == "user_turn" and event.text and not self.answers_turns:
            await self._start(event.text, None)
        elif event.kind == "bot_heard" and event.text is not None and self._heard_here(event.turn):
            self._heard(event.text)

    def _heard_here(self, turn: int | None) -> bool:
        """A reply is heard in its request's turn: a cut of another turn's reply (the agent file's
        model answered it; the brain's own reply was never spoken) is not this context's."""
        return not self.answers_turns or turn is None or turn == self._asked

    async def on_turn_request(self, request: p.TurnRequest) -> None:
        """The call asks for the reply to the caller's turn (``answers_turns``): one turn of the loop,
        its text streamed back as the request's reply lines."""
        new = request.turn is None or request.turn != self._asked
        self._asked = request.turn
        await self._start(request.text if new else "", request.id)

    async def _start(self, text: str, reply_to: str | None) -> None:
        await self._stop()
        self._place_notes()
        if text:
            self.context.push_user(text)
        self._turns += 1
        self._said = []
        turn = self._turn = _Turn(self._turns, {t.name: t for t in self.tools()}, reply_to)  # read once per turn
        self._watchdog = self._spawn(self._watch(turn), name=f"watchdog-{turn.number}")
        self._task = self._spawn(self._run(turn), name=f"turn-{turn.number}")

    async def append_note(self, text: str) -> None:
        """Add ``text`` to this brain's context as a system note (before the next request)."""
        self._notes.append(text)
        self._place_notes()

    async def on_speechless(self) -> None:
        """A turn's responses said nothing.  Default: nothing (the watchdog line comes at
        :data:`SPEAKING_WATCHDOG` seconds); override to say a line or ``respond_with(tools=ToolChoice.NONE)``."""

    async def respond_with(self, *, tools: ToolChoice = ToolChoice.AUTO) -> None:
        """Ask the model once more in the running turn (``ToolChoice.NONE``: it may not call a tool)."""
        turn = self._turn
        if turn is None:
            raise ConfigError("respond_with: no turn is running (call it from a turn, e.g. on_speechless)")
        response = await self._ask(turn, tools)
        if response is not None:
            await self._run_calls(turn, response, allowed=tools.mode is not ToolChoiceMode.NONE)

    async def aclose(self) -> None:
        close = getattr(self.llm, "aclose", None)  # the HTTP adapters hold a connection pool
        if close is not None:
            await close()

    async def _idle(self) -> None:
        task = self._task
        if task is not None:
            await asyncio.wait([task])

    # --- one turn ---

    async def _run(self, turn: _Turn) -> None:
        failed = False
        try:
            while True:
                last = turn.hops >= self.max_tool_hops
                if last:
                    log.warning("brain: turn %d reached max_tool_hops=%d: the model answers without tools",
                                turn.number, self.max_tool_hops)
                response = await self._ask(turn, ToolChoice.NONE if last else ToolChoice.AUTO)
                if response is None:
                    failed = True
                    break
                if not await self._run_calls(turn, response, allowed=not last) or last:
                    break
                turn.hops += 1
            speechless = not turn.said
            if speechless and not failed:
                await self.on_speechless()
        except asyncio.CancelledError:
            self._report(turn, not turn.said, cancelled=True)
            raise
        except Exception:  # a bug (the brain's or ours): the operator gets the traceback, the caller a line
            log.exception("brain: turn %d failed", turn.number)
            speechless = not turn.said
            await self._fallback(turn)
            self._report(turn, speechless, failed=True)
            await self._end_reply(turn)
            return
        self._report(turn, speechless, failed=failed)
        await self._end_reply(turn)

    async def _end_reply(self, turn: _Turn) -> None:
        """The reply to a turn.request is complete: its end marker (the call's round ends with it; no
        watchdog line can follow it).  A turn of says of their own keeps its watchdog."""
        if turn.reply_to is not None:
            self._stop_watchdog()
            try:
                await self.reply_line(turn.reply_to, "", final=True)
            except BrisvoxError as exc:  # the link is gone: the session reports it as it ends
                log.warning("brain: the end of reply %s was not sent: %s", turn.reply_to, exc)

    def _report(self, turn: _Turn, speechless: bool, *, failed: bool = False, cancelled: bool = False) -> None:
        self.last_turn = TurnReport(turn=turn.number, hops=turn.hops, calls=turn.calls, awaited=turn.awaited,
                                    speechless=speechless, failed=failed, cancelled=cancelled)
        log.info("turn %d: hops=%d calls=%d awaited=%d speechless=%s%s", turn.number, turn.hops, turn.calls,
                 turn.awaited, "yes" if speechless else "no",
                 " failed" if failed else " cancelled" if cancelled else "")

    async def _ask(self, turn: _Turn, choice: ToolChoice) -> Response | None:
        """One request; its text said, its assistant message in the context.  None: the model failed."""
        self._place_notes()
        request = LlmRequest(messages=self.context.messages, tools=turn.specs,
                             tool_choice=choice if turn.specs else ToolChoice.AUTO,
                             max_tokens=self.max_tokens, temperature=self.temperature)
        assembler = ResponseAssembler()
        said: list[str] = []  # text already said, in order
        pending: list[str] = []
        try:
            async with self.llm.stream(request) as stream:
                async for event in stream:
                    if isinstance(event, TextDelta):
                        if pending and event.text[:1].isspace() and _SENTENCE_END.search("".join(pending)):
                            said.append(await self._say(turn, "".join(pending)))
                            pending.clear()
                        assembler.push(event)
                        pending.append(event.text)
                        if event.text.strip():  # the model is talking: the watchdog has nothing to fill
                            turn.said = True
                            self._stop_watchdog()
                        if _SENTENCE_END.search(event.text) and event.text[-1:].isspace():
                            said.append(await self._say(turn, "".join(pending)))
                            pending.clear()
                    elif isinstance(event, ToolCallDelta):
                        if pending:  # the speech in front of the call goes out first
                            said.append(await self._say(turn, "".join(pending)))
                            pending.clear()
                        assembler.push(event)
                    elif isinstance(event, ProviderDataDelta):
                        assembler.push(event)
                    elif isinstance(event, LlmError):
                        log.error("brain: turn %d: the model failed: %s", turn.number, event.error)
                        self._keep_said(turn, said)
                        await self._fallback(turn)
                        return None
                    elif isinstance(event, Done):
                        break
            if pending:
                said.append(await self._say(turn, "".join(pending)))
        except asyncio.CancelledError:
            self._keep_said(turn, said)
            raise
        response = assembler.finish(turn.number, self.context)
        message = response.assistant_message()
        if message is not None:
            self.context.push(message)
            self._note_said(turn, len(self.context) - 1, said)
        return response

    async def _say(self, turn: _Turn, text: str) -> str:
        if text.strip():
            turn.said = True
            self._stop_watchdog()
        if _sent(turn, text):
            await self._line(turn, text)
        return text

    async def _line(self, turn: _Turn, text: str) -> None:
        """A line of the turn: a piece of its reply (``turn.request``), or a ``say`` of its own."""
        if turn.reply_to is None:
            await self.say_line(text)
        else:
            await self.reply_line(turn.reply_to, text)

    def _keep_said(self, turn: _Turn, said: list[str]) -> None:
        """A response cut short: what was already said stays in the context (the calls never ran)."""
        if said:
            self.context.push(AssistantMessage(text="".join(said)))
            self._note_said(turn, len(self.context) - 1, said)

    def _note_said(self, turn: _Turn, index: int, said: list[str]) -> None:
        offset = 0
        for text in said:
            if _sent(turn, text):
                self._said.append(_Said(index, offset, len(text)))
            offset += len(text)

    async def _run_calls(self, turn: _Turn, response: Response, *, allowed: bool) -> bool:
        """Run the response's calls in order, each result into the context; whether a marked tool was called."""
        marked = False
        for call in response.calls:
            if isinstance(call, InvalidCall):
                self.context.push(call.error_result())
                continue
            tool = turn.tools.get(call.name) if allowed else None
            if tool is None:
                why = "no tool of that name is offered" if allowed else "tools are off for this request"
                self.context.push(error_message(call.id, ErrorKind.UNKNOWN_TOOL, call.name, why))
                continue
            turn.calls += 1
            if _marked(tool):
                marked = True
                turn.awaited += 1
            content, is_error = await self._call(tool, call, turn.number)
            self.context.push_tool_result(call.id, content, is_error=is_error)
        self._place_notes()
        return marked

    async def _call(self, tool: FunctionTool, call: ToolCall, turn: int) -> tuple[str, bool]:
        """The tool's result as the model reads it: ``(content, is_error)``; timed against the budget."""
        call_id = call.id
        ctx = ToolCallContext(session=self.session.call_id if self.session is not None else "", epoch=turn,
                              call=call, cancel=CancelToken(), ui=self._link.ui if self._link is not None else None)
        started = self.clock.now()
        try:
            result = await tool.call(dict(call.arguments), ctx, timed=False)  # timed here, on the brain's clock
        except ToolError as exc:
            return error_message(call_id, ErrorKind.TOOL_FAILED, tool.name, str(exc)).content, True
        except Exception:  # the tool's bug: its traceback in the log, a failure the model can say
            log.exception("brain: tool %s failed", tool.name)
            return error_message(call_id, ErrorKind.TOOL_FAILED, tool.name, "the tool failed").content, True
        finally:
            took = self.clock.now() - started
            if took > TOOL_BUDGET:
                log.warning("tool %s.%s took %.0fms, over the %.0fms budget; the user waited for it",
                            type(self).__name__, tool.name, took * 1000, TOOL_BUDGET * 1000)
        return (result if isinstance(result, str) else json.dumps(result, default=str)), False

    async def _fallback(self, turn: _Turn) -> None:
        turn.said = True
        self._stop_watchdog()
        await self._say_or_log(turn, FALLBACK_LINE)

    async def _say_or_log(self, turn: _Turn, line: str) -> None:
        """A line of the brain's own; a link that cannot carry it is the session's to report (it ends)."""
        try:
            await self._line(turn, line)
        except BrisvoxError as exc:
            log.warning("brain: %r was not sent: %s", line, exc)

    # --- around the turn ---

    async def _watch(self, turn: _Turn) -> None:
        await self.clock.sleep(SPEAKING_WATCHDOG)
        if not turn.said:
            log.warning("brain: turn %d said nothing for %.0f s: saying the watchdog line",
                        turn.number, SPEAKING_WATCHDOG)
            turn.said = True
            await self._say_or_log(turn, WATCHDOG_LINE)

    def _stop_watchdog(self) -> None:
        watchdog = self._watchdog
        if watchdog is not None and watchdog is not asyncio.current_task():
            watchdog.cancel()
        self._watchdog = None

    async def _stop(self) -> None:
        """Cancel the running turn and its watchdog; calls it left open are answered ``interrupted``."""
        self._stop_watchdog()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            await asyncio.wait([task])
        self._turn = None
        self.context.interrupt_pending_tool_calls()
        self._place_notes()

    def _place_notes(self) -> None:
        if self._notes and not self.context.has_open_tool_calls():
            for text in self._notes:
                self.context.push(SystemMessage(text=text))
            self._notes.clear()

    def _heard(self, heard: str) -> None:
        """The caller heard only ``heard`` of the latest reply (a turn.request's, every line of the
        turn) or line (a say of its own): the context keeps that, not what was sent."""
        entries = self._said if self.answers_turns else self._said[-1:]
        self._said = []  # what came before the cut reply was heard whole; what follows it was not sent
        keep: dict[int, int] = {}  # message index -> characters kept
        tail = ""
        position = 0
        cut = False
        first_cut = -1
        for entry in entries:
            message = self.context[entry.index] if entry.index < len(self.context) else None
            if not isinstance(message, AssistantMessage):
                continue
            if cut:
                keep.setdefault(entry.index, entry.offset)
                continue
            piece = message.text[entry.offset: entry.offset + entry.length]
            if position + entry.length < len(heard) and heard[position: position + entry.length] == piece:
                position += entry.length  # heard whole, and more after it
                continue
            cut = True
            keep[entry.index] = entry.offset
            tail = heard[position:]
            first_cut = entry.index
        if not cut:
            return
        for index in sorted(keep, reverse=True):
            message = self.context[index]
            assert isinstance(message, AssistantMessage)
            text = message.text[: keep[index]] + (tail if index == first_cut else "")
            if text == message.text:
                continue
            if text.strip() or message.tool_calls:
                self.context.replace(index, AssistantMessage(text=text, tool_calls=message.tool_calls,
                                                             provider_data=message.provider_data))
            else:
                self.context.remove(index)


def _sent(turn: _Turn, text: str) -> bool:
    """Whether ``text`` goes out as a line: a reply sends every piece (its spaces are the joins
    between them); a say of its own needs words."""
    return bool(text) if turn.reply_to is not None else bool(text.strip())
