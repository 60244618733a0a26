"""The resilience layer every provider runs behind: deadlines, bounded retries, typed errors.

Three deadlines apply to every network provider, all measured on the injected clock:

* ``connect_timeout`` (5 s): opening the connection (TCP, TLS, HTTP headers or the
  WebSocket upgrade);
* ``first_token_timeout`` (8 s): from the request (or a TTS flush) to the first event;
* ``idle_timeout`` (15 s): between two events of a stream that is still running.

A deadline that runs out is a :class:`~brisvox.providers.errors.ProviderError` of kind
``timeout``.  Retries are bounded and only where nothing can have had an effect:

* an LLM request is retried only when it failed before any event reached the caller and
  the failure says the request was not processed (connect errors, rate limits, 5xx before
  the stream started); a timeout or a cut stream is never retried (the model may have
  produced tool calls we did not see, and the latency budget is gone anyway);
* STT and TTS *sessions* reconnect with exponential backoff (bounded attempts) when the
  connection drops; a TTS context that was in flight is failed, never replayed (part of
  it may already have been heard).

:func:`brisvox.core.clock.deadline` is the one timeout primitive: ``async with deadline(clock, 5.0, "connect")``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import TypeVar

from brisvox.core.clock import Clock
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.providers.errors import ProviderError, ProviderErrorKind

__all__ = [
    "DEFAULT_POLICY",
    "ResiliencePolicy",
    "guarded",
    "not_processed",
    "retry_before_effect",
    "timeout_error",
]

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, kw_only=True)
class ResiliencePolicy:
    """Deadlines (seconds) and the retry/reconnect budget of one provider."""

    connect_timeout: float = 5.0
    first_token_timeout: float = 8.0
    idle_timeout: float = 15.0
    close_timeout: float = 2.0
    max_attempts: int = 3  # connects of one request or one reconnect cycle, the first included
    max_reconnects: int = 10  # reconnects of one session in all; the next drop ends it (a flapping link)
    backoff_initial: float = 0.25
    backoff_multiplier: float = 2.0
    backoff_max: float = 4.0

    def __post_init__(self) -> None:
        for name in ("connect_timeout", "first_token_timeout", "idle_timeout", "close_timeout"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"ResiliencePolicy.{name} must be positive, got {getattr(self, name)}")
        if self.max_reconnects < 0:
            raise ConfigError(f"ResiliencePolicy.max_reconnects must not be negative, got {self.max_reconnects}")
        if self.max_attempts < 1:
            raise ConfigError(f"ResiliencePolicy.max_attempts must be at least 1, got {self.max_attempts}")
        if self.backoff_initial < 0 or self.backoff_multiplier < 1 or self.backoff_max < 0:
            raise ConfigError("ResiliencePolicy backoff values must be non-negative (multiplier >= 1)")

    def backoff(self, attempt: int) -> float:
        """The pause before attempt ``attempt`` (2 is the first retry)."""
        if attempt <= 1:
            return 0.0
        return min(self.backoff_max, self.backoff_initial * self.backoff_multiplier ** (attempt - 2))


DEFAULT_POLICY = ResiliencePolicy()


def timeout_error(provider: str, what: str, seconds: float) -> ProviderError:
    return ProviderError(provider, ProviderErrorKind.TIMEOUT, f"{what} took longer than {seconds:g} s")


def not_processed(error: ProviderError) -> bool:
    """The request surely had no effect: it never got through, or was refused before work began."""
    return error.kind in (ProviderErrorKind.CONNECT, ProviderErrorKind.RATE_LIMITED) or (
        error.kind is ProviderErrorKind.SERVER and error.status is not None
    )


async def retry_before_effect(
    clock: Clock, policy: ResiliencePolicy, attempt_fn: Callable[[], Awaitable[T]]
) -> T:
    """Run ``attempt_fn`` up to ``policy.max_attempts`` times while it fails before any effect.

    Only errors that prove the request was not processed are retried (see the module docs);
    a server's ``retry_after`` replaces the backoff when it is longer.
    """
    attempt = 1
    while True:
        try:
            return await attempt_fn()
        except ProviderError as exc:
            if attempt >= policy.max_attempts or not not_processed(exc):
                raise
            attempt += 1
            pause = policy.backoff(attempt)
            if exc.retry_after is not None:
                pause = max(pause, min(exc.retry_after, policy.backoff_max))
            await clock.sleep(pause)


async def guarded(
    provider: str, body: Coroutine[object, object, None], report: Callable[[ProviderError], Awaitable[None]]
) -> None:
    """Run a session's background task so that its reader never waits on a dead task.

    A ``ProviderError`` escaping the task, or any unexpected exception (reported as kind
    ``protocol``), is handed to ``report``, which emits the session's fatal error event and
    ends its stream.  Cancellation and a closed event channel (the session is gone) end quietly.
    """
    try:
        await body
    except ChannelClosed:
        return
    except ProviderError as exc:
        await _report(report, exc)
    except Exception as exc:
        log.warning("%s: a background task failed (%s)", provider, type(exc).__name__)
        await _report(report, ProviderError(provider, ProviderErrorKind.PROTOCOL, f"internal failure ({type(exc).__name__})"))


async def _report(report: Callable[[ProviderError], Awaitable[None]], error: ProviderError) -> None:
    with contextlib.suppress(ChannelClosed):
        await report(error)
