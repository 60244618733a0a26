"""Stage 3: the LLM runner.  It owns the conversation context.

At each user turn's end it first settles the earlier turns (the context is cut to what
the caller heard, from the PlayoutBook), then adds the caller's words and starts one
*round task* for the new epoch.  The round task streams the model: text is spoken as it
arrives, the assistant message is pushed once the response is done, and
``BotResponseDone`` tells the later stages that nothing more will come for the epoch.

A model that sends no first token within ``first_token`` seconds, goes silent for
``idle`` seconds, or fails, is answered with the fixed fallback line (in the context too,
as what the bot said).  A barge-in (a newer interrupt) cancels the round task and joins
it before anything touches the context.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from brisvox.agent.context import Context
from brisvox.agent.played import apply_truncation
from brisvox.core.errors import BrisvoxError
from brisvox.core.frames import (
    BotResponseDone,
    Direction,
    Frame,
    InterruptFrame,
    LlmResponseEnded,
    LlmResponseStarted,
    LlmTextFrame,
    StopFrame,
    UserTextFrame,
    UserTurnEnded,
)
from brisvox.core.processor import Processor, ProcessorContext
from brisvox.core.tasks import TaskScope
from brisvox.engine.config import LlmConfig, Timeouts
from brisvox.engine.playout import PlayoutBook
from brisvox.providers.llm import Done, LlmError, LlmProvider, LlmRequest, TextDelta

__all__ = ["LlmRunner", "RunnerStats"]

log = logging.getLogger(__name__)


class RunnerStats:
    __slots__ = ("cut_messages", "fallbacks", "rounds", "turns")

    def __init__(self) -> None:
        self.turns = 0
        self.rounds = 0
        self.fallbacks = 0
        self.cut_messages = 0


class _NoAnswer(BrisvoxError):
    pass


class LlmRunner(Processor):
    def __init__(
        self,
        llm: LlmProvider,
        context: Context,
        book: PlayoutBook,
        config: LlmConfig,
        timeouts: Timeouts,
        scope: TaskScope,
    ) -> None:
        self.llm = llm
        self.context = context
        self.book = book
        self.config = config
        self.timeouts = timeouts
        self._scope = scope
        self._round_task: asyncio.Task[None] | None = None
        self._user_text: dict[int, list[str]] = {}
        self.stats = RunnerStats()
        if config.system_prompt and not len(context):
            context.push_system(config.system_prompt)

    @property
    def name(self) -> str:
        return "llm-runner"

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if isinstance(frame, UserTextFrame):
            if frame.text:
                self._user_text.setdefault(frame.epoch, []).append(frame.text)
            return
        if isinstance(frame, UserTurnEnded):
            await ctx.push(frame, direction)
            await self._start_turn(frame.epoch, ctx)
            return
        if isinstance(frame, InterruptFrame):
            await self._join_round()
        elif isinstance(frame, StopFrame):
            await self._join_round(cancel=False)
            self._settle(before_epoch=ctx.epoch + 1)
        await ctx.push(frame, direction)

    async def _join_round(self, cancel: bool = True) -> None:
        task, self._round_task = self._round_task, None
        if task is None:
            return
        if cancel:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def _settle(self, before_epoch: int) -> None:
        """Cut the assistant messages of older turns to what the caller heard."""
        for cut in self.book.cuts(before_epoch):
            try:
                apply_truncation(self.context, cut.msg_index, cut.truncation)
                self.stats.cut_messages += 1
            except BrisvoxError as exc:  # a bookkeeping bug must not end the call
                log.error("could not cut message %d to what was heard: %s", cut.msg_index, exc)

    async def _start_turn(self, epoch: int, ctx: ProcessorContext) -> None:
        await self._join_round()  # a round still running belongs to an older epoch
        self._settle(before_epoch=epoch)
        self.stats.turns += 1
        text = " ".join(self._user_text.pop(epoch, []))
        for stale in [e for e in self._user_text if e < epoch]:
            del self._user_text[stale]
        if not text:
            # Nothing to answer: tell the later stages at once, so the turn machine is not
            # left waiting for bot audio that never comes.
            await ctx.push(BotResponseDone(epoch=epoch))
            return
        self.context.push_user(text)
        self._round_task = self._scope.spawn(self._respond(epoch, ctx), name=f"round-{epoch}")

    async def _respond(self, epoch: int, ctx: ProcessorContext) -> None:
        round_ = 0
        self.stats.rounds += 1
        await ctx.push(LlmResponseStarted(epoch=epoch, round=round_))
        request = LlmRequest(
            messages=self.context.messages,
            max_tokens=self.config.max_tokens,
            temperature=self.config.temperature,
        )
        parts: list[str] = []
        try:
            await self._stream(request, epoch, round_, ctx, parts)
        except BrisvoxError as exc:
            log.warning("the model gave no usable answer (%s); speaking the fallback line", exc)
            self.stats.fallbacks += 1
            fallback = (" " if parts else "") + self.config.fallback_line
            await ctx.push(LlmTextFrame(epoch=epoch, text=fallback, round=round_))
            parts.append(fallback)
        text = "".join(parts)
        if text:
            self.context.push_assistant(text)
            self.book.record_round(epoch, round_, len(self.context) - 1)
        await ctx.push(LlmResponseEnded(epoch=epoch, round=round_))
        await ctx.push(BotResponseDone(epoch=epoch))

    async def _stream(
        self, request: LlmRequest, epoch: int, round_: int, ctx: ProcessorContext, parts: list[str]
    ) -> None:
        """Speak the model's text as it streams, collecting it in ``parts``."""
        stream = self.llm.stream(request)
        try:
            it = aiter(stream)
            wait = self.timeouts.first_token
            while True:
                try:
                    async with asyncio.timeout(wait):
                        event = await anext(it)
                except StopAsyncIteration:
                    break
                except TimeoutError:
                    what = "first token" if not parts else "next token"
                    raise _NoAnswer(f"no {what} within {wait:g} s") from None
                wait = self.timeouts.idle
                if isinstance(event, TextDelta):
                    parts.append(event.text)
                    await ctx.push(LlmTextFrame(epoch=epoch, text=event.text, round=round_))
                elif isinstance(event, LlmError):
                    raise _NoAnswer(str(event.error))
                elif isinstance(event, Done):
                    break
        finally:
            await stream.aclose()
