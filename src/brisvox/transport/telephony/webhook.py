"""Incoming-call webhooks of the carriers (pure): parse, verify, answer.

A carrier asks the webhook what to do with a new call (an HTTP ``POST``, form-encoded:
``CallSid``, ``From``, ``To``, ...); the answer connects the call to brisvox's media stream
(TwiML or TeXML ``<Connect><Stream>``), with the agent's name and a signed call token in
the stream's ``<Parameter>`` list.

* :func:`parse_form`: the body, at most :data:`MAX_FIELDS` fields of :data:`MAX_FIELD_CHARS`
  characters, UTF-8, no repeated key; anything else is a 400 naming the problem.
* :func:`check_twilio`: ``X-Twilio-Signature``, base64 HMAC-SHA1 with the auth token over the
  webhook's public URL followed by every form key and value in key order (Twilio's
  documented scheme), compared in constant time.
* :func:`check_telnyx`: ``telnyx-signature-ed25519`` (base64) over ``<telnyx-timestamp>|<raw
  body>`` with the account's Ed25519 public key, and the timestamp within
  :data:`TELNYX_TOLERANCE` seconds of ``now`` (a replayed request is refused).
* :func:`stream_twiml` / :func:`stream_texml`: the answers (attribute values XML-escaped).

Every function here takes what it needs as arguments (``now`` in Unix seconds): no clock,
no I/O.  :mod:`brisvox.server.webhooks` is the HTTP shell.
"""

from __future__ import annotations

import base64
import binascii
import math
from collections.abc import Mapping
from typing import Final
from urllib.parse import parse_qsl
from xml.sax.saxutils import quoteattr

from brisvox.core.errors import InvalidInput
from brisvox.transport.telephony.wire import UpgradeRefusal
from brisvox.transport.twilio.protocol import signature_valid

__all__ = [
    "CALL_TOKEN_PARAM",
    "MAX_BODY_BYTES",
    "MAX_FIELDS",
    "MAX_FIELD_CHARS",
    "TELNYX_SIGNATURE_HEADER",
    "TELNYX_TIMESTAMP_HEADER",
    "TELNYX_TOLERANCE",
    "TWILIO_SIGNATURE_HEADER",
    "check_telnyx",
    "check_twilio",
    "parse_form",
    "stream_texml",
    "stream_twiml",
    "telnyx_public_key",
]

MAX_BODY_BYTES: Final = 16 * 1024
"""A webhook body above this is refused with 413 (Twilio's call webhooks are about 1 KiB)."""
MAX_FIELDS: Final = 100
MAX_FIELD_CHARS: Final = 2048
TELNYX_TOLERANCE: Final = 300.0
"""Seconds a Telnyx webhook's timestamp may be from ``now`` (either way), as Telnyx's SDKs allow."""
CALL_TOKEN_PARAM: Final = "token"
"""The ``<Parameter>`` name that carries the signed call token into the stream."""
TWILIO_SIGNATURE_HEADER: Final = "x-twilio-signature"
TELNYX_SIGNATURE_HEADER: Final = "telnyx-signature-ed25519"
TELNYX_TIMESTAMP_HEADER: Final = "telnyx-timestamp"
_ED25519_KEY_BYTES: Final = 32
_ED25519_SIG_BYTES: Final = 64


def _bad(reason: str, detail: str) -> UpgradeRefusal:
    return UpgradeRefusal(400, reason, detail)


def parse_form(body: bytes) -> dict[str, str] | UpgradeRefusal:
    """The form fields of a webhook body, or the 400/413 refusal naming what is wrong."""
    if len(body) > MAX_BODY_BYTES:
        return UpgradeRefusal(413, "too_large", f"the body has {len(body)} bytes; at most {MAX_BODY_BYTES}")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return _bad("not_utf8", f"the body is not UTF-8 (byte {exc.start})")
    try:
        pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=bool(text), errors="strict",
                          max_num_fields=MAX_FIELDS)
    except UnicodeDecodeError:
        return _bad("not_utf8", "a percent-encoded field is not UTF-8")
    except ValueError as exc:
        too_many = "Max number of fields exceeded" in str(exc)
        return _bad("too_many_fields" if too_many else "malformed",
                    f"more than {MAX_FIELDS} fields" if too_many else "expected key=value pairs joined by '&'")
    form: dict[str, str] = {}
    for key, value in pairs:
        if key in form:
            return _bad("repeated_field", f"field {key[:40]!r} appears twice")
        if not key or len(key) > MAX_FIELD_CHARS or len(value) > MAX_FIELD_CHARS:
            return _bad("bad_field", f"a field name must have 1 to {MAX_FIELD_CHARS} characters, "
                                     f"a value at most {MAX_FIELD_CHARS}")
        form[key] = value
    return form


