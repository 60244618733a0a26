"""What the three streaming LLM adapters share: the request loop and the context walk.

Each vendor module supplies two pure pieces, both testable without a socket:

* a request builder: our :class:`~brisvox.providers.llm.LlmRequest` (context messages and
  tool specs) to the vendor's JSON body;
* a stream decoder: the vendor's server-sent events to our
  :data:`~brisvox.providers.llm.LlmEvent` deltas.

:class:`SseLlm` runs them: it opens the request (retried only while nothing can have had
an effect, see :mod:`brisvox.providers.resilient`), reads the events under the first-token
and idle deadlines, and ends with exactly one ``Done`` or ``LlmError``.

:func:`conversation` walks a context once for the builders: tool results come grouped
right after the assistant message that issued the calls, **in call order** whatever
order they were pushed in, each paired with its call (so a builder knows the provider's
id and the tool name).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from brisvox.agent import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from brisvox.core.clock import Clock
from brisvox.providers.cloud._errors import vendor_text
from brisvox.providers.cloud._http import HttpStreamer, StreamState
from brisvox.providers.cloud._sse import SseEvent
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.llm import (
    Done,
    GeneratorLlmStream,
    LlmEvent,
    LlmProvider,
    LlmRequest,
    LlmStream,
    TextDelta,
    ToolCallDelta,
)
from brisvox.providers.resilient import ResiliencePolicy, retry_before_effect

__all__ = [
    "Results",
    "SseLlm",
    "StreamDecoder",
    "conversation",
    "json_event",
    "parse_json_object",
    "stream_error",
    "vendor_data",
    "wire_id",
]


@dataclass(frozen=True, slots=True)
class Results:
    """The answers to one assistant message's calls, in call order."""

    pairs: tuple[tuple[ToolCall, ToolMessage], ...]


Turn = SystemMessage | UserMessage | AssistantMessage | Results


def conversation(messages: Sequence[Message]) -> Iterator[Turn]:
    """The messages with each run of tool results grouped and sorted into call order."""
    calls: dict[str, tuple[int, ToolCall]] = {}
    pending: list[tuple[int, ToolCall, ToolMessage]] = []

    def flush() -> Iterator[Turn]:
        if pending:
            pending.sort(key=lambda item: item[0])
            yield Results(tuple((call, msg) for _, call, msg in pending))
            pending.clear()

    for message in messages:
        if isinstance(message, ToolMessage):
            found = calls.get(message.call_id)
            if found is None:
                # An answer without its call (a window cut the call off): skip, the vendor would refuse it.
                continue
            pending.append((found[0], found[1], message))
            continue
        yield from flush()
        if isinstance(message, AssistantMessage):
            calls = {call.id: (i, call) for i, call in enumerate(message.tool_calls)}
        yield message
    yield from flush()


def wire_id(call: ToolCall) -> str:
    """The id the vendor knows the call by: its own when it gave one, else our internal id."""
    return call.provider_id or call.id


def parse_json_object(text: str) -> Any:
    """A tool result's content as JSON when it is JSON, else the text itself."""
    try:
        return json.loads(text)
    except ValueError:
        return text


def vendor_data(value: Any, vendor: str) -> Mapping[str, Any] | None:
    """Our round-trip data for ``vendor`` inside a message's provider data (None if foreign)."""
    if isinstance(value, Mapping):
        mine = value.get(vendor)
        if isinstance(mine, Mapping):
            return mine
    return None


class StreamDecoder(Protocol):
    """Turns one vendor stream into deltas.  ``done`` is set once its terminal event came."""

    done: Done | None

    def feed(self, event: SseEvent) -> list[LlmEvent]: ...

    def end_of_body(self) -> list[LlmEvent]:
        """The body ended cleanly: the last events (Done last), or a ``closed`` error when it ended early."""
        ...


class SseLlm(LlmProvider):
    """Base of the HTTP+SSE adapters: subclasses build requests and decoders."""

    provider_name = "llm"

    def __init__(self, clock: Clock, policy: ResiliencePolicy, streamer: HttpStreamer) -> None:
        self._clock = clock
        self._policy = policy
        self._http = streamer

    @property
    def name(self) -> str:
        return self.provider_name

    def _endpoint(self, request: LlmRequest) -> tuple[str, dict[str, str], Any]:
        raise NotImplementedError

    def _decoder(self, request: LlmRequest) -> StreamDecoder:
        raise NotImplementedError

    def _warm_endpoint(self) -> tuple[str, dict[str, str]] | None:
        """A cheap GET on the vendor (its model list) and its headers; None: no warm-up."""
        return None

    async def warm(self) -> None:
        """Open the pooled connection (TCP and TLS) before the first request of a call."""
        endpoint = self._warm_endpoint()
        if endpoint is not None:
            await self._http.warm(*endpoint)

    def stream(self, request: LlmRequest) -> LlmStream:
        return GeneratorLlmStream(self.name, self._run(request))

    async def aclose(self) -> None:
        await self._http.aclose()

    async def _run(self, request: LlmRequest) -> AsyncGenerator[LlmEvent, None]:
        url, headers, body = self._endpoint(request)
        state = StreamState(started_at=self._clock.now())

        async def attempt() -> Any:
            return await self._http.open(url, headers, body, state)

        response = await retry_before_effect(self._clock, self._policy, attempt)
        decoder = self._decoder(request)
        events = self._http.sse(response, state)
        try:
            async for sse in events:
                for event in decoder.feed(sse):
                    if isinstance(event, TextDelta | ToolCallDelta):
                        state.got_first = True
                    yield event
                if decoder.done is not None:
                    yield decoder.done
                    return
        finally:
            await events.aclose()
        for event in decoder.end_of_body():
            yield event


def json_event(provider: str, data: str) -> dict[str, Any]:
    """One event's JSON object; anything else is a ``protocol`` error."""
    try:
        value = json.loads(data)
    except ValueError:
        raise ProviderError(provider, ProviderErrorKind.PROTOCOL, "a stream event is not JSON") from None
    if not isinstance(value, dict):
        raise ProviderError(provider, ProviderErrorKind.PROTOCOL, "a stream event is not a JSON object")
    return value


def stream_error(provider: str, payload: Any) -> ProviderError:
    """An error object sent inside a stream (OpenRouter, Anthropic ``error`` events)."""
    kind = ProviderErrorKind.SERVER
    message = "error event in the stream"
    status: int | None = None
    if isinstance(payload, Mapping):
        err = payload.get("error", payload)
        if isinstance(err, Mapping):
            message = vendor_text(err.get("message") or err.get("type") or message)
            etype = str(err.get("type") or err.get("code") or "")
            code = err.get("code")
            if isinstance(code, int):
                status = code
            if "rate" in etype or status == 429:
                kind = ProviderErrorKind.RATE_LIMITED
            elif "invalid" in etype or status in (400, 404, 422):
                kind = ProviderErrorKind.INVALID_REQUEST
            elif "auth" in etype or "permission" in etype or status in (401, 403):
                kind = ProviderErrorKind.AUTH
    return ProviderError(provider, kind, message, status=status)
