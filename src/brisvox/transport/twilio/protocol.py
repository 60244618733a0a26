"""Twilio Media Streams, the protocol alone (pure: no sockets, no clock, no asyncio).

Twilio sends JSON text frames: ``connected``, ``start``, ``media``, ``mark``, ``dtmf``,
``stop``; numbers such as ``sequenceNumber``, ``chunk`` and ``timestamp`` are JSON
strings (read with :func:`~brisvox.transport.telephony.lenient_int`).  The server sends
``media`` (base64 mu-law, 8 kHz), ``mark`` and ``clear``; Twilio takes nothing else (no
error or stop message: the only goodbye is the close frame).

:func:`parse_message` turns one text frame into a typed message or raises
:class:`TwilioProtocolError` naming what was wrong; :class:`OutboundEncoder` builds the
server's messages for one stream (the ``media`` prefix with the escaped ``streamSid`` is
built once, so a media message is one base64 call and one string join);
:func:`signature` / :func:`signature_valid` are Twilio's ``X-Twilio-Signature``
(HMAC-SHA1 of the URL and the sorted form parameters, base64).
"""

from __future__ import annotations

import base64
import enum
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from brisvox.core.errors import BrisvoxError
from brisvox.transport.telephony import b64encode, lenient_int

__all__ = [
    "MEDIA_ENCODING",
    "MEDIA_RATE",
    "Connected",
    "FaultKind",
    "InboundDtmf",
    "InboundMark",
    "InboundMedia",
    "InboundStop",
    "OutboundEncoder",
    "StreamStart",
    "TwilioMessage",
    "TwilioProtocolError",
    "parse_message",
    "signature",
    "signature_valid",
]

MEDIA_ENCODING = "audio/x-mulaw"
MEDIA_RATE = 8000
_MAX_ID = 128  # streamSid, callSid, accountSid: 34 characters in practice
_MAX_PARAMS = 64
_MAX_PARAM_CHARS = 1024
_DTMF_DIGITS = frozenset("0123456789*#ABCDabcd")


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


class TwilioProtocolError(BrisvoxError):
    """A frame that is not a valid Media Streams message; ``kind`` says which rule it broke."""

    def __init__(self, kind: FaultKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True, slots=True)
class Connected:
    protocol: str


@dataclass(frozen=True, slots=True, repr=False)
class StreamStart:
    stream_sid: str
    call_sid: str
    account_sid: str
    tracks: tuple[str, ...]
    custom_parameters: Mapping[str, str] = field(default_factory=dict)

    def __repr__(self) -> str:  # parameters may carry credentials
        return f"StreamStart(stream_sid={self.stream_sid!r}, call_sid={self.call_sid!r}, " \
               f"<{len(self.custom_parameters)} parameters>)"


@dataclass(frozen=True, slots=True, repr=False)
class InboundMedia:
    payload: str  # base64 mu-law
    chunk: int | None
    timestamp: int | None
    track: str

    def __repr__(self) -> str:
        return f"InboundMedia(<{len(self.payload)} chars>, chunk={self.chunk}, timestamp={self.timestamp})"


@dataclass(frozen=True, slots=True)
class InboundMark:
    name: str


@dataclass(frozen=True, slots=True)
class InboundDtmf:
    digit: str


@dataclass(frozen=True, slots=True)
class InboundStop:
    pass


TwilioMessage = Connected | StreamStart | InboundMedia | InboundMark | InboundDtmf | InboundStop


def _bad(message: str) -> TwilioProtocolError:
    return TwilioProtocolError(FaultKind.INVALID_MESSAGE, message)


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


def parse_message(text: str) -> TwilioMessage:
    """One Twilio text frame as a typed message (see the module docs)."""
    try:
        raw = json.loads(text)
    except (ValueError, RecursionError):
        raise TwilioProtocolError(FaultKind.INVALID_JSON, "a text frame is not valid JSON") from None
    if not isinstance(raw, dict):
        raise _bad("a message must be a JSON object")
    event = raw.get("event")
    if event == "media":
        media = _object(raw, "media", "media")
        payload = media.get("payload")
        if not isinstance(payload, str):
            raise TwilioProtocolError(FaultKind.INVALID_MEDIA, "a 'media' message needs a string 'payload'")
        track = media.get("track", "inbound")
        return InboundMedia(payload, lenient_int(media.get("chunk")), lenient_int(media.get("timestamp")),
                            track if isinstance(track, str) else "inbound")
    if event == "mark":
        return InboundMark(_text(_object(raw, "mark", "mark"), "name", "mark", 256))
    if event == "dtmf":
        digit = _object(raw, "dtmf", "dtmf").get("digit")
        if not isinstance(digit, str) or len(digit) != 1 or digit not in _DTMF_DIGITS:
            raise _bad(f"a 'dtmf' message needs one digit of {''.join(sorted(_DTMF_DIGITS))}")
        return InboundDtmf(digit.upper())
    if event == "stop":
        return InboundStop()
    if event == "connected":
        protocol = raw.get("protocol")
        return Connected(protocol if isinstance(protocol, str) else "")
    if event == "start":
        return _parse_start(raw)
    shown = repr(event)[:40] if isinstance(event, str) else type(event).__name__
    raise TwilioProtocolError(FaultKind.UNKNOWN_EVENT, f"unknown event {shown}")


