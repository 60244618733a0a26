"""WebSocket plumbing shared by the streaming STT and TTS adapters (the ``websockets`` library).

Connections open under the policy's connect deadline on the injected clock; the library's
own open timeout, keepalive pings and compression are off (the adapters send the vendor's
keepalive messages; audio does not compress).  Failures become typed provider errors:
a refused upgrade by its HTTP status, a close by its close code.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus, InvalidURI

from brisvox.core.clock import Clock, deadline
from brisvox.core.errors import DeadlineExceeded
from brisvox.providers.cloud._errors import error_from_status, vendor_text
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.resilient import ResiliencePolicy, timeout_error

__all__ = ["close_error", "close_ws", "open_ws"]

MAX_MESSAGE = 16 * 1024 * 1024


async def open_ws(
    provider: str, url: str, headers: Mapping[str, str], clock: Clock, policy: ResiliencePolicy
) -> ClientConnection:
    """Open a WebSocket within ``policy.connect_timeout``; raises ProviderError."""
    try:
        async with deadline(clock, policy.connect_timeout, "websocket connect"):
            return await connect(
                url,
                additional_headers=dict(headers),
                open_timeout=None,
                ping_interval=None,
                ping_timeout=None,
                close_timeout=policy.close_timeout,
                compression=None,
                max_size=MAX_MESSAGE,
                proxy=None,
                user_agent_header="brisvox",
            )
    except DeadlineExceeded:
        raise timeout_error(provider, "opening the websocket", policy.connect_timeout) from None
    except InvalidStatus as exc:
        status = exc.response.status_code
        body = exc.response.body.decode("utf-8", errors="replace")[:200] if exc.response.body else ""
        raise error_from_status(provider, status, body or f"upgrade refused ({status})") from None
    except InvalidURI:
        raise ProviderError(provider, ProviderErrorKind.CONNECT, "invalid websocket URL") from None
    except (InvalidHandshake, OSError) as exc:
        raise ProviderError(provider, ProviderErrorKind.CONNECT, f"could not connect ({type(exc).__name__})") from None


def close_error(provider: str, exc: ConnectionClosed) -> ProviderError:
    """The typed error for a connection the vendor (or the network) closed."""
    frame = exc.rcvd
    code = frame.code if frame is not None else 1006
    reason = vendor_text(frame.reason) if frame is not None else "no close frame"
    if code == 1008:
        kind = ProviderErrorKind.INVALID_REQUEST
    elif code in (1011, 1012, 1013, 1014):
        kind = ProviderErrorKind.SERVER
    elif code in (4001, 4003):
        kind = ProviderErrorKind.AUTH
    else:
        kind = ProviderErrorKind.CLOSED
    return ProviderError(provider, kind, f"websocket closed ({reason or 'no reason'})", status=code)


async def close_ws(ws: ClientConnection, clock: Clock, policy: ResiliencePolicy) -> None:
    """Close politely within the close timeout, then abort."""
    with contextlib.suppress(Exception):
        async with deadline(clock, policy.close_timeout, "websocket close"):
            await ws.close()
    with contextlib.suppress(Exception):
        ws.transport.abort()
