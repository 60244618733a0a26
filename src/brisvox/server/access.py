"""Who gets in: the Host, Origin and credential checks, an ASGI middleware over the app.

:class:`AccessGuard` runs the pure checks of :mod:`brisvox.server.auth` on every request
before routing, so a refused request reaches neither admission nor a route:

* ``/healthz`` and ``/readyz`` are open (probes use any Host);
* every other request needs an allowed ``Host`` (403 ``host_not_allowed``);
* a WebSocket upgrade also needs an allowed ``Origin`` (403 ``origin_not_allowed``) and,
  when the server requires authentication, a valid token (401, or 403 ``wrong_agent``); so
  does every request under a ``call_paths`` prefix (WebRTC signaling) but its CORS preflight;
* ``/metrics``, ``/agent.json`` and everything under ``/api/`` (the calls and their control) need a
  token when the server requires authentication;
* on a WebSocket path in ``query_token`` (RTVI's ``/rtvi``: Pipecat's JS transport can put
  its token nowhere else) the token may also come as ``?token=``; the guard removes it from
  the query before the app sees it;
* a WebSocket path in ``self_authenticating`` (a carrier's stream, such as Twilio's, whose
  endpoint checks the carrier's signature itself) needs an allowed ``Host`` only: no Origin
  (carriers send none) and no brisvox token (carriers cannot send one).

A refusal is answered before the WebSocket upgrade (an HTTP denial response when the ASGI
server supports it, as uvicorn does; otherwise a close before accept, which the server
turns into a 403), with ``<reason>: <detail>`` as the body, counted in
``brisvox_auth_refused_total{reason}`` (one under a ``call_paths`` prefix also through
``signaling_refused``: ``brisvox_signaling_refused_total{reason}``) and logged (never with the token) through a
:class:`~brisvox.core.ratelog.RateLimitedLog`: one line at most every ``LOG_INTERVAL``
seconds with the counts since the last, so a client repeating refused requests cannot
flood the log.  A call
that passes has its credential removed from the scope (the ``Authorization`` header and
the ``brisvox.token.`` subprotocol), and the server selects the ``brisvox`` subprotocol
when the client offered it (browsers fail a connection whose offered subprotocols all go
unanswered).

:func:`exposure_problem` is the start-up rule: no authentication only on a loopback address,
unless the operator says ``--insecure``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from starlette.websockets import WebSocket

from brisvox.core.ratelog import RateLimitedLog
from brisvox.server.auth import (
    LOOPBACK_NAMES,
    PROTOCOL,
    TOKEN_SUBPROTOCOL_PREFIX,
    Authenticator,
    AuthMode,
    AuthRefusal,
    RefusalReason,
    check_host,
    check_origin,
    credential_from,
    is_loopback,
    is_wildcard,
    token_from_query,
    without_query_token,
)
from brisvox.server.settings import Settings

__all__ = [
    "OPEN_PATHS", "PRIVATE_PATHS", "PRIVATE_PREFIX", "AccessGuard", "AccessPolicy", "RefusalCounter", "exposure_problem", "exposure_warnings",
]

log = logging.getLogger(__name__)

OPEN_PATHS = frozenset({"/healthz", "/readyz"})
PRIVATE_PATHS = frozenset({"/metrics", "/agent.json"})
PRIVATE_PREFIX = "/api/"
"""Every path under it needs a token when the server requires authentication (the calls' data and control)."""
_HOW = " (send Authorization: Bearer <token>, or offer the subprotocols brisvox and brisvox.token.<token>)"
_POLICY_CLOSE = 1008
_CHALLENGE = {"WWW-Authenticate": 'Bearer realm="brisvox"'}
_MAX_PATH_SHOWN = 80


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """What :class:`AccessGuard` checks; ``wall`` gives Unix seconds (token expiry is wall time)."""

    auth: Authenticator
    allowed_hosts: frozenset[str]
    allowed_origins: frozenset[str]
    wall: Callable[[], float]
    self_authenticating: frozenset[str] = frozenset()
    """WebSocket paths whose endpoint checks its own credential (see the module docs)."""
    query_token: frozenset[str] = frozenset()
    """WebSocket paths that also take the token as ``?token=`` (RTVI: see the module docs)."""
    call_paths: frozenset[str] = frozenset()
    """HTTP paths (and everything under them) that start or end calls (WebRTC signaling): checked
    like a call upgrade (Origin and token), except the ``OPTIONS`` preflight (browsers send no token)."""

    @classmethod
    def from_settings(cls, settings: Settings, *, agent: str | None, wall: Callable[[], float]) -> AccessPolicy:
        auth = Authenticator(settings.auth, tokens=settings.auth_tokens, key=settings.auth_secret, agent=agent)
        return cls(auth=auth, allowed_hosts=settings.host_names, allowed_origins=settings.allowed_origins, wall=wall)


    def describe(self) -> str:
        """The policy in one line for the start-up log (no credential)."""
        hosts = ", ".join(sorted(self.allowed_hosts))
        origins = "".join(f", {o}" for o in sorted(self.allowed_origins))
        return (f"auth {self.auth.mode.value}; hosts {hosts}; origins: the server's own{origins}; "
                f"{', '.join(sorted(PRIVATE_PATHS))}, {PRIVATE_PREFIX}* {'need a token' if self.auth.required else 'open'}")


class RefusalCounter(Protocol):
    """Where refusals are counted (a :class:`~brisvox.server.metrics.ServerMetrics`)."""

    def record_auth_refusal(self, reason: str) -> None: ...


def exposure_problem(settings: Settings, *, insecure: bool) -> str | None:
    """Why the server must not start as configured (None: it may).  Without authentication it
    listens only on a loopback address, unless ``insecure``."""
    if settings.auth is not AuthMode.NONE or is_loopback(settings.host) or insecure:
        return None
    return (f"BRISVOX_HOST={settings.host} is not a loopback address and BRISVOX_AUTH=none: anyone who reaches "
            f"it could start calls on your providers' accounts. Set BRISVOX_AUTH=bearer or signed "
            f"(docs/OPERATIONS.md, Security), or pass --insecure to serve without authentication anyway")


def exposure_warnings(settings: Settings, *, insecure: bool) -> list[str]:
    """What the operator should know about how exposed the server is as configured."""
    warnings = []
    if insecure and settings.auth is AuthMode.NONE and not is_loopback(settings.host):
        warnings.append(f"--insecure: serving without authentication on {settings.host}; anyone who reaches it "
                        f"can start calls")
    if not settings.allowed_hosts and is_wildcard(settings.host):
        warnings.append(f"BRISVOX_HOST={settings.host} listens on every address, but requests are answered only "
                        f"for Host {', '.join(sorted(LOOPBACK_NAMES))} until BRISVOX_ALLOWED_HOSTS names the "
                        f"hosts clients use (or '*')")
    return warnings


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the first of repeated ones)."""
    out: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        out.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return out


class AccessGuard:
    """The ASGI middleware (see the module docs)."""

    def __init__(self, app: ASGIApp, policy: AccessPolicy, metrics: RefusalCounter,
                 signaling_refused: Callable[[str], None] | None = None) -> None:
        self.app = app
        self.policy = policy
        self.metrics = metrics
        self.signaling_refused = signaling_refused  # counts refusals under call_paths (WebRTC signaling)
        self._log = RateLimitedLog(log, "access refused", policy.wall)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        path = _route_path(scope)
        if kind not in ("http", "websocket") or path in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        host = headers.get("host")
        refusal = check_host(host, self.policy.allowed_hosts)
        if refusal is None and kind == "websocket" and path in self.policy.self_authenticating:
            await self.app(scope, receive, send)  # the endpoint checks the carrier's signature
            return
        offered: list[str] = list(scope.get("subprotocols", ()))
        call = kind == "websocket" or (scope.get("method") != "OPTIONS" and _under(path, self.policy.call_paths))
        if refusal is None and call:
            refusal = check_origin(headers.get("origin"), host, self.policy.allowed_origins)
        query: bytes | None = scope.get("query_string", b"") if kind == "websocket" and path in \
            self.policy.query_token else None
        if refusal is None and (call or path in PRIVATE_PATHS or path.startswith(PRIVATE_PREFIX)):
            refusal = self._credential(headers.get("authorization"), offered if kind == "websocket" else [], query)
        if refusal is not None:
            await self._refuse(scope, receive, send, refusal)
            return
        if kind == "websocket":
            scope, send = _without_credential(scope, send, offered)
            if query:
                scope = {**scope, "query_string": without_query_token(query)}
        await self.app(scope, receive, send)

    def _credential(self, authorization: str | None, offered: list[str], query: bytes | None) -> AuthRefusal | None:
        auth = self.policy.auth
        if not auth.required:
            return None
        token = credential_from(authorization, offered)
        if token is None and query:
            token = token_from_query(query)
        if isinstance(token, AuthRefusal):
            return token
        refusal = auth.check(token, self.policy.wall())
        if refusal is not None and refusal.reason is RefusalReason.MISSING_TOKEN:
            return AuthRefusal(refusal.reason, refusal.detail + _HOW)
        return refusal

    async def _refuse(self, scope: Scope, receive: Receive, send: Send, refusal: AuthRefusal) -> None:
        self.metrics.record_auth_refusal(refusal.reason.value)
        if self.signaling_refused is not None and scope["type"] == "http" and \
                _under(_route_path(scope), self.policy.call_paths):
            self.signaling_refused(refusal.reason.value)
        client = scope.get("client")
        path = repr(scope.get("path", ""))[:_MAX_PATH_SHOWN]
        peer = f"{client[0]}:{client[1]}" if client else "unknown"
        self._log.note(f"{refusal.status} {refusal.reason.value}",
                       f"{scope['type']} {path} from {peer}: {refusal.detail}")
        response = PlainTextResponse(f"{refusal.reason.value}: {refusal.detail}\n", status_code=refusal.status,
                                     headers=_CHALLENGE if refusal.status == 401 else None)
        if scope["type"] == "http":
            await response(scope, receive, send)
        elif "websocket.http.response" in scope.get("extensions", {}):
            await WebSocket(scope, receive, send).send_denial_response(response)
        else:
            await send({"type": "websocket.close", "code": _POLICY_CLOSE, "reason": refusal.reason.value})

def _under(path: str, prefixes: frozenset[str]) -> bool:
    return any(path == p or path.startswith(p + "/") for p in prefixes)


def _route_path(scope: Scope) -> str:
    """The path inside this app: mounted under a prefix (``root_path``), the path without it."""
    path: str = scope.get("path", "")
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root):len(root) + 1] in ("", "/"):
        return path[len(root):]
    return path


def _without_credential(scope: Scope, send: Send, offered: list[str]) -> tuple[Scope, Send]:
    """The scope without the token (nothing downstream can log it) and a ``send`` that selects
    :data:`PROTOCOL` when the client offered it."""
    kept = [p for p in offered if not p.startswith(TOKEN_SUBPROTOCOL_PREFIX)]
    headers = [(k, v) for k, v in scope.get("headers", ()) if k.lower() != b"authorization"]
    scope = {**scope, "subprotocols": kept, "headers": headers}
    if PROTOCOL not in kept:
        return scope, send

    async def send_selecting(message: Message) -> None:
        if message["type"] == "websocket.accept" and not message.get("subprotocol"):
            message = {**message, "subprotocol": PROTOCOL}
        await send(message)

    return scope, send_selecting
