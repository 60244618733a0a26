"""A scripted language model for simulations and tests.

:class:`ScriptedLlm` answers the n-th request with the n-th script (or asks a function
for the script of each request).  A script is a sequence of steps:

* :class:`Say`: text, streamed as one :class:`TextDelta` per word (with its spacing);
* :class:`Call`: one tool call, its JSON arguments cut into ``fragments`` pieces; the first
  fragment carries the provider id and the name;
* :class:`Interleave`: several calls whose fragments alternate (round robin), the way
  parallel calls stream from some providers;
* :class:`Pause`: silence for some seconds in the middle of the response;
* :class:`Fail`: a provider error as the terminal event;
* :class:`Hang`: the model never answers again (the consumer's timeout must end it).

The response then ends with :class:`Done`: ``tool_calls`` when the script made calls,
``stop`` otherwise (or the script's own :class:`Finish`), with token usage estimated from
the request and the output (4 bytes per token).  Timing comes from a
:class:`~brisvox.sim.latency.LatencyProfile`: ``first_event`` before the first delta,
``per_event`` between deltas.  Every request is kept in ``requests`` for assertions.
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator, Callable, Iterable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from brisvox.agent import CharsPerToken
from brisvox.core.clock import Clock
from brisvox.core.errors import ConfigError
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.llm import (
    Done,
    FinishReason,
    GeneratorLlmStream,
    LlmError,
    LlmEvent,
    LlmProvider,
    LlmRequest,
    ProviderDataDelta,
    TextDelta,
    ToolCallDelta,
    Usage,
)
from brisvox.sim.latency import INSTANT, Delays, LatencyProfile

__all__ = [
    "Call",
    "Fail",
    "Finish",
    "Hang",
    "Interleave",
    "Pause",
    "Say",
    "Script",
    "ScriptedLlm",
    "Step",
]

_HANG_SLEEP = 3600.0


@dataclass(frozen=True, slots=True)
class Say:
    text: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Call:
    name: str
    arguments: dict[str, Any] | str = field(default_factory=dict)  # a str is sent verbatim (invalid JSON...)
    id: str | None = None  # the provider's id; "call_<index>" when None
    fragments: int = 3
    provider_data: Any = None

    def __post_init__(self) -> None:
        if self.fragments < 1:
            raise ConfigError(f"Call {self.name!r}: fragments must be at least 1, got {self.fragments}")

    def raw_arguments(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return json.dumps(self.arguments, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Interleave:
    calls: tuple[Call, ...]


@dataclass(frozen=True, slots=True)
class Pause:
    seconds: float


@dataclass(frozen=True, slots=True)
class Fail:
    kind: ProviderErrorKind = ProviderErrorKind.SERVER
    message: str = "scripted failure"


@dataclass(frozen=True, slots=True)
class Hang:
    """The model stops answering: the stream waits until it is closed."""


@dataclass(frozen=True, slots=True)
class Finish:
    reason: FinishReason
    provider_data: Any = None


Step = Say | Call | Interleave | Pause | Fail | Hang | Finish
Script = Sequence[Step]


class ScriptedLlm(LlmProvider):
    def __init__(
        self,
        clock: Clock,
        scripts: Iterable[Script] | Callable[[LlmRequest], Script],
        *,
        latency: LatencyProfile = INSTANT,
        name: str = "scripted-llm",
        record: bool = True,
    ) -> None:
        self._clock = clock
        self._next: Callable[[LlmRequest], Script | None]
        if callable(scripts):
            self._next = scripts
        else:
            queue = list(scripts)
            self._next = lambda _request: queue.pop(0) if queue else None
        self._delays = latency.delays()
        self._name = name
        self._record = record  # False in a server: a request kept per turn would grow without bound
        self.requests: list[LlmRequest] = []
        self.closed_streams = 0
        self.warm_calls = 0

    @property
    def name(self) -> str:
        return self._name

    async def warm(self) -> None:
        self.warm_calls += 1

    def stream(self, request: LlmRequest) -> GeneratorLlmStream:
        return GeneratorLlmStream(self._name, self._respond(request))

    async def _respond(self, request: LlmRequest) -> AsyncGenerator[LlmEvent, None]:
        if self._record:
            self.requests.append(request)
        script = self._next(request)
        try:
            if script is None:
                yield LlmError(error=ProviderError(self._name, ProviderErrorKind.PROTOCOL, "no scripted response left"))
                return
            async with aclosing(_Run(self._clock, self._delays, request).events(script, self._name)) as events:
                async for event in events:
                    yield event
        finally:
            self.closed_streams += 1


class _Run:
    """One scripted response: turns the steps into timed events."""

    def __init__(self, clock: Clock, delays: Delays, request: LlmRequest) -> None:
        self._clock = clock
        self._delays = delays
        self._request = request
        self._sent = 0
        self._calls = 0
        self._out_bytes = 0

    async def _wait(self) -> None:
        delay = self._delays.first_event() if self._sent == 0 else self._delays.per_event()
        self._sent += 1
        await self._clock.sleep(delay)

    async def events(self, script: Script, provider: str) -> AsyncGenerator[LlmEvent, None]:
        finish: Finish | None = None
        for step in script:
            match step:
                case Say(text=text):
                    for piece in re.findall(r"\s*\S+\s*|\s+", text):
                        await self._wait()
                        self._out_bytes += len(piece.encode())
                        yield TextDelta(text=piece)
                case Call():
                    for delta in self._fragments(step):
                        await self._wait()
                        yield delta
                case Interleave(calls=calls):
                    pending = [self._fragments(c) for c in calls]
                    while pending:
                        for frags in list(pending):
                            if not frags:
                                pending.remove(frags)
                                continue
                            await self._wait()
                            yield frags.pop(0)
                case Pause(seconds=seconds):
                    await self._clock.sleep(seconds)
                case Fail(kind=kind, message=message):
                    await self._wait()
                    yield LlmError(error=ProviderError(provider, kind, message))
                    return
                case Hang():
                    while True:
                        await self._clock.sleep(_HANG_SLEEP)
                case Finish():
                    finish = step
        if finish is not None and finish.provider_data is not None:
            yield ProviderDataDelta(data=finish.provider_data)
        reason = finish.reason if finish else (FinishReason.TOOL_CALLS if self._calls else FinishReason.STOP)
        await self._wait()
        yield Done(finish_reason=reason, usage=self._usage())

    def _fragments(self, call: Call) -> list[ToolCallDelta]:
        index = self._calls
        self._calls += 1
        raw = call.raw_arguments()
        self._out_bytes += len(raw.encode()) + len(call.name)
        n = max(1, min(call.fragments, len(raw)))
        cuts = [round(i * len(raw) / n) for i in range(n + 1)]
        pieces = [raw[a:b] for a, b in pairwise(cuts)]
        first = ToolCallDelta(
            index=index,
            id=call.id or f"call_{index}",
            name=call.name,
            arguments_fragment=pieces[0],
            provider_data=call.provider_data,
        )
        return [first, *(ToolCallDelta(index=index, arguments_fragment=p) for p in pieces[1:])]

    def _usage(self) -> Usage:
        estimator = CharsPerToken()
        return Usage(
            input_tokens=sum(estimator.estimate(m) for m in self._request.messages),
            output_tokens=self._out_bytes // 4,
        )
