"""The resilience layer as wrappers around *any* provider (local models and mocks included).

The cloud adapters apply :mod:`brisvox.providers.resilient` inside (they know their
connection phases).  These wrappers give every other provider the same guarantees from
the outside, so the engine can run each call's providers behind one layer:

* :class:`ResilientLlm`: a first-token deadline from the request and an idle deadline
  between events; a stream whose *first* event is an error proving the request was not
  processed (connect, rate limit, 5xx status) is retried with backoff; nothing is retried
  once a delta was delivered, and a stream that ends without a finish is a protocol error.
* :class:`ResilientStt`: connect under the connect deadline with bounded retries; when the
  session fails with a retryable fatal error, a non-fatal ``SttError`` is reported and a new
  session is opened with backoff (audio sent meanwhile is dropped and counted); transcript
  times stay continuous across sessions.
* :class:`ResilientTts`: connect likewise; when the session fails with a retryable fatal
  error, every context in flight gets a non-fatal ``TtsError`` (never replayed) and a new
  session serves the contexts that follow.  Cancel stays synchronous.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable
from typing import Protocol, TypeVar

from brisvox.core.clock import Clock, deadline
from brisvox.core.errors import ChannelClosed, DeadlineExceeded
from brisvox.core.tasks import TaskScope
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.llm import (
    Done,
    GeneratorLlmStream,
    LlmError,
    LlmEvent,
    LlmProvider,
    LlmRequest,
    LlmStream,
    TextDelta,
    ToolCallDelta,
)
from brisvox.providers.resilient import (
    DEFAULT_POLICY,
    ResiliencePolicy,
    guarded,
    not_processed,
    timeout_error,
)
from brisvox.providers.session import SessionBase
from brisvox.providers.stt import SttConfig, SttError, SttEvent, SttProvider, SttSession, Transcript
from brisvox.providers.tts import (
    TtsCancelled,
    TtsConfig,
    TtsError,
    TtsFlushed,
    TtsProvider,
    TtsSession,
    TtsSessionBase,
)

__all__ = ["ResilientLlm", "ResilientStt", "ResilientTts"]

log = logging.getLogger(__name__)
S = TypeVar("S")


async def _connect(
    name: str, clock: Clock, policy: ResiliencePolicy, opener: Callable[[], Awaitable[S]]
) -> S:
    async def attempt() -> S:
        try:
            async with deadline(clock, policy.connect_timeout, "connect"):
                return await opener()
        except DeadlineExceeded:
            raise timeout_error(name, "connecting", policy.connect_timeout) from None

    async def with_retries() -> S:
        tries = 1
        while True:
            try:
                return await attempt()
            except ProviderError as exc:
                # Opening a session has no effect a retry could repeat: every retryable kind qualifies.
                if tries >= policy.max_attempts or not exc.retryable:
                    raise
                tries += 1
                await clock.sleep(policy.backoff(tries))

    return await with_retries()


class _Named(Protocol):
    @property
    def name(self) -> str: ...

    async def warm(self) -> None: ...


class _Wrapped:
    """What the three wrappers share: the inner provider, the clock, the policy, name and warm."""

    def __init__(self, inner: _Named, clock: Clock, policy: ResiliencePolicy = DEFAULT_POLICY) -> None:
        self._inner_any = inner
        self._clock = clock
        self._policy = policy

    @property
    def name(self) -> str:
        return self._inner_any.name

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._inner_any!r})"

    async def warm(self) -> None:
        await self._inner_any.warm()


# --- LLM -------------------------------------------------------------------------------------


class ResilientLlm(_Wrapped, LlmProvider):
    def __init__(self, inner: LlmProvider, clock: Clock, policy: ResiliencePolicy = DEFAULT_POLICY) -> None:
        super().__init__(inner, clock, policy)
        self._inner = inner

    def stream(self, request: LlmRequest) -> LlmStream:
        return GeneratorLlmStream(self.name, self._run(request))

    async def _run(self, request: LlmRequest) -> AsyncGenerator[LlmEvent, None]:
        policy, clock = self._policy, self._clock
        attempt = 1
        started = clock.now()
        while True:
            stream = self._inner.stream(request)
            got_first = False
            retry: ProviderError | None = None
            try:
                while True:
                    if got_first:
                        limit, what = policy.idle_timeout, "waiting for the next stream event"
                    else:
                        limit, what = started + policy.first_token_timeout - clock.now(), "waiting for the first token"
                    try:
                        async with deadline(clock, max(limit, 0.0), what):
                            event = await anext(stream)
                    except StopAsyncIteration:
                        raise ProviderError(self.name, ProviderErrorKind.PROTOCOL, "stream ended without a finish") from None
                    except DeadlineExceeded:
                        seconds = policy.idle_timeout if got_first else policy.first_token_timeout
                        yield LlmError(error=timeout_error(self.name, what, seconds))
                        return
                    if (
                        isinstance(event, LlmError)
                        and not got_first
                        and attempt < policy.max_attempts
                        and not_processed(event.error)
                    ):
                        retry = event.error
                        break
                    if isinstance(event, TextDelta | ToolCallDelta):
                        got_first = True
                    yield event
                    if isinstance(event, Done | LlmError):
                        return
            finally:
                await stream.aclose()
            attempt += 1
            pause = policy.backoff(attempt)
            if retry.retry_after is not None:
                pause = max(pause, min(retry.retry_after, policy.backoff_max))
            log.debug("%s: retrying a request that was not processed (%s)", self.name, retry.kind.value)
            await clock.sleep(pause)
            started = clock.now()


# --- STT -------------------------------------------------------------------------------------


class ResilientStt(_Wrapped, SttProvider):
    def __init__(self, inner: SttProvider, clock: Clock, policy: ResiliencePolicy = DEFAULT_POLICY) -> None:
        super().__init__(inner, clock, policy)
        self._inner = inner

    async def connect(self, config: SttConfig) -> _ResilientSttSession:
        inner = await _connect(self.name, self._clock, self._policy, lambda: self._inner.connect(config))
        return _ResilientSttSession(self, inner, config)


class _ResilientSttSession(SessionBase[SttEvent]):
    def __init__(self, owner: ResilientStt, inner: SttSession, config: SttConfig) -> None:
        super().__init__(name=f"resilient {owner.name} stt")
        self._owner = owner
        self._inner: SttSession | None = inner
        self._config = config
        self._offset = 0.0
        self._sent = 0.0  # seconds of audio sent to the current inner session
        self._scope = TaskScope(f"resilient {owner.name} stt")
        self.reconnects = 0
        self.dropped_audio_bytes = 0
        self._scope.spawn(guarded(owner.name, self._pump(), self._fatal), name="pump")

    async def _fatal(self, error: ProviderError) -> None:
        await self._emit(SttError(error=error, fatal=True))
        self._finish()

    async def send_audio(self, pcm: bytes) -> None:
        self._check_open()
        inner = self._inner
        if inner is None:
            self.dropped_audio_bytes += len(pcm)
            return
        try:
            await inner.send_audio(pcm)
        except (ChannelClosed, ProviderError):
            self.dropped_audio_bytes += len(pcm)
            return
        self._sent += len(pcm) / (2 * self._config.sample_rate)

    async def finalize(self) -> None:
        self._check_open()
        inner = self._inner
        if inner is not None:
            with contextlib.suppress(ChannelClosed, ProviderError):
                await inner.finalize()

    async def _pump(self) -> None:
        owner = self._owner
        while True:
            inner = self._inner
            assert inner is not None
            failure: ProviderError | None = None
            async for event in inner:
                if isinstance(event, Transcript) and self._offset:
                    event = _shift(event, self._offset)
                elif isinstance(event, SttError) and event.fatal:
                    failure = event.error
                    break
                await self._emit(event)
            self._inner = None
            with contextlib.suppress(Exception):
                await inner.aclose()
            if failure is None:
                self._finish()
                return
            if not failure.retryable or self.reconnects >= owner._policy.max_reconnects:
                await self._emit(SttError(error=failure, fatal=True))
                self._finish()
                return
            await self._emit(SttError(error=failure, fatal=False))
            self._offset += self._sent
            self._sent = 0.0
            try:
                await owner._clock.sleep(owner._policy.backoff(2))
                self._inner = await _connect(
                    owner.name, owner._clock, owner._policy, lambda: owner._inner.connect(self._config)
                )
            except ProviderError as exc:
                await self._emit(SttError(error=exc, fatal=True))
                self._finish()
                return
            self.reconnects += 1

    async def _shutdown(self) -> None:
        inner = self._inner
        self._inner = None
        self._scope.cancel()
        with contextlib.suppress(Exception):
            await self._scope.aclose()
        if inner is not None:
            with contextlib.suppress(Exception):
                await inner.aclose()


def _shift(t: Transcript, offset: float) -> Transcript:
    return Transcript(
        text=t.text, is_final=t.is_final, speech_final=t.speech_final, from_finalize=t.from_finalize,
        start=t.start + offset, end=t.end + offset, confidence=t.confidence, language=t.language,
    )


# --- TTS -------------------------------------------------------------------------------------


class ResilientTts(_Wrapped, TtsProvider):
    def __init__(self, inner: TtsProvider, clock: Clock, policy: ResiliencePolicy = DEFAULT_POLICY) -> None:
        super().__init__(inner, clock, policy)
        self._inner = inner

    async def connect(self, config: TtsConfig) -> _ResilientTtsSession:
        inner = await _connect(self.name, self._clock, self._policy, lambda: self._inner.connect(config))
        return _ResilientTtsSession(self, inner, config)


class _ResilientTtsSession(TtsSessionBase):
    def __init__(self, owner: ResilientTts, inner: TtsSession, config: TtsConfig) -> None:
        super().__init__(name=f"resilient {owner.name} tts")
        self._owner = owner
        self._inner: TtsSession | None = inner
        self._config = config
        self._in_flight: set[int] = set()  # contexts with text on the current inner session
        self._lost: set[int] = set()  # contexts failed with a lost session: the rest of them is ignored
        self._ready = asyncio.Event()
        self._ready.set()
        self._scope = TaskScope(f"resilient {owner.name} tts")
        self.reconnects = 0
        self._scope.spawn(guarded(owner.name, self._pump(), self._fatal), name="pump")

    async def _fatal(self, error: ProviderError) -> None:
        await self._emit(TtsError(error=error, fatal=True))
        self._finish()
        self._ready.set()

    async def _current(self) -> TtsSession | None:
        await self._ready.wait()
        return self._inner

    async def send_text(self, context_id: int, text: str) -> None:
        self._check_open()
        if self.is_cancelled(context_id) or context_id in self._lost:
            return
        inner = await self._current()
        if inner is None:
            return
        self._in_flight.add(context_id)
        with contextlib.suppress(ChannelClosed, ProviderError):
            await inner.send_text(context_id, text)

    async def flush(self, context_id: int) -> None:
        self._check_open()
        if self.is_cancelled(context_id) or context_id in self._lost:
            return
        inner = await self._current()
        if inner is None:
            return
        self._in_flight.add(context_id)
        with contextlib.suppress(ChannelClosed, ProviderError):
            await inner.flush(context_id)

    def _on_cancel(self, context_id: int) -> None:
        self._in_flight.discard(context_id)
        inner = self._inner
        if inner is not None:
            with contextlib.suppress(ChannelClosed, ProviderError):
                inner.cancel(context_id)

    async def _pump(self) -> None:
        owner = self._owner
        while True:
            inner = self._inner
            assert inner is not None
            failure: ProviderError | None = None
            async for event in inner:
                if isinstance(event, TtsCancelled):
                    continue  # ours went out when cancel() was called
                if isinstance(event, TtsError) and event.fatal:
                    failure = event.error
                    break
                if isinstance(event, TtsFlushed | TtsError) and event.context_id is not None:
                    self._in_flight.discard(event.context_id)
                await self._emit(event)
            self._ready.clear()
            self._inner = None
            with contextlib.suppress(Exception):
                await inner.aclose()
            if failure is None:
                self._finish()
                return
            for ctx in sorted(self._in_flight):
                if not self.is_cancelled(ctx):
                    lost = ProviderError(owner.name, failure.kind, f"context lost with the session: {failure}")
                    await self._emit(TtsError(error=lost, context_id=ctx, fatal=False))
                    self._lost.add(ctx)
            self._in_flight.clear()
            if not failure.retryable or self.reconnects >= owner._policy.max_reconnects:
                await self._emit(TtsError(error=failure, fatal=True))
                self._finish()
                self._ready.set()
                return
            try:
                await owner._clock.sleep(owner._policy.backoff(2))
                self._inner = await _connect(
                    owner.name, owner._clock, owner._policy, lambda: owner._inner.connect(self._config)
                )
            except ProviderError as exc:
                await self._emit(TtsError(error=exc, fatal=True))
                self._finish()
                self._ready.set()
                return
            self.reconnects += 1
            self._ready.set()

    async def _shutdown(self) -> None:
        inner = self._inner
        self._inner = None
        self._ready.set()
        self._scope.cancel()
        with contextlib.suppress(Exception):
            await self._scope.aclose()
        if inner is not None:
            with contextlib.suppress(Exception):
                await inner.aclose()

