"""Twilio Media Streams, the protocol alone (pure: no sockets, no clock, no asyncio).

Twilio sends JSON text frames: ``connected``, ``start``, ``media``, ``mark``, ``dtmf``,
``stop``; numbers such as ``sequenceNumber``, ``chunk`` and ``timestamp`` are JSON
strings (read with :func:`~brisvox.transport.telephony.lenient_int`).  The server sends
``media`` (base64 mu-law, 8 kHz), ``mark`` and ``clear``; Twilio takes nothing else (no
error or stop message: the only goodbye is the close frame).

:func:`parse_message` turns one text frame into a typed message or raises
:class:`~brisvox.transport.telephony.CarrierProtocolError` naming what was wrong; :class:`OutboundEncoder` builds the
server's messages for one stream (the ``media`` prefix with the escaped ``streamSid`` is
built once, so a media message is one base64 call and one string join);
:func:`signature` / :func:`signature_valid` are Twilio's ``X-Twilio-Signature``
(HMAC-SHA1 of the URL and the sorted form parameters, base64).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

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
    "parse_message",
    "signature",
    "signature_valid",
]

MEDIA_ENCODING = "audio/x-mulaw"
MEDIA_RATE = 8000
_MAX_ID = 128  # streamSid, callSid, accountSid: 34 characters in practice
_MAX_PARAMS = 64
_MAX_PARAM_CHARS = 1024


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


def _bad(message: str) -> CarrierProtocolError:
    return CarrierProtocolError(FaultKind.INVALID_MESSAGE, message)


def parse_message(text: str) -> TwilioMessage:
    """One Twilio text frame as a typed message (see the module docs)."""
    raw, event = load_event(text)
    if event == "media":
        media, payload, track = media_fields(raw)
        return InboundMedia(payload, lenient_int(media.get("chunk")), lenient_int(media.get("timestamp")), track)
    if event == "mark":
        return InboundMark(field_text(field_object(raw, "mark", "mark"), "name", "mark", 256))
    if event == "dtmf":
        return InboundDtmf(dtmf_digit(raw))
    if event == "stop":
        return InboundStop()
    if event == "connected":
        protocol = raw.get("protocol")
        return Connected(protocol if isinstance(protocol, str) else "")
    if event == "start":
        return _parse_start(raw)
    raise unknown_event(event)


def _parse_start(raw: Mapping[str, object]) -> StreamStart:
    start = field_object(raw, "start", "start")
    fmt = field_object(start, "mediaFormat", "start")
    encoding, rate, channels = fmt.get("encoding"), lenient_int(fmt.get("sampleRate")), lenient_int(fmt.get("channels"))
    if encoding != MEDIA_ENCODING or rate != MEDIA_RATE or channels not in (1, None):
        raise CarrierProtocolError(
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
        stream_sid=field_text(holder, "streamSid", "start", _MAX_ID),
        call_sid=field_text(start, "callSid", "start", _MAX_ID),
        account_sid=field_text(start, "accountSid", "start", _MAX_ID) if "accountSid" in start else "",
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
