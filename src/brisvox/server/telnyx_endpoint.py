"""The Telnyx media streaming endpoint of ``brisvox serve`` (route ``BRISVOX_TELNYX_PATH``).

Admission is the app's, as for the WebSocket call route (a full server answers 503 before
the upgrade).  With an auth token configured (``BRISVOX_TELNYX_AUTH_TOKEN``, Telnyx's
``stream_auth_token``), a wrong ``x-telnyx-streaming-auth-token`` upgrade header is refused
with 401 (counted, logged once, never with the header); a missing header defers the check
to the ``connected`` message (:func:`brisvox.transport.telnyx.run_call`).  Because the token
is this route's credential, the AccessGuard lets the path through without its own check
(``AccessPolicy.self_authenticating``), but only when the token is configured.

One :class:`~brisvox.transport.telnyx.CallRegistry` per endpoint refuses a second stream for
a call (1008).  ``brisvox serve`` holds no Telnyx API key, so it passes no hang-up hook
(``hangups_skipped`` counts the calls it could not end at Telnyx; a host embedding the app
passes one in :class:`~brisvox.transport.telnyx.TelnyxConfig`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from starlette.websockets import WebSocket

from brisvox.core.clock import Clock
from brisvox.server.session import SessionSlot
from brisvox.server.twilio_endpoint import deny
from brisvox.server.ws_endpoint import LiveCalls, StarletteWsPeer
from brisvox.transport.link import CallLink
from brisvox.transport.telephony import UpgradeRefusal, secret_equal
from brisvox.transport.telnyx import AUTH_HEADER, CallRegistry, TelnyxConfig, TelnyxStats, run_call
from brisvox.transport.websocket import ServerConfig

__all__ = ["TelnyxEndpoint", "check_token"]

log = logging.getLogger(__name__)


def check_token(config: TelnyxConfig, headers: dict[str, str]) -> UpgradeRefusal | bool:
    """A refusal for a wrong upgrade token; else whether the header proved the stream
    (False: no token configured, or none in the header: ``connected`` must carry it)."""
    if config.auth_token is None:
        return False
    given = headers.get(AUTH_HEADER)
    if given is None:
        return False
    if not secret_equal(given, config.auth_token.reveal()):
        return UpgradeRefusal(401, "bad_token", f"{AUTH_HEADER} does not match BRISVOX_TELNYX_AUTH_TOKEN")
    return True


class TelnyxEndpoint(LiveCalls):
    """A :class:`~brisvox.server.app.CallEndpoint` for Telnyx streams (see the module docs); :meth:`close`
    closes (1001) every stream still connected."""

    def __init__(self, clock: Clock, config: ServerConfig, telnyx: TelnyxConfig,
                 session_item: Callable[[CallLink], object] = lambda link: link) -> None:
        telnyx.validate()
        super().__init__()
        self.clock = clock
        self.config = config
        self.telnyx = telnyx
        self.stats = TelnyxStats()
        self.registry = CallRegistry()
        self._item = session_item

    @property
    def self_authenticating(self) -> bool:
        """Whether the route checks its own credential (the stream token), so the AccessGuard may skip its check."""
        return self.telnyx.auth_token is not None

    async def __call__(self, websocket: WebSocket, slot: SessionSlot[Any], /) -> None:
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in websocket.scope.get("headers", ())}
        proof = check_token(self.telnyx, headers)
        if isinstance(proof, UpgradeRefusal):
            self.stats.refused_auth += 1
            client = websocket.client
            log.warning("refused a Telnyx stream from %s: %s", f"{client.host}:{client.port}" if client else "unknown",
                        proof.reason)
            await deny(websocket, proof)
            return
        await websocket.accept()
        peer = StarletteWsPeer(websocket)

        async def deliver(link: CallLink) -> bool:
            slot.spawn(self._item(link), name="telnyx-call")
            return True

        await run_call(peer, clock=self.clock, config=self.config, telnyx=self.telnyx, deliver=deliver,
                       shutdown=self._shutdown, stats=self.stats, registry=self.registry, header_ok=proof,
                       register=self._register)
