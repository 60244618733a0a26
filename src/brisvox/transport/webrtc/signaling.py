"""WHIP-style signaling without I/O (pure): the offer's checks, TURN credentials, Link headers,
and the per-address limits.

* :func:`parse_offer` takes a POST's ``Content-Type`` and body and returns the SDP to answer or
  a :class:`SignalingRefusal` (status and reason): ``application/sdp`` only (415), at most
  ``max_body`` bytes (413), UTF-8 (400), an SDP session (``v=0``) with exactly one ``m=audio``
  section, at most one ``m=application`` (the page's event channel) and nothing else (400), at most ``MAX_LINES`` lines of at most ``MAX_LINE`` bytes
  (400).  ICE candidates naming an mDNS host (``*.local``) are removed: the server never
  resolves names a browser hands it.
* :func:`turn_credentials`: coturn's REST formula (``use-auth-secret``): the username is
  ``<expiry unix time>:<user>``, the password base64(HMAC-SHA1(secret, username)).
* :func:`link_headers` / :func:`ice_json`: the ICE servers as RFC 9725 ``Link: rel="ice-server"``
  headers (on the 201) and as the JSON an ``RTCConfiguration.iceServers`` takes.
* :class:`OfferRate` (a token bucket per address, bounded table) and :class:`AddressCalls`
  (live calls per address).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "MAX_LINE",
    "MAX_LINES",
    "AddressCalls",
    "IceServer",
    "OfferRate",
    "SignalingRefusal",
    "ice_json",
    "link_headers",
    "parse_offer",
    "turn_credentials",
]

MAX_LINES = 400
MAX_LINE = 3072
_QUOTE_UNSAFE = frozenset('"\\\r\n')


@dataclass(frozen=True, slots=True)
class SignalingRefusal:
    """Why a request is refused: the HTTP status and a reason for the body (no secret in it)."""

    status: int
    reason: str
    detail: str

    def body(self) -> str:
        return f"{self.reason}: {self.detail}\n"


def parse_offer(content_type: str | None, body: bytes, *, max_body: int) -> str | SignalingRefusal:
    """The offer's SDP to answer (mDNS candidates removed), or why it is refused."""
    media_type = (content_type or "").split(";", 1)[0].strip().lower()
    if media_type != "application/sdp":
        return SignalingRefusal(415, "unsupported_media_type",
                                f"the offer must be Content-Type application/sdp, not {media_type[:40]!r}")
    if len(body) > max_body:
        return SignalingRefusal(413, "offer_too_large", f"the offer is over {max_body} bytes")
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return SignalingRefusal(400, "bad_offer", "the offer is not UTF-8")
    lines = text.replace("\r\n", "\n").split("\n")
    while lines and lines[-1] == "":
        lines.pop()
    if len(lines) > MAX_LINES:
        return SignalingRefusal(400, "bad_offer", f"the offer has more than {MAX_LINES} lines")
    if not lines or lines[0].strip() != "v=0":
        return SignalingRefusal(400, "bad_offer", "the offer is not an SDP session (no v=0 first)")
    kept: list[str] = []
    media: list[str] = []
    for line in lines:
        if len(line) > MAX_LINE:
            return SignalingRefusal(400, "bad_offer", f"an offer line is over {MAX_LINE} bytes")
        if "\x00" in line or "\r" in line:
            return SignalingRefusal(400, "bad_offer", "the offer holds control characters")
        if len(line) < 2 or line[1] != "=":
            return SignalingRefusal(400, "bad_offer", f"an offer line is not <type>=<value>: {line[:40]!r}")
        if line.startswith("m="):
            media.append(line[2:].split(" ", 1)[0])
        if line.startswith("a=candidate:") and _mdns(line):
            continue
        kept.append(line)
    if media.count("audio") != 1 or media.count("application") > 1 or len(media) != 1 + media.count("application"):
        return SignalingRefusal(400, "bad_offer", f"the offer must hold exactly one audio section (and at most one "
                                                  f"data channel section), not {media[:8]}")
    return "\r\n".join(kept) + "\r\n"


def _mdns(candidate: str) -> bool:
    parts = candidate.split()
    return len(parts) > 4 and parts[4].lower().endswith(".local")


def turn_credentials(secret: str, user: str, *, now: float, ttl: int) -> tuple[str, str]:
    """coturn's REST credentials: (``<expiry>:<user>``, base64(HMAC-SHA1(secret, username)))."""
    username = f"{int(now) + ttl}:{user}"
    digest = hmac.new(secret.encode(), username.encode(), hashlib.sha1).digest()
    return username, base64.b64encode(digest).decode("ascii")


@dataclass(frozen=True, slots=True)
class IceServer:
    """One entry of ``iceServers``; ``username``/``credential`` for TURN."""

    urls: tuple[str, ...]
    username: str | None = None
    credential: str | None = None


def link_headers(servers: list[IceServer]) -> list[str]:
    """RFC 9725 section 4.6: one ``Link`` value per URL."""
    out = []
    for server in servers:
        for url in server.urls:
            value = f'<{url}>; rel="ice-server"'
            if server.username is not None and server.credential is not None:
                value += (f'; username="{_quoted(server.username)}"; credential="{_quoted(server.credential)}"; '
                          f'credential-type="password"')
            out.append(value)
    return out


def _quoted(text: str) -> str:
    if any(c in _QUOTE_UNSAFE for c in text):
        raise ValueError("an ICE server credential holds a quote, backslash or line break")
    return text


def ice_json(servers: list[IceServer]) -> dict[str, Any]:
    """``{"iceServers": [...]}`` as ``RTCPeerConnection`` takes it."""
    entries: list[dict[str, Any]] = []
    for server in servers:
        entry: dict[str, Any] = {"urls": list(server.urls)}
        if server.username is not None:
            entry["username"] = server.username
            entry["credential"] = server.credential
        entries.append(entry)
    return {"iceServers": entries}


@dataclass(slots=True)
class OfferRate:
    """Offers per address: a token bucket of ``burst`` offers refilled at ``per_second``; at most
    ``max_addresses`` addresses remembered (the least recently seen forgotten)."""

    per_second: float = 1.0
    burst: float = 5.0
    max_addresses: int = 4096
    _buckets: OrderedDict[str, tuple[float, float]] = field(default_factory=OrderedDict, init=False)

    def admit(self, address: str, now: float) -> float | None:
        """None: admitted; else the seconds until the next offer would be."""
        tokens, last = self._buckets.pop(address, (self.burst, now))
        tokens = min(self.burst, tokens + max(0.0, now - last) * self.per_second)
        if tokens >= 1.0:
            tokens -= 1.0
            wait = None
        else:
            wait = (1.0 - tokens) / self.per_second
        self._buckets[address] = (tokens, now)
        while len(self._buckets) > self.max_addresses:
            self._buckets.popitem(last=False)
        return wait


@dataclass(slots=True)
class AddressCalls:
    """Live calls per address, at most ``limit`` each."""

    limit: int = 4
    _count: dict[str, int] = field(default_factory=dict, init=False)

    def take(self, address: str) -> bool:
        count = self._count.get(address, 0)
        if count >= self.limit:
            return False
        self._count[address] = count + 1
        return True

    def give_back(self, address: str) -> None:
        count = self._count.get(address, 0) - 1
        if count <= 0:
            self._count.pop(address, None)
        else:
            self._count[address] = count

    def __len__(self) -> int:
        return sum(self._count.values())