def check_twilio(auth_token: str, url: str, form: Mapping[str, str], given: str | None) -> UpgradeRefusal | None:
    """Why a Twilio webhook is refused (403), None when ``given`` signs ``url`` and ``form``."""
    if given is None:
        return UpgradeRefusal(403, "missing_signature", "the request has no X-Twilio-Signature header")
    if not signature_valid(auth_token, url, given, form):
        return UpgradeRefusal(403, "bad_signature",
                              "X-Twilio-Signature does not sign the webhook URL and form with the configured auth "
                              "token (check BRISVOX_TWILIO_WEBHOOK_URL and BRISVOX_TWILIO_AUTH_TOKEN)")
    return None


def telnyx_public_key(text: str) -> bytes:
    """The raw 32-byte Ed25519 key from its base64 text (the Telnyx portal's form); InvalidInput otherwise."""
    try:
        raw = base64.b64decode(text.strip(), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidInput("the Telnyx public key is not base64") from None
    if len(raw) != _ED25519_KEY_BYTES:
        raise InvalidInput(f"the Telnyx public key has {len(raw)} bytes; an Ed25519 key has {_ED25519_KEY_BYTES}")
    return raw


def check_telnyx(public_key: bytes, body: bytes, signature: str | None, timestamp: str | None,
                 now: float, tolerance: float = TELNYX_TOLERANCE) -> UpgradeRefusal | None:
    """Why a Telnyx webhook is refused (403), None when ``signature`` signs ``timestamp|body``
    with ``public_key`` and ``timestamp`` (Unix seconds) is within ``tolerance`` of ``now``."""
    from cryptography.exceptions import InvalidSignature
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

    if signature is None or timestamp is None:
        return UpgradeRefusal(403, "missing_signature",
                              "the request lacks telnyx-signature-ed25519 or telnyx-timestamp")
    if not (0 < len(timestamp) <= 12 and timestamp.isascii() and timestamp.isdigit()):
        return UpgradeRefusal(403, "bad_timestamp", "telnyx-timestamp is not Unix seconds")
    age = now - int(timestamp)
    if not math.isfinite(age) or abs(age) > tolerance:
        return UpgradeRefusal(403, "stale_timestamp",
                              f"telnyx-timestamp is {age:.0f} s from now; at most {tolerance:g} s is accepted")
    try:
        raw = base64.b64decode(signature, validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) != _ED25519_SIG_BYTES:
        return UpgradeRefusal(403, "bad_signature", "telnyx-signature-ed25519 is not a base64 Ed25519 signature")
    try:
        Ed25519PublicKey.from_public_bytes(public_key).verify(raw, timestamp.encode("ascii") + b"|" + body)
    except InvalidSignature:
        return UpgradeRefusal(403, "bad_signature",
                              "telnyx-signature-ed25519 does not verify with BRISVOX_TELNYX_PUBLIC_KEY")
    return None


def _parameters(params: Mapping[str, str]) -> str:
    return "".join(f"<Parameter name={quoteattr(k)} value={quoteattr(v)} />" for k, v in params.items())


def stream_twiml(stream_url: str, params: Mapping[str, str]) -> str:
    """TwiML connecting the call to a bidirectional Media Stream at ``stream_url`` with ``params``."""
    return ('<?xml version="1.0" encoding="UTF-8"?><Response><Connect>'
            f"<Stream url={quoteattr(stream_url)}>{_parameters(params)}</Stream></Connect></Response>")


def stream_texml(stream_url: str, codec: str, params: Mapping[str, str]) -> str:
    """TeXML connecting the call to a bidirectional (RTP) stream at ``stream_url`` in ``codec``."""
    return ('<?xml version="1.0" encoding="UTF-8"?><Response><Connect>'
            f'<Stream url={quoteattr(stream_url)} bidirectionalMode="rtp" bidirectionalCodec={quoteattr(codec)}>'
            f"{_parameters(params)}</Stream></Connect></Response>")
