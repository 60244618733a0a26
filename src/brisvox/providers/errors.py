"""Typed provider errors.

Every adapter translates what its vendor library or wire protocol raised into a
:class:`ProviderError` with a :class:`ProviderErrorKind`; the engine and the resilience
layer decide on the kind (retry, fail over, give up), never on a vendor's exception type.
"""

from __future__ import annotations

import enum

from brisvox.core.errors import BrisvoxError

__all__ = ["ProviderError", "ProviderErrorKind"]


class ProviderErrorKind(enum.Enum):
    """What went wrong, as far as a caller of a provider needs to know."""

    CONNECT = "connect"  # the connection could not be opened (DNS, TCP, TLS, refused upgrade)
    TIMEOUT = "timeout"  # a bounded wait on the provider ran out
    AUTH = "auth"  # the credential was missing, wrong or lacks permission (401/403)
    RATE_LIMITED = "rate_limited"  # the provider asked us to slow down (429, quota)
    INVALID_REQUEST = "invalid_request"  # the provider refused what we sent (400, unknown voice)
    SERVER = "server"  # the provider failed on its side (5xx, overloaded)
    PROTOCOL = "protocol"  # the provider sent something we cannot parse or did not expect
    CLOSED = "closed"  # the session ended under us (disconnect mid-stream) or was already closed
    MODEL = "model"  # an embedded model failed to load or run
    BUSY = "busy"  # an embedded model is full (its pool or request queue): refused at once, not retried

    @property
    def retryable(self) -> bool:
        """Whether the same request may succeed if tried again (possibly elsewhere)."""
        return self in _RETRYABLE


_RETRYABLE = frozenset(
    {
        ProviderErrorKind.CONNECT,
        ProviderErrorKind.TIMEOUT,
        ProviderErrorKind.RATE_LIMITED,
        ProviderErrorKind.SERVER,
        ProviderErrorKind.CLOSED,
    }
)


class ProviderError(BrisvoxError):
    """A provider failed.  ``provider`` names the adapter (``"deepgram"``, ``"local-whisper"``).

    ``status`` is the HTTP or close status when there was one; ``retry_after`` the delay in
    seconds the provider asked for (rate limits).  The message never holds a credential,
    caller text or model text.
    """

    def __init__(
        self,
        provider: str,
        kind: ProviderErrorKind,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
    ) -> None:
        detail = f" (status {status})" if status is not None else ""
        super().__init__(f"{provider}: {kind.value}: {message}{detail}")
        self.provider = provider
        self.kind = kind
        self.status = status
        self.retry_after = retry_after

    @property
    def retryable(self) -> bool:
        return self.kind.retryable
