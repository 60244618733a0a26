"""Language models: the provider interface, the request and the streamed events.

``LlmProvider.stream(request)`` returns an :class:`LlmStream`: an async iterator of
:data:`LlmEvent` and an async context manager.  A response streams as

* :class:`TextDelta` pieces of the spoken answer, in order;
* :class:`ToolCallDelta` fragments of tool calls, keyed by ``index`` (the call's position
  in the response).  ``id`` and ``name`` may come on any fragment (first non-empty wins);
  ``arguments_fragment`` pieces concatenate to the call's JSON arguments, split anywhere;
  fragments of different calls and text may interleave.  ``provider_data`` (a signature
  to echo back with the call) comes whole on one fragment;
* :class:`ProviderDataDelta` for data that belongs to the whole response;
* exactly one terminal event: :class:`Done` (finish reason and token usage) or
  :class:`LlmError`.  Nothing follows it.

The three deltas are ``brisvox.agent.assemble``'s own types (re-exported here): the runner
pushes them into the response assembler as they come, which buffers the fragments and
parses them once at the end; nothing here parses arguments.

The stream is pull-based: nothing is read from the network faster than the consumer
iterates (the buffer is the socket's).  Leaving ``async with`` or ``aclose()`` cancels the
request; a stream that is never iterated sends nothing.
"""

from __future__ import annotations

import enum
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from types import TracebackType
from typing import ClassVar, Protocol, Self, runtime_checkable

from brisvox.agent import Message, ToolSpec
from brisvox.agent.assemble import ProviderDataDelta, TextDelta, ToolCallDelta
from brisvox.core.errors import InvalidInput
from brisvox.providers.errors import ProviderError, ProviderErrorKind

__all__ = [
    "Done",
    "FinishReason",
    "GeneratorLlmStream",
    "LlmError",
    "LlmEvent",
    "LlmProvider",
    "LlmRequest",
    "LlmStream",
    "PrefixWarm",
    "ProviderDataDelta",
    "TextDelta",
    "ToolCallDelta",
    "ToolChoice",
    "ToolChoiceMode",
    "Usage",
]


class ToolChoiceMode(enum.Enum):
    AUTO = "auto"  # the model decides
    NONE = "none"  # no tool call allowed
    REQUIRED = "required"  # some tool call required
    TOOL = "tool"  # this one tool (``ToolChoice.name``)


@dataclass(frozen=True, slots=True)
class ToolChoice:
    """Whether and which tool the model must call.  Build with the class methods."""

    mode: ToolChoiceMode = ToolChoiceMode.AUTO
    name: str | None = None

    AUTO: ClassVar[ToolChoice]
    NONE: ClassVar[ToolChoice]
    REQUIRED: ClassVar[ToolChoice]

    def __post_init__(self) -> None:
        if (self.mode is ToolChoiceMode.TOOL) != (self.name is not None):
            raise InvalidInput(f"tool choice {self.mode.value!r} needs a tool name exactly when forced, got {self.name!r}")

    @classmethod
    def tool(cls, name: str) -> ToolChoice:
        return cls(ToolChoiceMode.TOOL, name)


ToolChoice.AUTO = ToolChoice(ToolChoiceMode.AUTO)
ToolChoice.NONE = ToolChoice(ToolChoiceMode.NONE)
ToolChoice.REQUIRED = ToolChoice(ToolChoiceMode.REQUIRED)


