"""Vendor failures as typed provider errors (shared by the HTTP and WebSocket plumbing)."""

from __future__ import annotations

import json
from collections.abc import Mapping

from brisvox.providers.errors import ProviderError, ProviderErrorKind

__all__ = ["error_from_status", "retry_after_header", "vendor_message"]


def vendor_message(body: bytes) -> str:
    """The vendor's own error text from a JSON error body (OpenAI, Anthropic and Gemini shapes)."""
    text = body.decode("utf-8", errors="replace")
    try:
        obj = json.loads(text)
    except ValueError:
        return text[:200]
    if isinstance(obj, list) and obj:
        obj = obj[0]
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("type") or err.get("status")
            if isinstance(msg, str):
                return msg[:200]
        elif isinstance(err, str):
            return err[:200]
    return text[:200]


def retry_after_header(headers: Mapping[str, str]) -> float | None:
    raw = headers.get("retry-after")
    if raw is None:
        return None
    try:
        return max(0.0, float(raw))
    except ValueError:
        return None


def error_from_status(provider: str, status: int, message: str, retry_after: float | None = None) -> ProviderError:
    if status in (401, 403):
        kind = ProviderErrorKind.AUTH
    elif status == 429:
        kind = ProviderErrorKind.RATE_LIMITED
    elif status >= 500:
        kind = ProviderErrorKind.SERVER
    else:
        kind = ProviderErrorKind.INVALID_REQUEST
    return ProviderError(provider, kind, message or "request refused", status=status, retry_after=retry_after)