def _parse_start(raw: Mapping[str, object]) -> StreamStart:
    start = _object(raw, "start", "start")
    fmt = _object(start, "mediaFormat", "start")
    encoding, rate, channels = fmt.get("encoding"), lenient_int(fmt.get("sampleRate")), lenient_int(fmt.get("channels"))
    if encoding != MEDIA_ENCODING or rate != MEDIA_RATE or channels not in (1, None):
        raise TwilioProtocolError(
            FaultKind.UNSUPPORTED_FORMAT,
            f"mediaFormat must be {MEDIA_ENCODING} at {MEDIA_RATE} Hz mono "
            f"(got {str(encoding)[:40]!r} at {str(fmt.get('sampleRate'))[:12]}, channels {str(fmt.get('channels'))[:8]})")
    params_raw = start.get("customParameters", {})
    if not isinstance(params_raw, dict) or len(params_raw) > _MAX_PARAMS:
        raise _bad(f"start.customParameters must be an object of at most {_MAX_PARAMS} entries")
    params: dict[str, str] = {}
    for key, value in params_raw.items():
        if not isinstance(value, str | int | float | bool) or len(key) > 128 or len(str(value)) > _MAX_PARAM_CHARS:
            raise _bad(f"start.customParameters[{key[:40]!r}] must be a short string")
        params[key] = value if isinstance(value, str) else json.dumps(value)
    tracks_raw = start.get("tracks", ["inbound"])
    if not isinstance(tracks_raw, list) or not all(isinstance(t, str) for t in tracks_raw) or len(tracks_raw) > 4:
        raise _bad("start.tracks must be a list of track names")
    stream_sid = start.get("streamSid", raw.get("streamSid"))
    holder = {"streamSid": stream_sid}
    return StreamStart(
        stream_sid=_text(holder, "streamSid", "start"),
        call_sid=_text(start, "callSid", "start"),
        account_sid=_text(start, "accountSid", "start") if "accountSid" in start else "",
        tracks=tuple(tracks_raw),
        custom_parameters=params,
    )


class OutboundEncoder:
    """The server's messages for one stream (``streamSid`` escaped once)."""

    __slots__ = ("_clear", "_mark_prefix", "_media_prefix")

    _SUFFIX = '"}}'

    def __init__(self, stream_sid: str) -> None:
        sid = json.dumps(stream_sid)
        self._media_prefix = f'{{"event":"media","streamSid":{sid},"media":{{"payload":"'
        self._mark_prefix = f'{{"event":"mark","streamSid":{sid},"mark":{{"name":'
        self._clear = f'{{"event":"clear","streamSid":{sid}}}'

    def media(self, mulaw: bytes | bytearray | memoryview) -> str:
        return self._media_prefix + b64encode(mulaw) + self._SUFFIX

    def mark(self, name: str) -> str:
        return self._mark_prefix + json.dumps(name) + "}}"

    def clear(self) -> str:
        return self._clear


def signature(auth_token: str, url: str, params: Mapping[str, str] | None = None) -> str:
    """Twilio's request signature: base64(HMAC-SHA1(auth token, url + each sorted key + value))."""
    given = params or {}
    data = url + "".join(key + given[key] for key in sorted(given))
    digest = hmac.new(auth_token.encode(), data.encode(), hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


def signature_valid(auth_token: str, url: str, given: str | None, params: Mapping[str, str] | None = None) -> bool:
    """Whether ``given`` (the ``X-Twilio-Signature`` header) signs ``url``; constant time."""
    if given is None:
        return False
    return hmac.compare_digest(signature(auth_token, url, params).encode(), given.encode("utf-8", "replace"))