@dataclass(frozen=True, slots=True, kw_only=True)
class LlmRequest:
    """One model request: the context's messages, the tools on offer, and sampling limits."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    tool_choice: ToolChoice = ToolChoice.AUTO
    max_tokens: int | None = None
    temperature: float | None = None
    # The agent's tools as a prompt describes them, whatever this request offers (empty: the
    # offered ones).  A provider that writes the tools into its prompt (the embedded LLM)
    # describes these, so the prompt's prefix stays the same while the offer follows the
    # state (docs/TOOLS.md, "Offered now"); the offer itself is ``tools``.
    described: tuple[ToolSpec, ...] = ()

    def __post_init__(self) -> None:
        names = [t.name for t in self.tools]
        if len(set(names)) != len(names):
            raise InvalidInput(f"LlmRequest: tool names must be unique, got {sorted(names)}")
        if self.tool_choice.name is not None and self.tool_choice.name not in names:
            raise InvalidInput(f"LlmRequest: forced tool {self.tool_choice.name!r} is not among the tools {names}")
        if self.tool_choice.mode is ToolChoiceMode.REQUIRED and not self.tools:
            raise InvalidInput("LlmRequest: tool choice 'required' with no tools")
        if self.max_tokens is not None and self.max_tokens < 1:
            raise InvalidInput(f"LlmRequest: max_tokens must be at least 1, got {self.max_tokens}")

    def tool(self, name: str) -> ToolSpec | None:
        """The offered tool of that name, if any (adapters use it to accept only declared names)."""
        return next((t for t in self.tools if t.name == name), None)

    def __repr__(self) -> str:
        return f"LlmRequest(<{len(self.messages)} messages>, tools={[t.name for t in self.tools]}, {self.tool_choice.mode.value})"


class FinishReason(enum.Enum):
    STOP = "stop"  # the model finished its answer
    TOOL_CALLS = "tool_calls"  # the model stopped to have tools run
    LENGTH = "length"  # max_tokens or the context window cut it off
    CONTENT_FILTER = "content_filter"
    OTHER = "other"


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0  # part of input_tokens served from the provider's prompt cache


@dataclass(frozen=True, slots=True, kw_only=True)
class Done:
    finish_reason: FinishReason
    usage: Usage | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class LlmError:
    error: ProviderError


LlmEvent = TextDelta | ToolCallDelta | ProviderDataDelta | Done | LlmError


class LlmStream(Protocol):
    """One streamed response; an async iterator of :data:`LlmEvent` and an async context manager."""

    async def aclose(self) -> None:
        """Cancel the request (idempotent)."""
        ...

    def __aiter__(self) -> Self: ...

    async def __anext__(self) -> LlmEvent: ...

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


class LlmProvider(Protocol):
    """Streams model responses.  Adapters subclass this Protocol explicitly to inherit :meth:`warm`."""

    @property
    def name(self) -> str: ...

    def stream(self, request: LlmRequest) -> LlmStream:
        """Start a response (lazily: the request is sent on the first iteration)."""
        ...

    async def warm(self) -> None:
        """Prepare ahead of the first request (pool a connection, load a model).  Default: nothing."""
        return None


@runtime_checkable
class PrefixWarm(Protocol):
    """An LLM that can evaluate a prompt's prefix ahead of the first request and keep it
    (a local model's prompt cache): the server warms it with the agent's system prompt and
    tools, so the first turn of every call pays only for the caller's words."""

    async def warm_prefix(self, request: LlmRequest) -> None:
        """Evaluate ``request``'s prompt once and keep it for later requests that begin the same way."""
        ...

    async def prefill(self, request: LlmRequest) -> bool:
        """Evaluate ``request``'s prompt only if the model is idle, giving way to any real
        request (the runner sends the caller's words at a pause, before the turn ends);
        whether it ran."""
        ...


class GeneratorLlmStream:
    """An :class:`LlmStream` over an async generator of events: how adapters usually write one.

    It enforces the stream's contract for the adapter: iteration stops after the first
    terminal event (:class:`Done` or :class:`LlmError`, the generator is closed then); a
    generator that ends without one yields an :class:`LlmError` of kind ``protocol``; a
    :class:`ProviderError` raised by the generator becomes an :class:`LlmError` event.
    ``aclose`` closes the generator, which cancels whatever request it has in flight.
    """

    __slots__ = ("_done", "_gen", "_provider")

    def __init__(self, provider: str, gen: AsyncGenerator[LlmEvent, None]) -> None:
        self._provider = provider
        self._gen = gen
        self._done = False

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> LlmEvent:
        if self._done:
            raise StopAsyncIteration
        try:
            event = await anext(self._gen)
        except StopAsyncIteration:
            self._done = True
            return LlmError(
                error=ProviderError(self._provider, ProviderErrorKind.PROTOCOL, "stream ended without a finish")
            )
        except ProviderError as exc:
            self._done = True
            await self._gen.aclose()
            return LlmError(error=exc)
        if isinstance(event, Done | LlmError):
            self._done = True
            await self._gen.aclose()
        return event

    async def aclose(self) -> None:
        self._done = True
        await self._gen.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
