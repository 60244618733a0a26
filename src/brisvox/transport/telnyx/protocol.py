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

from brisvox.core.secret import Secret
from brisvox.transport.telephony.wire import (
    CarrierProtocolError,
    FaultKind,
    b64encode,
    dtmf_digit,
    field_object,
    field_text,
    lenient_int,
    load_event,
    media_fields,
    unknown_event,
)

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
    "parse_message",
]

AUTH_HEADER = "x-telnyx-streaming-auth-token"
MEDIA_RATE = 8000
_MAX_ID = 256


class Codec(enum.Enum):
    PCMU = "PCMU"
    PCMA = "PCMA"

    @property
    def silence(self) -> int:
        """The byte of digital silence in this law."""
        return 0xFF if self is Codec.PCMU else 0xD5


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


def _short(value: object, limit: int = 200) -> str:
    return value[:limit] if isinstance(value, str) else ""


def parse_message(text: str) -> TelnyxMessage:
    """One Telnyx text frame as a typed message (see the module docs)."""
    raw, event = load_event(text)
    if event == "media":
        media, payload, track = media_fields(raw)
        return InboundMedia(payload, lenient_int(media.get("chunk")), track)
    if event == "mark":
        return InboundMark(field_text(field_object(raw, "mark", "mark"), "name", "mark", _MAX_ID))
    if event == "dtmf":
        return InboundDtmf(dtmf_digit(raw), lenient_int(raw.get("sequence_number")))
    if event == "stop":
        return InboundStop()
    if event == "connected":
        token = raw.get(AUTH_HEADER)
        return Connected(Secret(token) if isinstance(token, str) and token else None)
    if event == "error":
        error = raw.get("payload")
        body: Mapping[str, object] = error if isinstance(error, dict) else {}
        return TelnyxError(lenient_int(body.get("code")), _short(body.get("title")), _short(body.get("detail")))
    if event == "start":
        return _parse_start(raw)
    raise unknown_event(event)


def _parse_start(raw: Mapping[str, object]) -> StreamStart:
    start = field_object(raw, "start", "start")
    fmt = field_object(start, "media_format", "start")
    encoding, rate, channels = fmt.get("encoding"), lenient_int(fmt.get("sample_rate")), lenient_int(fmt.get("channels"))
    codec = next((c for c in Codec if c.value == encoding), None)
    if codec is None or rate != MEDIA_RATE or channels not in (1, None):
        raise CarrierProtocolError(
            FaultKind.UNSUPPORTED_FORMAT,
            f"media_format must be PCMU or PCMA at {MEDIA_RATE} Hz mono (got {str(encoding)[:40]!r} at "
            f"{str(fmt.get('sample_rate'))[:12]}, channels {str(fmt.get('channels'))[:8]}); set "
            "stream_bidirectional_codec to PCMU or PCMA", _short(start.get("call_control_id"), _MAX_ID) or None)
    holder = {"stream_id": raw.get("stream_id", start.get("stream_id"))}
    return StreamStart(
        stream_id=field_text(holder, "stream_id", "start", _MAX_ID),
        call_control_id=field_text(start, "call_control_id", "start", _MAX_ID),
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
