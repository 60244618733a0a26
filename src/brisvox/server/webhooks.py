"""The incoming-call webhooks of ``brisvox serve``: a phone number pointed here reaches the agent.

* ``POST`` at the path of ``BRISVOX_TWILIO_WEBHOOK_URL`` (Twilio's "A call comes in"): the
  ``X-Twilio-Signature`` over that URL and the form is checked, and the answer is TwiML
  ``<Connect><Stream url=BRISVOX_TWILIO_PUBLIC_URL>``.
* ``POST`` at the path of ``BRISVOX_TELNYX_WEBHOOK_URL`` (a TeXML application's voice URL): the
  Ed25519 signature (``BRISVOX_TELNYX_PUBLIC_KEY``) over ``timestamp|body`` and the timestamp's
  age are checked, and the answer is TeXML ``<Connect><Stream url=BRISVOX_TELNYX_PUBLIC_URL
  bidirectionalMode="rtp" bidirectionalCodec=BRISVOX_TELNYX_CODEC>``.

Each route exists only when its signature check is configured (an unsigned webhook would hand
out call tokens to anyone).  The stream's parameters carry the agent's name (``agent``); Twilio's
also carry, when the server signs call tokens (``BRISVOX_AUTH_SECRET``), a call token (``token``)
for that agent whose subject is the call's ``CallSid``, valid :data:`CALL_TOKEN_TTL` seconds, which
the Twilio stream endpoint then requires (:func:`stream_token_check`).  Telnyx's carry no token:
its adapter reads no stream parameters, and its stream proves itself with its own auth token.

Refusals are plain text ``<reason>: <detail>`` with their status: 413 (body over
``MAX_BODY_BYTES``, by ``Content-Length`` or as read), 415 (not a form), 400 (a malformed form,
no ``CallSid``), 403 (signature); each is counted in :class:`WebhookStats` and logged at most
once per second per reason (never with the signature or the body).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from brisvox.core.secret import Secret
from brisvox.server.auth import AuthRefusal, issue_call_token, verify_call_token
from brisvox.server.settings import Settings
from brisvox.transport.telephony import UpgradeRefusal
from brisvox.transport.telephony.webhook import (
    CALL_TOKEN_PARAM,
    MAX_BODY_BYTES,
    TELNYX_SIGNATURE_HEADER,
    TELNYX_TIMESTAMP_HEADER,
    TWILIO_SIGNATURE_HEADER,
    check_telnyx,
    check_twilio,
    parse_form,
    stream_texml,
    stream_twiml,
)
from brisvox.transport.twilio.protocol import StreamStart

__all__ = ["CALL_TOKEN_TTL", "WebhookStats", "stream_token_check", "webhook_routes"]

log = logging.getLogger(__name__)

CALL_TOKEN_TTL: Final = 120.0
"""Seconds a webhook's call token is valid: the carrier opens the stream within a few seconds."""
_FORM = "application/x-www-form-urlencoded"
_XML = "application/xml"


@dataclass(slots=True)
class WebhookStats:
    answered: dict[str, int] = field(default_factory=dict)  # by carrier
    refused: dict[str, int] = field(default_factory=dict)  # by reason


class _Webhook:
    """One carrier's webhook: read, verify, answer (see the module docs)."""

    def __init__(self, carrier: str, verify: Callable[[Request, bytes, dict[str, str]], UpgradeRefusal | None],
                 answer: Callable[[dict[str, str]], str], stats: WebhookStats, wall: Callable[[], float]) -> None:
        self.carrier, self._verify, self._answer, self.stats, self._wall = carrier, verify, answer, stats, wall
        self._logged: dict[str, float] = {}

    async def handle(self, request: Request) -> Response:
        read = await self._read(request)
        if isinstance(read, UpgradeRefusal):
            return self._refuse(request, read)
        body, form = read
        refusal = self._verify(request, body, form)
        if refusal is None and not form.get("CallSid"):
            refusal = UpgradeRefusal(400, "no_call_sid", "the form has no CallSid")
        if refusal is not None:
            return self._refuse(request, refusal)
        self.stats.answered[self.carrier] = self.stats.answered.get(self.carrier, 0) + 1
        return Response(self._answer(form), media_type=_XML)

    async def _read(self, request: Request) -> tuple[bytes, dict[str, str]] | UpgradeRefusal:
        kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind != _FORM:
            return UpgradeRefusal(415, "not_a_form", f"expected Content-Type {_FORM}")
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return UpgradeRefusal(413, "too_large", f"Content-Length over {MAX_BODY_BYTES} bytes")
        body = bytearray()
        async for chunk in request.stream():  # bounded by the edge's body timeout
            body += chunk
            if len(body) > MAX_BODY_BYTES:
                return UpgradeRefusal(413, "too_large", f"the body is over {MAX_BODY_BYTES} bytes")
        form = parse_form(bytes(body))
        return form if isinstance(form, UpgradeRefusal) else (bytes(body), form)

    def _refuse(self, request: Request, refusal: UpgradeRefusal) -> Response:
        self.stats.refused[refusal.reason] = self.stats.refused.get(refusal.reason, 0) + 1
        now = self._wall()
        if now - self._logged.get(refusal.reason, -1e9) >= 1.0:
            self._logged[refusal.reason] = now
            client = request.client
            log.warning("refused a %s webhook from %s: %s (%s)", self.carrier,
                        f"{client.host}:{client.port}" if client else "unknown", refusal.reason, refusal.detail)
        return PlainTextResponse(refusal.body(), status_code=refusal.status)


