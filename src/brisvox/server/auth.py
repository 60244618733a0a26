"""Who may use the server: call tokens, static bearer tokens, and the Host and Origin checks.

Pure: no sockets, no clock.  Every function that needs the time takes ``now``, in Unix
seconds: a call token is minted on another machine (the operator's backend), so its expiry
is wall time by necessity.

**Signed call tokens** are JSON Web Tokens signed with HMAC-SHA256 (``alg`` ``HS256``), the
format LiveKit's access tokens use, so a backend in any language can mint them with its JWT
library.  Claims: ``exp`` (required, Unix seconds), ``iat``, ``nbf`` (optional), ``agent``
(optional: the token is valid only for the server whose agent file has that ``name``) and
``sub`` (optional: who the call is for).  :func:`issue_call_token` mints one;
:func:`verify_call_token` checks one and answers :class:`CallClaims` or a typed
:class:`AuthRefusal`; it never raises, whatever the string (a fuzz test holds it to that).
The signature is checked, in constant time, before any JSON is parsed, so without the key
nothing reaches the JSON parser.

**Static bearer tokens** are compared through HMAC digests under a fixed key with
:func:`hmac.compare_digest` (constant time and length-independent), against every
configured token.

**Passing a token.**  ``Authorization: Bearer <token>`` (non-browser clients), or, because
a browser cannot set headers on a WebSocket, the subprotocol ``brisvox.token.<token>``
offered next to :data:`PROTOCOL` (the server answers :data:`PROTOCOL`).  A subprotocol
rather than a ``?token=`` query parameter: URLs are written to the access logs of proxies
and load balancers, headers are not.  :func:`credential_from` reads either.  The one
exception is the RTVI path: Pipecat's JS transport can send its token only as ``?token=``
(:func:`token_from_query`), so the access guard reads it there (and removes it from the
query before the app sees it, :func:`without_query_token`); use short-lived signed tokens.

**Host and Origin.**  :func:`check_host` refuses a ``Host`` outside the allowed names (a
page on another name that resolves to this server: DNS rebinding).  :func:`check_origin`
admits a request without ``Origin`` (not a browser), a same-origin page (``Origin``'s
host equals ``Host``: the server's own page) and the allowed origins; any other page is refused.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import ipaddress
import json
import math
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Final
from urllib.parse import parse_qs, parse_qsl, urlencode

from brisvox.core.errors import InvalidInput
from brisvox.core.secret import Secret

__all__ = [
    "ANY",
    "DEFAULT_TTL",
    "LEEWAY",
    "LOOPBACK_NAMES",
    "MAX_TOKEN_CHARS",
    "MAX_TTL",
    "MIN_KEY_CHARS",
    "PROTOCOL",
    "TOKEN_SUBPROTOCOL_PREFIX",
    "AuthMode",
    "AuthRefusal",
    "Authenticator",
    "CallClaims",
    "RefusalReason",
    "check_host",
    "check_origin",
    "credential_from",
    "host_name",
    "is_loopback",
    "is_wildcard",
    "issue_call_token",
    "token_from_query",
    "verify_call_token",
    "without_query_token",
]

PROTOCOL: Final = "brisvox"
"""The subprotocol the server selects when a client offers it (browsers that pass a token must)."""
TOKEN_SUBPROTOCOL_PREFIX: Final = "brisvox.token."
ANY: Final = "*"
"""In an allowed-hosts or allowed-origins list: anything."""
LOOPBACK_NAMES: Final = frozenset({"localhost", "127.0.0.1", "::1"})

DEFAULT_TTL: Final = 600.0
"""Seconds a call token lives by default: it is needed only to open the call."""
MAX_TTL: Final = 86_400.0
LEEWAY: Final = 10.0
"""Seconds of clock skew between the backend and the server forgiven on ``exp`` and ``nbf``."""
MAX_TOKEN_CHARS: Final = 4096
MIN_KEY_CHARS: Final = 32

_HEADER: Final = {"alg": "HS256", "typ": "JWT"}
_B64URL = re.compile(r"[A-Za-z0-9_-]+")
_COMPARE_KEY: Final = b"brisvox static bearer comparison"
_MAX_DETAIL = 80
_MAX_SECONDS = 1e12  # about the year 33658: past any real claim, within float precision


class AuthMode(Enum):
    """How callers prove they may call (``BRISVOX_AUTH``)."""

    NONE = "none"
    BEARER = "bearer"
    SIGNED = "signed"


class RefusalReason(Enum):
    """Why a request was refused at the door (the ``reason`` label of ``brisvox_auth_refused_total``)."""

    HOST_NOT_ALLOWED = "host_not_allowed"
    ORIGIN_NOT_ALLOWED = "origin_not_allowed"
    MISSING_TOKEN = "missing_token"
    MALFORMED_TOKEN = "malformed_token"
    INVALID_TOKEN = "invalid_token"
    EXPIRED_TOKEN = "expired_token"
    TOKEN_NOT_YET_VALID = "token_not_yet_valid"
    WRONG_AGENT = "wrong_agent"

    @property
    def status(self) -> int:
        """401 when a (valid) credential would help, 403 when it would not."""
        return 403 if self in _FORBIDDEN else 401


_FORBIDDEN = frozenset({RefusalReason.HOST_NOT_ALLOWED, RefusalReason.ORIGIN_NOT_ALLOWED, RefusalReason.WRONG_AGENT})


@dataclass(frozen=True, slots=True)
class AuthRefusal:
    """A refused request: the reason and a short detail for the log and the answer (never the token)."""

    reason: RefusalReason
    detail: str

    @property
    def status(self) -> int:
        return self.reason.status


@dataclass(frozen=True, slots=True)
class CallClaims:
    """What a verified call token says."""

    expires: float
    issued: float | None = None
    not_before: float | None = None
    agent: str | None = None
    subject: str | None = None


def _shown(value: str) -> str:
    """A client-supplied value as it may appear in a log line: quoted, escaped, short."""
    text = repr(value)
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 3] + "..."


# --- signed call tokens ----------------------------------------------------------------------


def _key_bytes(key: Secret | str) -> bytes:
    raw = key.reveal() if isinstance(key, Secret) else key
    if len(raw) < MIN_KEY_CHARS:
        raise InvalidInput(f"the signing key has {len(raw)} characters; at least {MIN_KEY_CHARS} are needed")
    return raw.encode("utf-8", "surrogatepass")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(key: bytes, signing_input: str) -> bytes:
    return hmac.new(key, signing_input.encode("ascii"), hashlib.sha256).digest()


def issue_call_token(
    key: Secret | str,
    *,
    now: float,
    ttl: float = DEFAULT_TTL,
    agent: str | None = None,
    subject: str | None = None,
) -> str:
    """A call token signed with ``key`` (the server's ``BRISVOX_AUTH_SECRET``), valid from ``now``
    (Unix seconds, e.g. ``time.time()``) for ``ttl`` seconds, for the agent named ``agent``
    (any agent when None); raises :class:`~brisvox.core.errors.InvalidInput` for a bad argument."""
    if not (math.isfinite(ttl) and 0 < ttl <= MAX_TTL):
        raise InvalidInput(f"ttl {ttl!r}: expected seconds in (0, {MAX_TTL:g}]")
    if not math.isfinite(now):
        raise InvalidInput(f"now {now!r}: expected Unix seconds")
    for name, value in (("agent", agent), ("subject", subject)):
        if value is not None and not (0 < len(value) <= 256):
            raise InvalidInput(f"{name}: expected 1 to 256 characters")
    claims: dict[str, Any] = {"iat": int(now), "exp": int(now + ttl)}
    if agent is not None:
        claims["agent"] = agent
    if subject is not None:
        claims["sub"] = subject
    signing_input = _b64(json.dumps(_HEADER, separators=(",", ":")).encode()) + "." + _b64(
        json.dumps(claims, separators=(",", ":")).encode())
    return signing_input + "." + _b64(_sign(_key_bytes(key), signing_input))


def verify_call_token(token: str, key: Secret | str, *, now: float, agent: str | None = None) -> CallClaims | AuthRefusal:
    """Check ``token`` against ``key`` at ``now`` (Unix seconds) for the agent named ``agent``:
    its claims, or why it is refused.  Never raises for any ``token``."""
    if not isinstance(token, str) or not 0 < len(token) <= MAX_TOKEN_CHARS:
        return AuthRefusal(RefusalReason.MALFORMED_TOKEN, f"expected a token of 1 to {MAX_TOKEN_CHARS} characters")
    parts = token.split(".")
    if len(parts) != 3 or not all(_B64URL.fullmatch(p) for p in parts):
        return AuthRefusal(RefusalReason.MALFORMED_TOKEN, "expected three base64url parts separated by '.'")
    try:
        signature = _unb64(parts[2])
    except (binascii.Error, ValueError):
        return AuthRefusal(RefusalReason.MALFORMED_TOKEN, "the signature is not base64url")
    expected = _sign(_key_bytes(key), parts[0] + "." + parts[1])
    if not hmac.compare_digest(signature, expected):
        return AuthRefusal(RefusalReason.INVALID_TOKEN, "the signature does not match")
    # Signed with our key from here on; the claims are still checked for shape.
    try:
        header = json.loads(_unb64(parts[0]))
        payload = json.loads(_unb64(parts[1]))
    except (binascii.Error, ValueError, RecursionError):
        return AuthRefusal(RefusalReason.MALFORMED_TOKEN, "the header or the claims are not JSON")
    if not isinstance(header, dict) or header.get("alg") != "HS256":
        return AuthRefusal(RefusalReason.MALFORMED_TOKEN, "the header does not name alg HS256")
    if not isinstance(payload, dict):
        return AuthRefusal(RefusalReason.MALFORMED_TOKEN, "the claims are not a JSON object")
    claims = _claims(payload)
    if isinstance(claims, AuthRefusal):
        return claims
    if now >= claims.expires + LEEWAY:
        return AuthRefusal(RefusalReason.EXPIRED_TOKEN, f"expired {now - claims.expires:.0f} s ago")
    if claims.not_before is not None and now + LEEWAY < claims.not_before:
        return AuthRefusal(RefusalReason.TOKEN_NOT_YET_VALID, f"valid in {claims.not_before - now:.0f} s")
    if agent is not None and claims.agent is not None and claims.agent != agent:
        return AuthRefusal(RefusalReason.WRONG_AGENT, f"the token is for agent {_shown(claims.agent)}, not {agent!r}")
    return claims


def _claims(payload: dict[str, Any]) -> CallClaims | AuthRefusal:
    times: dict[str, float | None] = {}
    for name in ("exp", "iat", "nbf"):
        value = payload.get(name)
        if value is None and name != "exp":
            times[name] = None
        elif isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < _MAX_SECONDS:
            times[name] = float(value)  # NaN fails the comparison above
        else:
            return AuthRefusal(RefusalReason.MALFORMED_TOKEN, f"claim {name!r} is not a number of seconds")
    texts: dict[str, str | None] = {}
    for name in ("agent", "sub"):
        value = payload.get(name)
        if value is not None and not isinstance(value, str):
            return AuthRefusal(RefusalReason.MALFORMED_TOKEN, f"claim {name!r} is not a string")
        texts[name] = value
    expires = times["exp"]
    assert expires is not None
    return CallClaims(expires=expires, issued=times["iat"], not_before=times["nbf"], agent=texts["agent"],
                      subject=texts["sub"])


# --- the server's credentials ---------------------------------------------------------------


def _digest(token: str) -> bytes:
    return hmac.new(_COMPARE_KEY, token.encode("utf-8", "surrogatepass"), hashlib.sha256).digest()


class Authenticator:
    """The server's credential check: ``mode``, the static tokens (``bearer``; also accepted in
    ``signed`` mode, e.g. for a metrics scraper), the signing key (``signed``) and the agent
    signed tokens must name (when they name one)."""

    __slots__ = ("_digests", "_key", "agent", "mode")

    def __init__(self, mode: AuthMode, *, tokens: Sequence[Secret] = (), key: Secret | None = None,
                 agent: str | None = None) -> None:
        if mode is AuthMode.BEARER and not tokens:
            raise InvalidInput("auth mode 'bearer' needs at least one static token")
        if mode is AuthMode.SIGNED:
            if key is None:
                raise InvalidInput("auth mode 'signed' needs a signing key")
            _key_bytes(key)
        self.mode = mode
        self.agent = agent
        self._digests = tuple(_digest(t.reveal()) for t in tokens) if mode is not AuthMode.NONE else ()
        self._key = key if mode is AuthMode.SIGNED else None

    @property
    def required(self) -> bool:
        return self.mode is not AuthMode.NONE

    def check(self, token: str | None, now: float) -> AuthRefusal | None:
        """None when ``token`` (None: none was given) lets the caller in at ``now``; else why not."""
        if not self.required:
            return None
        if token is None:
            return AuthRefusal(RefusalReason.MISSING_TOKEN, "this server needs a token")
        candidate = _digest(token)
        matched = False
        for known in self._digests:  # every one, so the time does not say which matched
            matched |= hmac.compare_digest(candidate, known)
        if matched:
            return None
        if self._key is None:
            return AuthRefusal(RefusalReason.INVALID_TOKEN, "not a known token")
        verdict = verify_call_token(token, self._key, now=now, agent=self.agent)
        return verdict if isinstance(verdict, AuthRefusal) else None


def token_from_query(query_string: bytes) -> str | AuthRefusal | None:
    """The ``token`` parameter of a URL's query (what Pipecat's WebSocketTransport sends); None
    when there is none.  Refused: an empty one, more than one, one longer than MAX_TOKEN_CHARS or
    a query that is not UTF-8."""
    try:
        query = query_string.decode("utf-8")
    except UnicodeDecodeError:
        return AuthRefusal(RefusalReason.MALFORMED_TOKEN, "the query string is not UTF-8")
    try:
        values = parse_qs(query, keep_blank_values=True, max_num_fields=64).get("token") if query else None
    except ValueError:  # more fields than max_num_fields
        return AuthRefusal(RefusalReason.MALFORMED_TOKEN, "the query string has too many parameters")
    if not values:
        return None
    if len(values) > 1:
        return AuthRefusal(RefusalReason.MALFORMED_TOKEN, "more than one token parameter in the URL")
    if not values[0] or len(values[0]) > MAX_TOKEN_CHARS:
        return AuthRefusal(RefusalReason.MALFORMED_TOKEN, "the URL's token parameter is empty or too long")
    return values[0]


def without_query_token(query_string: bytes) -> bytes:
    """The query without its ``token`` parameter (nothing downstream can log it)."""
    kept = [(k, v) for k, v in parse_qsl(query_string.decode("utf-8", "replace"), keep_blank_values=True)
            if k != "token"]
    return urlencode(kept).encode("ascii")


def credential_from(authorization: str | None, subprotocols: Iterable[str]) -> str | AuthRefusal | None:
    """The token a request carries: ``Authorization: Bearer <token>`` first, else a
    ``brisvox.token.<token>`` subprotocol; None when it carries none."""
    if authorization is not None:
        scheme, _, value = authorization.strip().partition(" ")
        value = value.strip()
        if scheme.lower() != "bearer" or not value:
            return AuthRefusal(RefusalReason.MALFORMED_TOKEN, "the Authorization header is not 'Bearer <token>'")
        return value
    for offered in subprotocols:
        if offered.startswith(TOKEN_SUBPROTOCOL_PREFIX):
            value = offered[len(TOKEN_SUBPROTOCOL_PREFIX):]
            if not value:
                return AuthRefusal(RefusalReason.MALFORMED_TOKEN, "an empty brisvox.token. subprotocol")
            return value
    return None


# --- Host and Origin ------------------------------------------------------------------------


def is_loopback(host: str) -> bool:
    """Whether the listener address ``host`` accepts only local connections."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """Whether the listener address ``host`` listens on every address (0.0.0.0, ::)."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def host_name(host: str) -> str:
    """The name in a ``Host`` header or an allowed-hosts entry: no port, no brackets, lower case."""
    text = host.strip().lower()
    if text.startswith("["):
        end = text.find("]")
        return text[1:end] if end > 0 else text
    name, sep, port = text.rpartition(":")
    if sep and port.isdigit() and ":" not in name:
        text = name
    return text.rstrip(".")


