"""Telnyx media streaming messages (bidirectional RTP mode): parsing and encoding (pure).

Telnyx writes snake_case JSON with ``stream_id``; ``sequence_number``, ``chunk`` and
``timestamp`` are decimal strings (read leniently: a JSON number is accepted too).  The
server's ``media``/``mark``/``clear`` carry no stream id (Telnyx's schemas forbid extra
properties).  Only PCMU and PCMA at 8 kHz mono are taken: L16's byte order is not
documented and G722/OPUS/AMR-WB need codecs brisvox does not have, so a ``start`` with
one of them is refused with :attr:`FaultKind.UNSUPPORTED_FORMAT`.  The stream's auth
token, when Telnyx puts it in ``connected``, is kept as a :class:`Secret`.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass

from brisvox.core.errors import BrisvoxError
from brisvox.core.secret import Secret
from brisvox.transport.telephony import b64encode, lenient_int

__all__ = [
    "AUTH_HEADER",
    "MEDIA_RATE",
    "Codec",
    "Connected",
    "FaultKind",
    "InboundDtmf",
    "InboundMark",
    "InboundMedia",
    "InboundStop",
    "OutboundEncoder",
    "StreamStart",
    "TelnyxError",
    "TelnyxMessage",
    "TelnyxProtocolError",
    "parse_message",
]

AUTH_HEADER = "x-telnyx-streaming-auth-token"
MEDIA_RATE = 8000
_MAX_ID = 256
_DTMF_DIGITS = frozenset("0123456789*#ABCDabcd")


class Codec(enum.Enum):
    PCMU = "PCMU"
    PCMA = "PCMA"

    @property
    def silence(self) -> int:
        """The byte of digital silence in this law."""
        return 0xFF if self is Codec.PCMU else 0xD5


class FaultKind(enum.Enum):
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


class TelnyxProtocolError(BrisvoxError):
    """A frame that is not a valid Telnyx streaming message; ``kind`` says which rule it broke."""

    def __init__(self, kind: FaultKind, message: str, call_control_id: str | None = None) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.call_control_id = call_control_id  # a refused start's call (so the adapter can hang it up)


@dataclass(frozen=True, slots=True)
class Connected:
    auth_token: Secret | None  # x-telnyx-streaming-auth-token, when Telnyx sends it here


@dataclass(frozen=True, slots=True)
class StreamStart:
    stream_id: str
    call_control_id: str
    call_session_id: str
    codec: Codec
    from_number: str
    to_number: str


@dataclass(frozen=True, slots=True, repr=False)
class InboundMedia:
    payload: str  # base64 G.711
    chunk: int | None
    track: str

    def __repr__(self) -> str:
        return f"InboundMedia(<{len(self.payload)} chars>, chunk={self.chunk}, track={self.track!r})"


@dataclass(frozen=True, slots=True)
class InboundMark:
    name: str


@dataclass(frozen=True, slots=True)
class InboundDtmf:
    digit: str
    sequence: int | None


@dataclass(frozen=True, slots=True)
class InboundStop:
    pass


@dataclass(frozen=True, slots=True)
class TelnyxError:
    """Telnyx's ``error`` frame (codes 100002..100005: the server's message was refused)."""

    code: int | None
    title: str
    detail: str


TelnyxMessage = Connected | StreamStart | InboundMedia | InboundMark | InboundDtmf | InboundStop | TelnyxError


def _bad(message: str) -> TelnyxProtocolError:
    return TelnyxProtocolError(FaultKind.INVALID_MESSAGE, message)


def _object(parent: Mapping[str, object], key: str, event: str) -> Mapping[str, object]:
    value = parent.get(key)
    if not isinstance(value, dict):
        raise _bad(f"a {event!r} message needs an object {key!r}")
    return value


def _text(parent: Mapping[str, object], key: str, event: str, limit: int = _MAX_ID) -> str:
    value = parent.get(key)
    if not isinstance(value, str) or not value or len(value) > limit:
        raise _bad(f"a {event!r} message needs a string {key!r} of 1 to {limit} characters")
    return value


def _short(value: object, limit: int = 200) -> str:
    return value[:limit] if isinstance(value, str) else ""


def parse_message(text: str) -> TelnyxMessage:
    """One Telnyx text frame as a typed message (see the module docs)."""
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        raise TelnyxProtocolError(FaultKind.INVALID_JSON, "a text frame is not valid JSON") from None
    if not isinstance(raw, dict):
        raise _bad("a message must be a JSON object")
    event = raw.get("event")
    if event == "media":
        media = _object(raw, "media", "media")
        payload = media.get("payload")
        if not isinstance(payload, str):
            raise TelnyxProtocolError(FaultKind.INVALID_MEDIA, "a 'media' message needs a string 'payload'")
        track = media.get("track", "inbound")
        return InboundMedia(payload, lenient_int(media.get("chunk")), track if isinstance(track, str) else "inbound")
    if event == "mark":
        return InboundMark(_text(_object(raw, "mark", "mark"), "name", "mark"))
    if event == "dtmf":
        digit = _object(raw, "dtmf", "dtmf").get("digit")
        if not isinstance(digit, str) or len(digit) != 1 or digit not in _DTMF_DIGITS:
            raise _bad(f"a 'dtmf' message needs one digit of {''.join(sorted(_DTMF_DIGITS))}")
        return InboundDtmf(digit.upper(), lenient_int(raw.get("sequence_number")))
    if event == "stop":
        return InboundStop()
    if event == "connected":
        token = raw.get(AUTH_HEADER)
        return Connected(Secret(token) if isinstance(token, str) and token else None)
    if event == "error":
        payload = raw.get("payload")
        body: Mapping[str, object] = payload if isinstance(payload, dict) else {}
        return TelnyxError(lenient_int(body.get("code")), _short(body.get("title")), _short(body.get("detail")))
    if event == "start":
        return _parse_start(raw)
    shown = repr(event)[:40] if isinstance(event, str) else type(event).__name__
    raise TelnyxProtocolError(FaultKind.UNKNOWN_EVENT, f"unknown event {shown}")


def _parse_start(raw: Mapping[str, object]) -> StreamStart:
    start = _object(raw, "start", "start")
    fmt = _object(start, "media_format", "start")
    encoding, rate, channels = fmt.get("encoding"), lenient_int(fmt.get("sample_rate")), lenient_int(fmt.get("channels"))
    codec = next((c for c in Codec if c.value == encoding), None)
    if codec is None or rate != MEDIA_RATE or channels not in (1, None):
        raise TelnyxProtocolError(
            FaultKind.UNSUPPORTED_FORMAT,
            f"media_format must be PCMU or PCMA at {MEDIA_RATE} Hz mono (got {str(encoding)[:40]!r} at "
            f"{str(fmt.get('sample_rate'))[:12]}, channels {str(fmt.get('channels'))[:8]}); set "
            "stream_bidirectional_codec to PCMU or PCMA", _short(start.get("call_control_id"), _MAX_ID) or None)
    holder = {"stream_id": raw.get("stream_id", start.get("stream_id"))}
    return StreamStart(
        stream_id=_text(holder, "stream_id", "start"),
        call_control_id=_text(start, "call_control_id", "start"),
        call_session_id=_short(start.get("call_session_id"), _MAX_ID),
        codec=codec,
        from_number=_short(start.get("from"), 64),
        to_number=_short(start.get("to"), 64),
    )


class OutboundEncoder:
    """The server's messages (no stream id: Telnyx's schemas forbid extra properties)."""

    __slots__ = ()

    _MEDIA = '{"event":"media","media":{"payload":"'
    _MARK = '{"event":"mark","mark":{"name":'
    CLEAR = '{"event":"clear"}'

    def media(self, payload: bytes | bytearray | memoryview) -> str:
        return self._MEDIA + b64encode(payload) + '"}}'

    def mark(self, name: str) -> str:
        return self._MARK + json.dumps(name) + "}}"

    def clear(self) -> str:
        return self.CLEAR
