"""The Twilio Media Streams endpoint of ``brisvox serve`` (route ``BRISVOX_TWILIO_PATH``).

Admission is the app's, exactly as for the WebSocket call route (a full server answers
503 before the upgrade).  Then, before the upgrade is accepted, the ``X-Twilio-Signature``
header is checked when an auth token is configured: HMAC-SHA1 with the account's auth
token over the public ``wss://`` URL Twilio connected to (``BRISVOX_TWILIO_PUBLIC_URL``,
plus the request's query string when it has one), compared in constant time.  A missing
or wrong signature is refused with 403 (counted, logged once, never with the header).
Because the signature is this route's credential, the AccessGuard lets the path through
without an Origin or token check (``AccessPolicy.self_authenticating``), but only when
the token is configured.

With ``admit`` (``brisvox serve`` passes :func:`brisvox.server.webhooks.stream_token_check`
when its incoming-call webhook mints call tokens), a stream's ``start`` must also carry a
valid call token for its own ``callSid`` in its ``token`` parameter (closed 1008 otherwise),
so a captured upgrade signature cannot be replayed for another call.

An accepted stream runs :func:`brisvox.transport.twilio.run_call`; its call link is
handed to the session manager wrapped by ``session_item`` (``brisvox serve`` wraps it in
an :class:`~brisvox.server.call.EngineCall` whose event side is silent: Twilio takes no
messages but media, mark and clear).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from starlette.responses import PlainTextResponse
from starlette.websockets import WebSocket

from brisvox.core.clock import Clock
from brisvox.server.session import SessionSlot
from brisvox.server.ws_endpoint import LiveCalls, StarletteWsPeer
from brisvox.transport.link import CallLink
from brisvox.transport.telephony import UpgradeRefusal
from brisvox.transport.twilio import TwilioConfig, TwilioStats, run_call, signature_valid
from brisvox.transport.twilio.protocol import StreamStart
from brisvox.transport.websocket import ServerConfig

__all__ = ["SIGNATURE_HEADER", "TwilioEndpoint", "check_signature", "deny"]

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "x-twilio-signature"
_POLICY_CLOSE = 1008


def check_signature(config: TwilioConfig, headers: dict[str, str], query: str) -> UpgradeRefusal | None:
    """Why the upgrade is refused (None: it is signed, or no auth token is configured)."""
    if config.auth_token is None:
        return None
    url = (config.public_url or "") + (f"?{query}" if query else "")
    given = headers.get(SIGNATURE_HEADER)
    if given is None:
        return UpgradeRefusal(403, "missing_signature", "the upgrade has no X-Twilio-Signature header")
    if not signature_valid(config.auth_token.reveal(), url, given):
        return UpgradeRefusal(403, "bad_signature",
                              "X-Twilio-Signature does not sign the public URL with the configured auth token "
                              "(check BRISVOX_TWILIO_PUBLIC_URL and BRISVOX_TWILIO_AUTH_TOKEN)")
    return None


class TwilioEndpoint(LiveCalls):
    """A :class:`~brisvox.server.app.CallEndpoint` for Twilio streams (see the module docs); :meth:`close`
    closes (1001) every stream still connected."""

    def __init__(self, clock: Clock, config: ServerConfig, twilio: TwilioConfig,
                 session_item: Callable[[CallLink], object] = lambda link: link,
                 admit: Callable[[StreamStart], str | None] | None = None) -> None:
        twilio.validate()
        self._admit = admit
        super().__init__()
        self.clock = clock
        self.config = config
        self.twilio = twilio
        self.stats = TwilioStats()
        self._item = session_item

    @property
    def self_authenticating(self) -> bool:
        """Whether the route checks its own credential (the signature), so the AccessGuard may skip its token check."""
        return self.twilio.auth_token is not None

    async def __call__(self, websocket: WebSocket, slot: SessionSlot[Any], /) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in websocket.scope.get("headers", ())}
        refusal = check_signature(self.twilio, headers, websocket.scope.get("query_string", b"").decode("latin-1"))
        if refusal is not None:
            self.stats.refused_signature += 1
            client = websocket.client
            log.warning("refused a Twilio stream from %s: %s", f"{client.host}:{client.port}" if client else "unknown",
                        refusal.reason)
            await deny(websocket, refusal)
            return
        await websocket.accept()
        peer = StarletteWsPeer(websocket)

        async def deliver(link: CallLink) -> bool:
            slot.spawn(self._item(link), name="twilio-call")
            return True

        await run_call(peer, clock=self.clock, config=self.config, twilio=self.twilio, deliver=deliver,
                       shutdown=self._shutdown, stats=self.stats, register=self._register, admit=self._admit)


async def deny(websocket: WebSocket, refusal: UpgradeRefusal) -> None:
    """Refuse the upgrade with an HTTP response (a close frame where the server cannot send one)."""
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(PlainTextResponse(refusal.body(), status_code=refusal.status))
    else:
        await websocket.close(code=_POLICY_CLOSE, reason=refusal.reason)
