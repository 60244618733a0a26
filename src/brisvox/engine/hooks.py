"""Custom processing at named points of the call: a user's function sees typed frames there.

Three points (:class:`HookPoint`), each a stage of its own in the call's pipeline:

* ``AFTER_LISTENING`` (listen → turn driver): the caller's words as they are recognized
  (:class:`~brisvox.core.frames.TranscriptFrame`, interim and final) and typed
  (:class:`~brisvox.core.frames.UserTextFrame`);
* ``BEFORE_LLM`` (turn driver → LLM runner): the caller's whole turn as it enters the
  conversation (:class:`~brisvox.core.frames.UserTextFrame`);
* ``BEFORE_SPEAKING`` (LLM runner → speech): the reply's text as it goes to the voice
  (:class:`~brisvox.core.frames.LlmTextFrame`), to observe only: the conversation keeps
  the model's text and is cut to what the caller heard by matching the two, so a hook here
  that changes the text is a :class:`HookError`.

A hook is a function (plain or ``async``) that takes one of its point's frames and returns
a frame of the same type (usually ``dataclasses.replace(frame, text=...)``).  It cannot
break the call's epochs: the frame it returns carries the epoch of the frame it was given
whatever it says, every other frame passes untouched, and returning another type (or
nothing) is a :class:`HookError` that fails the call (logged, told to the caller) rather
than losing a turn silently.  A hook that raises fails the call the same way.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from brisvox.core.errors import BrisvoxError
from brisvox.core.frames import DataFrame, Direction, Frame, LlmTextFrame, TranscriptFrame, UserTextFrame
from brisvox.core.processor import EpochPolicy, Processor, ProcessorContext

__all__ = ["Hook", "HookError", "HookPoint", "hook_stage"]

log = logging.getLogger(__name__)


class HookPoint(enum.Enum):
    AFTER_LISTENING = "after_listening"
    BEFORE_LLM = "before_llm"
    BEFORE_SPEAKING = "before_speaking"


FRAME_TYPES: dict[HookPoint, tuple[type[Frame], ...]] = {
    HookPoint.AFTER_LISTENING: (TranscriptFrame, UserTextFrame),
    HookPoint.BEFORE_LLM: (UserTextFrame,),
    HookPoint.BEFORE_SPEAKING: (LlmTextFrame,),
}
"""The frames a hook at each point sees."""


class HookError(BrisvoxError):
    """A hook returned something other than a frame of the type it was given."""


HookFunction = Callable[[Any], Any] | Callable[[Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Hook:
    """``function`` runs at ``point`` (see the module docs)."""

    point: HookPoint
    function: HookFunction

    @property
    def name(self) -> str:
        return getattr(self.function, "__name__", repr(self.function))


class _HookStage(Processor):
    epoch_policy: ClassVar[EpochPolicy] = EpochPolicy.KEEP_ALL  # the stage after it decides what is stale

    def __init__(self, hook: Hook) -> None:
        self._hook = hook
        self._types = FRAME_TYPES[hook.point]

    @property
    def name(self) -> str:
        return f"hook:{self._hook.point.value}:{self._hook.name}"

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if direction is not Direction.DOWNSTREAM or not isinstance(frame, self._types) \
                or not isinstance(frame, DataFrame):
            await ctx.push(frame, direction)
            return
        try:
            out = await self._run(frame)
        except Exception:
            # Logged here, where the cause is known: the stages around it fail next, on its closed inbox.
            log.exception("hook %r at %s failed; the call ends", self._hook.name, self._hook.point.value)
            raise
        await ctx.push(dataclasses.replace(out, epoch=frame.epoch), direction)

    async def _run(self, frame: DataFrame) -> DataFrame:
        out: Any = self._hook.function(frame)
        if inspect.isawaitable(out):
            out = await out
        if type(out) is not type(frame):
            raise HookError(f"hook {self._hook.name!r} at {self._hook.point.value} returned "
                            f"{type(out).__name__}, not the {type(frame).__name__} it was given")
        if isinstance(out, LlmTextFrame) and isinstance(frame, LlmTextFrame) and out.text != frame.text:
            raise HookError(f"hook {self._hook.name!r} at before_speaking changed the reply's text: the "
                            "conversation keeps the model's text, so this point only observes it")
        return out


def hook_stage(hook: Hook) -> Processor:
    """The pipeline stage that runs ``hook``."""
    return _HookStage(hook)
