"""Brain mode: the agent answers the call's turns, and the call's model is the agent link.

An agent whose ``ready`` says ``answers_turns: true`` (the SDK's model-backed brains) owns
its model loop.  The call then runs on :class:`BrainLlm`, an LLM provider whose request is
a ``turn.request`` to the agent and whose streamed text is the agent's reply: the ``say``
lines naming that request in ``reply_to``, up to the one with ``final``.  The runner streams
them exactly as a model's text deltas, so epochs, barge-in, what was heard, fillers, the
first-token and idle deadlines apply unchanged (docs/AGENT_PROTOCOL.md, "Brain mode").

* A barge-in closes the request's stream: its later lines are *stale*, dropped and counted
  (``BrainReplies.stale_lines``), never spoken.
* The fallback: when the link is down (lost, or being reopened), or the agent sends no line
  of a reply within ``AgentLinkConfig.first_line`` seconds, the agent file's own model
  answers the request (it gets the same request: the call's context and tools).  A missed
  deadline marks the brain *silent*: the following turns go to the agent file's model at
  once (each is still sent to the brain as a ``turn.request``, not waited for) until a
  reply line of the brain's arrives again (its late reply included, dropped as stale).  A
  link that is lost for good leaves the agent file's model answering for the rest of the call.
* A link lost in the middle of a reply ends the reply with an ``LlmError``: the runner says
  its fallback line after what was spoken.

:class:`BrainReplies` is the link's side (the reader hands it every reply line, never
waiting); :class:`BrainLlm` is the call's.
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from brisvox.agent.window import Summarizer
from brisvox.core.channel import Channel
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import ChannelClosed, DeadlineExceeded
from brisvox.engine import events as ev
from brisvox.engine.call import Providers
from brisvox.engine.config import EngineConfig, SpeculationMode
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.llm import (
    Done,
    FinishReason,
    GeneratorLlmStream,
    LlmError,
    LlmEvent,
    LlmProvider,
    LlmRequest,
    LlmStream,
    TextDelta,
)
from brisvox.providers.summarizer import LlmSummarizer
from brisvox.sdk import protocol as p

if TYPE_CHECKING:
    from brisvox.server.agent_link import AgentLink

__all__ = ["REPLY_LINES", "BrainCall", "BrainLlm", "BrainReplies", "brain_call", "brain_config"]

log = logging.getLogger(__name__)

REPLY_LINES: Final = 256
"""Lines of one reply waiting for the runner; a line past it is refused ``busy`` and cuts the reply."""


class _Reply:
    """One open request: its lines until ``final`` (the channel closed), or ``broken`` (why it ended early)."""

    __slots__ = ("broken", "lines")

    def __init__(self) -> None:
        self.lines: Channel[str] = Channel(REPLY_LINES, name="brain reply")
        self.broken: _Broken | None = None

    def end(self, broken: _Broken) -> None:
        self.broken = broken
        self.lines.abort()


class _Broken(Exception):
    """A reply that ended before its ``final``: ``lost`` (the link went) or cut (too many lines)."""

    def __init__(self, message: str, *, lost: bool) -> None:
        super().__init__(message)
        self.lost = lost


class BrainReplies:
    """The requests the agent is answering, by id (the link's side; nothing here waits)."""

    def __init__(self, call_id: str) -> None:
        self.call_id = call_id
        self._open: dict[str, _Reply] = {}
        self.silent = False  # the brain missed a first line; it is back at its next reply line
        self.stale_lines = 0  # lines for a request no longer open (barged in, or past its deadline)

    def open(self, request_id: str) -> _Reply:
        reply = self._open[request_id] = _Reply()
        return reply

    def close(self, request_id: str) -> None:
        self._open.pop(request_id, None)

    def deliver(self, say: p.Say) -> str | None:
        """One reply line from the agent (checked by :func:`reply_refusal`); a message when it must
        be refused ``busy`` (its reply has too many lines waiting: the reply is cut)."""
        if self.silent:
            self.silent = False
            log.info("call %s: the agent answers again; it answers the next turns", self.call_id)
        reply = self._open.get(say.reply_to or "")
        if reply is None or reply.lines.closed:  # barged in, past its deadline, ended, or cut
            self.stale_lines += 1
            log.info("call %s: a reply line for request %s dropped: the request is no longer open",
                     self.call_id, say.reply_to)
            return None
        if say.text and not reply.lines.try_send(say.text):
            why = f"more than {REPLY_LINES} lines of one reply waiting: the reply was cut"
            reply.end(_Broken(why, lost=False))
            return why
        if say.final:
            reply.lines.close()
        return None

    def lost(self) -> None:
        """The link is down: every open reply ends (its request falls back, or fails mid-reply)."""
        for reply in self._open.values():
            reply.end(_Broken("the agent link was lost in the middle of a reply", lost=True))


class BrainLlm:
    """The call's LLM in brain mode (see the module docs): requests go to the agent over ``link``;
    ``fallback`` (the agent file's model) answers when the agent cannot.  ``listen`` must hear
    the call's events (it takes the caller's turn to send with each request)."""

    def __init__(self, link: AgentLink, replies: BrainReplies, fallback: LlmProvider, clock: Clock, *,
                 first_line: float, on_silent: Callable[[], None] | None = None) -> None:
        self.link = link
        self.replies = replies
        self.fallback = fallback
        self.clock = clock
        self.first_line = first_line
        self._on_silent = on_silent
        self._ids = itertools.count(1)
        self._turn: ev.UserTurn | None = None
        self.requests = 0  # sent to the brain
        self.answered = 0  # replies that came from the brain
        self.fell_back = 0  # requests the agent file's model answered
        self.missed = 0  # first lines that missed their deadline
        self.tap: Callable[[str], None] | None = None  # the call's recorder: told each fallback and why

    @property
    def name(self) -> str:
        return "agent"

    def listen(self, event: ev.EngineEvent) -> None:
        if isinstance(event, ev.UserTurn):
            self._turn = event

    async def warm(self) -> None:
        await self.fallback.warm()  # the fallback must be ready the moment the brain is not

    def stream(self, request: LlmRequest) -> LlmStream:
        return GeneratorLlmStream(self.name, self._answer(request))

    async def _answer(self, request: LlmRequest) -> AsyncGenerator[LlmEvent, None]:
        if self.link.lost:
            async for event in self._fall_back(request, "the agent link is down"):
                yield event
            return
        request_id = f"t{next(self._ids)}"
        turn = self._turn
        message = p.TurnRequest(type="turn.request", id=request_id, turn=turn.epoch if turn is not None else None,
                                text=turn.text if turn is not None else "")
        # A silent brain is still sent the request (its reply proves it is back) but not waited for.
        reply = None if self.replies.silent else self.replies.open(request_id)
        why = "the agent has not answered since it missed a first line"
        try:
            try:
                await self.link.send(message)
                self.requests += 1
            except (ChannelClosed, DeadlineExceeded):
                reply, why = None, "the agent link could not take the request"
            if reply is None:
                async for event in self._fall_back(request, why):
                    yield event
                return
            try:
                first = await bounded(self.clock, self.first_line, self._line(reply), "the agent's first line")
            except DeadlineExceeded:
                self._missed(request_id)
                self.replies.close(request_id)  # its late lines are stale from now on
                async for event in self._fall_back(request, "the agent sent no line in time"):
                    yield event
                return
            except _Broken as broken:
                if not broken.lost:
                    yield LlmError(error=ProviderError(self.name, ProviderErrorKind.PROTOCOL, str(broken)))
                    return
                self.replies.close(request_id)
                async for event in self._fall_back(request, "the agent link was lost"):
                    yield event
                return
            self.answered += 1
            line: str | None = first
            while line is not None:
                if line:
                    yield TextDelta(text=line)
                try:
                    line = await self._line(reply)
                except _Broken as broken:
                    kind = ProviderErrorKind.CLOSED if broken.lost else ProviderErrorKind.PROTOCOL
                    yield LlmError(error=ProviderError(self.name, kind, str(broken)))
                    return
            yield Done(finish_reason=FinishReason.STOP)
        finally:
            self.replies.close(request_id)

    @staticmethod
    async def _line(reply: _Reply) -> str | None:
        """The reply's next line; None at its end; :class:`_Broken` when it ended early."""
        try:
            return await reply.lines.recv()
        except ChannelClosed:
            if reply.broken is not None:
                raise reply.broken from None
            return None

    def _missed(self, request_id: str) -> None:
        self.missed += 1
        self.replies.silent = True
        if self._on_silent is not None:
            self._on_silent()
        log.warning("call %s: the agent sent no line of request %s within %g s; the agent file's model answers "
                    "until the agent answers again", self.link.call_id, request_id, self.first_line)

    async def _fall_back(self, request: LlmRequest, why: str) -> AsyncGenerator[LlmEvent, None]:
        self.fell_back += 1
        if self.tap is not None:
            self.tap(why)
        log.info("call %s: the agent file's model answers this request: %s", self.link.call_id, why)
        async with self.fallback.stream(request) as stream:
            async for event in stream:
                yield event


@dataclass(frozen=True, slots=True)
class BrainCall:
    """What a call in brain mode runs with: its providers with :class:`BrainLlm` as the model, its
    config (no speculation: a speculative request would reach the agent), and a summarizer on the
    agent file's model (window summaries never go to the agent)."""

    providers: Providers
    config: EngineConfig
    summarizer: Summarizer | None
    llm: BrainLlm


def brain_call(link: AgentLink, providers: Providers, config: EngineConfig, summarizer: Summarizer | None,
               clock: Clock, on_silent: Callable[[], None] | None = None) -> BrainCall | None:
    """The call's setup when its agent answers the turns (``ready.answers_turns``); None when it
    does not (the agent file's model answers, as without a link).  The caller has the returned
    ``llm`` hear the call's events (:meth:`BrainLlm.listen`)."""
    if link.replies is None:
        return None
    llm = BrainLlm(link, link.replies, providers.llm, clock, first_line=link.config.first_line, on_silent=on_silent)
    if summarizer is None and config.summary.enabled:
        summarizer = LlmSummarizer(provider=providers.llm)
    return BrainCall(providers=dataclasses.replace(providers, llm=llm), config=brain_config(config),
                     summarizer=summarizer, llm=llm)


def brain_config(config: EngineConfig) -> EngineConfig:
    """A brain-mode call's config: no speculation (a speculative request would reach the agent);
    a replay of such a call runs with it too."""
    return dataclasses.replace(config, speculation=SpeculationMode.OFF)