def _parameters(settings: Settings, agent: str, form: dict[str, str], wall: float) -> dict[str, str]:
    params = {"agent": agent}
    if settings.auth_secret is not None:
        params[CALL_TOKEN_PARAM] = issue_call_token(settings.auth_secret, now=wall, ttl=CALL_TOKEN_TTL, agent=agent,
                                                    subject=form["CallSid"][:256])
    return params


def webhook_routes(settings: Settings, agent: str, wall: Callable[[], float],
                   stats: WebhookStats | None = None) -> list[Route]:
    """The webhook routes the settings configure (none, one or two); ``wall``: Unix seconds."""
    stats = stats if stats is not None else WebhookStats()
    routes: list[Route] = []
    twilio_token, stream_url = settings.twilio_auth_token, settings.twilio_public_url
    if settings.twilio_webhook_url is not None and twilio_token is not None and stream_url is not None:
        url = settings.twilio_webhook_url

        def verify_twilio(request: Request, body: bytes, form: dict[str, str]) -> UpgradeRefusal | None:
            return check_twilio(twilio_token.reveal(), url, form, request.headers.get(TWILIO_SIGNATURE_HEADER))

        def answer_twilio(form: dict[str, str]) -> str:
            return stream_twiml(stream_url, _parameters(settings, agent, form, wall()))

        routes.append(Route(urlsplit(url).path or "/", _Webhook("twilio", verify_twilio, answer_twilio, stats, wall).handle,
                            methods=["POST"]))
    key, telnyx_url = settings.telnyx_public_key, settings.telnyx_public_url
    if settings.telnyx_webhook_url is not None and key is not None and telnyx_url is not None:

        def verify_telnyx(request: Request, body: bytes, form: dict[str, str]) -> UpgradeRefusal | None:
            return check_telnyx(key, body, request.headers.get(TELNYX_SIGNATURE_HEADER),
                                request.headers.get(TELNYX_TIMESTAMP_HEADER), wall())

        def answer_telnyx(form: dict[str, str]) -> str:
            # No call token: the Telnyx adapter reads no stream parameters (the stream proves itself with
            # BRISVOX_TELNYX_AUTH_TOKEN), and a token nobody checks would only travel.
            return stream_texml(telnyx_url, settings.telnyx_codec, {"agent": agent})

        routes.append(Route(urlsplit(settings.telnyx_webhook_url).path or "/",
                            _Webhook("telnyx", verify_telnyx, answer_telnyx, stats, wall).handle, methods=["POST"]))
    return routes


def stream_token_check(key: Secret, agent: str, wall: Callable[[], float]) -> Callable[[StreamStart], str | None]:
    """The Twilio stream's ``admit``: its ``token`` parameter must be a valid call token for
    ``agent`` whose subject is the stream's ``callSid``; returns why not (None: admitted)."""

    def admit(start: StreamStart) -> str | None:
        token = start.custom_parameters.get(CALL_TOKEN_PARAM)
        if token is None:
            return "no call token in the stream's parameters"
        claims = verify_call_token(token, key, now=wall(), agent=agent)
        if isinstance(claims, AuthRefusal):
            return f"call token refused ({claims.reason.value})"
        if claims.subject != start.call_sid:
            return "the call token is for another call"
        return None

    return admit
