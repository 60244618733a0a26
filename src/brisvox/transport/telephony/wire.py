"""Small wire helpers the telephony adapters share (pure)."""

from __future__ import annotations

import binascii
import hmac
from dataclasses import dataclass

__all__ = ["UpgradeRefusal", "b64decode", "b64encode", "lenient_int", "secret_equal"]


def lenient_int(value: object) -> int | None:
    """An integer the carrier may print as a JSON number or a decimal string (``"42"``);
    None for anything else (a bool, a float, ``"4x"``, a missing field)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and 0 < len(value) <= 20 and value.isascii() and value.isdigit():
        return int(value)
    return None


def b64decode(text: str) -> bytes:
    """Strict base64 (no stray characters, correct padding); raises ValueError."""
    try:
        return binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError) as exc:  # ValueError: non-ASCII text
        raise ValueError(f"invalid base64 ({exc})") from None


def b64encode(data: bytes | bytearray | memoryview) -> str:
    """Base64 without a newline."""
    return binascii.b2a_base64(data, newline=False).decode("ascii")


def secret_equal(given: str, expected: str) -> bool:
    """Compare a credential in constant time (independent of where the strings differ)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode("utf-8", "surrogatepass"))


@dataclass(frozen=True, slots=True)
class UpgradeRefusal:
    """A WebSocket upgrade refused before it is accepted: HTTP ``status``, a short ``reason``
    code (for the metric and the body) and a ``detail`` for the operator (never a secret)."""

    status: int
    reason: str
    detail: str

    def body(self) -> str:
        return f"{self.reason}: {self.detail}\n"