def check_host(host: str | None, allowed: frozenset[str]) -> AuthRefusal | None:
    """None when the ``Host`` header ``host`` names one of ``allowed`` (names from :func:`host_name`;
    :data:`ANY` allows every host)."""
    if ANY in allowed:
        return None
    if host is None:
        return AuthRefusal(RefusalReason.HOST_NOT_ALLOWED, "the request has no Host header")
    if host_name(host) in allowed:
        return None
    return AuthRefusal(RefusalReason.HOST_NOT_ALLOWED, f"Host {_shown(host)} is not an allowed host")


def check_origin(origin: str | None, host: str | None, allowed: frozenset[str]) -> AuthRefusal | None:
    """None for a request without ``Origin`` (not a browser), from the server's own origin
    (``Origin``'s host and port equal ``Host``) or from one of ``allowed`` (lower-case
    ``scheme://host[:port]``; :data:`ANY` allows every origin)."""
    if origin is None or ANY in allowed:
        return None
    lowered = origin.strip().lower()
    if lowered in allowed:
        return None
    _, sep, netloc = lowered.partition("://")
    if sep and host is not None and netloc == host.strip().lower():
        return None
    return AuthRefusal(RefusalReason.ORIGIN_NOT_ALLOWED, f"Origin {_shown(origin)} is not an allowed origin")
