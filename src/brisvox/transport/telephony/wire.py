"""The wire helpers the telephony adapters share (pure): fault kinds, the protocol error, the
checks of the carriers' JSON messages (objects, bounded strings, DTMF digits, base64 media),
numbers printed as strings, credentials compared in constant time."""

from __future__ import annotations

import binascii
import enum
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass

from brisvox.core.errors import BrisvoxError

__all__ = [
    "DTMF_DIGITS",
    "CarrierProtocolError",
    "FaultKind",
    "UpgradeRefusal",
    "b64decode",
    "b64encode",
    "decode_media",
    "dtmf_digit",
    "field_object",
    "field_text",
    "lenient_int",
    "load_event",
    "media_fields",
    "secret_equal",
    "unknown_event",
]

DTMF_DIGITS = frozenset("0123456789*#ABCDabcd")


class FaultKind(enum.Enum):
    """What went wrong on a carrier's stream (the WireFault kinds of the carrier adapters)."""

    INVALID_JSON = "invalid_json"
    INVALID_MESSAGE = "invalid_message"
    UNKNOWN_EVENT = "unknown_event"
    UNSUPPORTED_FORMAT = "unsupported_format"
    INVALID_MEDIA = "invalid_media"
    BINARY_FRAME = "binary_frame"
    UNEXPECTED = "unexpected_message"
    TOO_BIG = "message_too_big"
    TOO_MANY_FAULTS = "too_many_faults"
    OUTPUT_RATE_MISMATCH = "output_rate_mismatch"
    IDLE_TIMEOUT = "idle_timeout"
    MAX_DURATION = "max_duration"
    OVERLOADED = "overloaded"
    AUDIO_FLOOD = "audio_flood"
    TELNYX_ERROR = "telnyx_error"
    CHUNK_RESYNC = "chunk_resync"


class CarrierProtocolError(BrisvoxError):
    """A frame that is not a valid carrier message; ``kind`` says which rule it broke.
    ``call_control_id``: a refused start's call, so the adapter can hang it up (Telnyx)."""

    def __init__(self, kind: FaultKind, message: str, call_control_id: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.call_control_id = call_control_id


def _bad(message: str) -> CarrierProtocolError:
    return CarrierProtocolError(FaultKind.INVALID_MESSAGE, message)


def load_event(text: str) -> tuple[Mapping[str, object], object]:
    """One text frame as a JSON object and its ``event``."""
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        raise CarrierProtocolError(FaultKind.INVALID_JSON, "a text frame is not valid JSON") from None
    if not isinstance(raw, dict):
        raise _bad("a message must be a JSON object")
    return raw, raw.get("event")


def unknown_event(event: object) -> CarrierProtocolError:
    shown = repr(event)[:40] if isinstance(event, str) else type(event).__name__
    return CarrierProtocolError(FaultKind.UNKNOWN_EVENT, f"unknown event {shown}")


def field_object(parent: Mapping[str, object], key: str, event: str) -> Mapping[str, object]:
    value = parent.get(key)
    if not isinstance(value, dict):
        raise _bad(f"a {event!r} message needs an object {key!r}")
    return value


def field_text(parent: Mapping[str, object], key: str, event: str, limit: int) -> str:
    value = parent.get(key)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise _bad(f"a {event!r} message needs a string {key!r} of 1 to {limit} characters")
    return value


def dtmf_digit(raw: Mapping[str, object]) -> str:
    """The digit of a ``dtmf`` message (upper case)."""
    digit = field_object(raw, "dtmf", "dtmf").get("digit")
    if not isinstance(digit, str) or len(digit) != 1 or digit not in DTMF_DIGITS:
        raise _bad(f"a 'dtmf' message needs one digit of {''.join(sorted(DTMF_DIGITS))}")
    return digit.upper()


def media_fields(raw: Mapping[str, object]) -> tuple[Mapping[str, object], str, str]:
    """A ``media`` message's object, its base64 ``payload`` (decoded later by
    :func:`decode_media`) and its ``track`` (``inbound`` when missing)."""
    media = field_object(raw, "media", "media")
    payload = media.get("payload")
    if not isinstance(payload, str):
        raise CarrierProtocolError(FaultKind.INVALID_MEDIA, "a 'media' message needs a string 'payload'")
    track = media.get("track", "inbound")
    return media, payload, track if isinstance(track, str) else "inbound"


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


def decode_media(payload: str, max_bytes: int) -> bytes:
    """A media payload as audio bytes: strict base64 of 1 to ``max_bytes`` bytes; raises
    :class:`CarrierProtocolError` (``INVALID_MEDIA``) naming what was wrong."""
    try:
        data = binascii.a2b_base64(payload, strict_mode=True)  # b64decode inline: once per 20 ms of audio
    except (binascii.Error, ValueError) as exc:
        raise CarrierProtocolError(FaultKind.INVALID_MEDIA, f"media payload: invalid base64 ({exc})") from None
    if not 1 <= len(data) <= max_bytes:
        raise CarrierProtocolError(FaultKind.INVALID_MEDIA,
                                   f"a media payload of {len(data)} bytes (expected 1 to {max_bytes})")
    return data


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
