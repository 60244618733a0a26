"""Vendor failures as typed provider errors (shared by the HTTP and WebSocket plumbing).

Every text a vendor sends about a failure (an HTTP error body, an error event in a
stream, an error frame, a close reason) goes through :func:`vendor_text` before it
becomes part of a :class:`ProviderError`: cut to :data:`MAX_VENDOR_TEXT` characters, every
secret this process holds masked (:func:`brisvox.core.secret.mask`), and anything shaped
like a credential (``Bearer ...``, ``sk-...``) masked too, since a vendor may echo a key
this process never held (a key of another account, a partly shown one).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping

from brisvox.core.secret import mask
from brisvox.providers.errors import ProviderError, ProviderErrorKind

__all__ = ["MAX_VENDOR_TEXT", "error_from_status", "retry_after_header", "vendor_message", "vendor_text"]

MAX_VENDOR_TEXT = 200
"""Characters of a vendor's error text kept in a ProviderError."""

_CREDENTIAL = re.compile(
    r"(?i)(\b(?:bearer|basic)\s+|\b(?:api[_-]?key|key|token|secret|password)[\"']?\s*[:=]\s*[\"']?)[^\s\"',;]+"
    r"|\b(?:sk|pk|rk)-[A-Za-z0-9_\-*.]{6,}")


def _hide(m: re.Match[str]) -> str:
    return f"{m.group(1)}***" if m.group(1) else "***"


def vendor_text(value: object) -> str:
    """A vendor's error text, safe to log: credentials masked, then cut to MAX_VENDOR_TEXT."""
    # Masked before the cut, so a key straddling the cut is not left half visible.
    return _CREDENTIAL.sub(_hide, mask(str(value)))[:MAX_VENDOR_TEXT]


def vendor_message(body: bytes) -> str:
    """The vendor's own error text from a JSON error body (OpenAI, Anthropic and Gemini shapes)."""
    text = body.decode("utf-8", errors="replace")
    try:
        obj = json.loads(text)
    except ValueError:
        return vendor_text(text)
    if isinstance(obj, list) and obj:
        obj = obj[0]
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("type") or err.get("status")
            if isinstance(msg, str):
                return vendor_text(msg)
        elif isinstance(err, str):
            return vendor_text(err)
    return vendor_text(text)


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
