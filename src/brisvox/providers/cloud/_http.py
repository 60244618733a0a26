"""HTTP streaming shared by the cloud adapters: one pooled httpx client, deadlines, error kinds.

httpx's own timeouts are switched off: every wait is bounded by
:func:`brisvox.providers.resilient.deadline` on the injected clock, with the phases of the
resilience policy (connect until the response headers, first token, idle between chunks).
Vendor failures become :class:`~brisvox.providers.errors.ProviderError` with a kind taken
from the HTTP status; a vendor's error text is cut to 200 characters and never carries a
credential (headers are not logged).
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import httpx

from brisvox.core.clock import Clock, deadline
from brisvox.core.errors import DeadlineExceeded
from brisvox.providers.cloud._errors import error_from_status, retry_after_header, vendor_message
from brisvox.providers.cloud._sse import SseDecoder, SseEvent
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.resilient import ResiliencePolicy, timeout_error

__all__ = ["HttpStreamer", "StreamState"]

log = logging.getLogger(__name__)

MAX_ERROR_BODY = 64 * 1024


@dataclass(slots=True)
class StreamState:
    """What the deadlines need to know about one response: when it started, whether a token came."""

    started_at: float
    got_first: bool = False


class HttpStreamer:
    """Opens streaming POSTs for one adapter and reads their bodies under the policy's deadlines."""

    def __init__(
        self, provider: str, clock: Clock, policy: ResiliencePolicy, client: httpx.AsyncClient | None = None
    ) -> None:
        self.provider = provider
        self.clock = clock
        self.policy = policy
        self._own_client = client is None
        self._client = client if client is not None else _new_client()

    @property
    def client(self) -> httpx.AsyncClient:
        return self._client

    async def aclose(self) -> None:
        if self._own_client:
            await self._client.aclose()

    async def open(
        self, url: str, headers: Mapping[str, str], body: Any, state: StreamState
    ) -> httpx.Response:
        """POST ``body`` as JSON; return the streaming response once its 2xx headers arrived."""
        policy = self.policy
        budget = min(policy.connect_timeout, state.started_at + policy.first_token_timeout - self.clock.now())
        request = self._client.build_request("POST", url, headers=dict(headers), content=_dumps(body))
        response: httpx.Response | None = None
        try:
            async with deadline(self.clock, max(budget, 0.0), "connect"):
                response = await self._client.send(request, stream=True)
                if response.status_code >= 300:
                    raw = await _read_bounded(response)
                    raise error_from_status(
                        self.provider, response.status_code, vendor_message(raw), retry_after_header(response.headers)
                    )
        except DeadlineExceeded:
            await _close_quietly(response)
            raise timeout_error(self.provider, "connecting and receiving the response headers", budget) from None
        except ProviderError:
            await _close_quietly(response)
            raise
        except httpx.HTTPError as exc:
            await _close_quietly(response)
            raise _transport_error(self.provider, exc, connecting=True) from None
        assert response is not None
        return response

    async def warm(self, url: str, headers: Mapping[str, str]) -> bool:
        """Open a pooled keep-alive connection ahead of the first request (one cheap GET).

        The answer is read and ignored (a 401 still leaves the connection warm); any failure
        only means the first request pays the connect.  True when a response came back.
        """
        try:
            async with deadline(self.clock, self.policy.connect_timeout, "warm"):
                response = await self._client.get(url, headers=dict(headers))
                await response.aread()
        except (DeadlineExceeded, httpx.HTTPError) as exc:
            log.debug("%s: warm-up failed (%s); the first request will connect", self.provider, type(exc).__name__)
            return False
        return True

    async def chunks(self, response: httpx.Response, state: StreamState) -> AsyncGenerator[bytes, None]:
        """The raw body, each read bounded by the first-token or the idle deadline."""
        policy = self.policy
        raw = response.aiter_raw()
        try:
            while True:
                if state.got_first:
                    limit, what = policy.idle_timeout, "waiting for the next stream event"
                else:
                    limit = state.started_at + policy.first_token_timeout - self.clock.now()
                    what = "waiting for the first token"
                try:
                    async with deadline(self.clock, max(limit, 0.0), what):
                        chunk = await raw.__anext__()
                except StopAsyncIteration:
                    return
                except DeadlineExceeded:
                    seconds = policy.idle_timeout if state.got_first else policy.first_token_timeout
                    raise timeout_error(self.provider, what, seconds) from None
                except httpx.HTTPError as exc:
                    raise _transport_error(self.provider, exc, connecting=False) from None
                yield chunk
        finally:
            await _close_quietly(response)
            await _finish_iterator(raw)

    async def sse(self, response: httpx.Response, state: StreamState) -> AsyncGenerator[SseEvent, None]:
        """Server-sent events of the body; raises ``closed`` when the body ends inside an event."""
        decoder = SseDecoder()
        gen = self.chunks(response, state)
        try:
            async for chunk in gen:
                try:
                    events = decoder.feed(chunk)
                except ValueError as exc:
                    raise ProviderError(self.provider, ProviderErrorKind.PROTOCOL, str(exc)) from None
                for event in events:
                    yield event
        finally:
            await gen.aclose()


def _dumps(body: Any) -> bytes:
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


def _new_client() -> httpx.AsyncClient:
    return httpx.AsyncClient(
        timeout=httpx.Timeout(None),
        limits=httpx.Limits(max_connections=100, max_keepalive_connections=20, keepalive_expiry=60.0),
    )


async def _read_bounded(response: httpx.Response) -> bytes:
    out = bytearray()
    raw = response.aiter_raw()
    try:
        async for chunk in raw:
            out += chunk
            if len(out) >= MAX_ERROR_BODY:
                break
    finally:
        await _close_quietly(response)
        await _finish_iterator(raw)
    return bytes(out[:MAX_ERROR_BODY])


async def _finish_iterator(raw: AsyncIterator[bytes]) -> None:
    """Run httpx's nested body generators to their end after the response was closed.

    Closing only the outer generator would leave the inner ones suspended; the loop then
    finalizes them later in tasks of its own.  Resumed after ``response.aclose()`` they
    fail at once on the closed stream and finish in place.
    """
    for _ in range(3):
        try:
            await raw.__anext__()
        except Exception:  # StopAsyncIteration or the closed stream's error: finished
            return


async def _close_quietly(response: httpx.Response | None) -> None:
    if response is not None:
        with contextlib.suppress(Exception):
            await response.aclose()


def _transport_error(provider: str, exc: httpx.HTTPError, *, connecting: bool) -> ProviderError:
    name = type(exc).__name__
    if connecting and isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | httpx.UnsupportedProtocol):
        return ProviderError(provider, ProviderErrorKind.CONNECT, f"could not connect ({name})")
    if isinstance(exc, httpx.TimeoutException):
        return ProviderError(provider, ProviderErrorKind.TIMEOUT, f"transport timeout ({name})")
    if connecting and not isinstance(exc, httpx.RemoteProtocolError | httpx.ReadError):
        return ProviderError(provider, ProviderErrorKind.CONNECT, f"request failed ({name})")
    return ProviderError(provider, ProviderErrorKind.CLOSED, f"the connection ended mid-response ({name})")
