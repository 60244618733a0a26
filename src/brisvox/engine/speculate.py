"""Speculative starts of the LLM runner (``EngineConfig.speculation = SpeculationMode.AT_PAUSE``).

At a pause with words (``UserTurnTentative``) the runner may ask the model before the turn
is final.  The run works on a settled copy of the context (:func:`settled_copy`) with the
caller's words appended, and keeps everything it gets to itself: the text is held back
(nothing is spoken before the commit), the read-only calls run, the side-effect calls are
held by
:meth:`ToolEngine.speculate <brisvox.agent.tools.ToolEngine.speculate>`.

At the real end of the turn the runner either *commits* the run (same epoch, same words,
and a context that did not change underneath it) or *drops* it: the task is cancelled and
joined, and its :class:`~brisvox.agent.tools.Speculation` is discarded, so a held booking
never runs.  A dropped run never touched the context, so there is no call to close.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from brisvox.agent.assemble import Assembled
from brisvox.agent.context import AssistantMessage, Context, Message
from brisvox.agent.tools import CancelToken, Speculation

__all__ = ["HeldAnswer", "SpeculativeStart", "settled_copy"]


def settled_copy(context: Context) -> Context:
    """A copy of ``context`` as the next turn will find it: calls a barge-in left open closed.

    A speculation starts while the last turn may still be unsettled (the caller talked
    over a tool round, and the runner settles only when the turn ends), so the caller's
    words cannot follow the live messages.  The turn's settling closes those calls with
    the same ``interrupted`` results; whatever else it changes (a cut reply, a filler, a
    late note) makes the context differ from this base, and the run is dropped.
    """
    copy = Context(context.messages, estimator=context.estimator)
    copy.interrupt_pending_tool_calls()
    return copy


@dataclass(slots=True)
class HeldAnswer:
    """What a speculative run got: the model's text (unspoken), its message and calls."""

    chunks: list[str]
    message: AssistantMessage | None
    calls: tuple[Assembled, ...]
    speculation: Speculation | None  # None: the answer has no calls (or the call offers no tools)


class SpeculativeStart:
    """One speculative run: the words and context it answers, its task and its cancel token."""

    __slots__ = ("base", "cancel", "epoch", "task", "text")

    def __init__(
        self, epoch: int, text: str, base: tuple[Message, ...], task: asyncio.Task[HeldAnswer | None],
        cancel: CancelToken,
    ) -> None:
        self.epoch, self.text, self.base, self.task, self.cancel = epoch, text, base, task, cancel

    def answers(self, epoch: int, text: str) -> bool:
        return self.epoch == epoch and self.text == text

    def fits(self, epoch: int, text: str, context: tuple[Message, ...]) -> bool:
        """May the turn ``(epoch, text)`` over ``context`` take this run's answer?"""
        return self.answers(epoch, text) and context == self.base

    async def take(self) -> HeldAnswer | None:
        """The run's answer, waiting for it to finish (None: it failed)."""
        try:
            return await asyncio.shield(self.task)
        except asyncio.CancelledError:
            if not self.task.done():  # our waiter was cancelled (a barge-in): the run goes too
                await self.drop()
            raise

    async def drop(self) -> None:
        """Cancel the run and discard what it holds: its held calls never run."""
        self.cancel.cancel("speculation dropped")
        self.task.cancel()
        await asyncio.wait((self.task,))
        if self.task.cancelled() or self.task.exception() is not None:
            return
        answer = self.task.result()
        if answer is not None and answer.speculation is not None:
            answer.speculation.discard()
