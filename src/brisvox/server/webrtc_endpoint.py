"""WHIP-style signaling for browsers over WebRTC, on the server's port (docs/WEBRTC.md).

Routes under ``WhipConfig.path`` (default ``/whip``):

* ``POST <path>`` with an SDP offer (``application/sdp``) -> ``201`` with the answer,
  ``Location: <path>/<call id>`` and one ``Link: rel="ice-server"`` header per ICE server URL
  (TURN credentials from the coturn shared secret when configured).  Before any work: the
  request's header bytes (431), the offer rate of the address (429 + ``Retry-After``), the
  body size (413, read with a deadline), the offer itself
  (:func:`~brisvox.transport.webrtc.signaling.parse_offer`: 415/400), the calls of the
  address (429), then the server's admission (503 + ``Retry-After``).  The answer's
  gathering is bounded (503 when it runs out).
* ``DELETE <path>/<call id>``: hang up (``200``; ``404`` for an unknown call).
* ``GET <path>/ice``: ``{"iceServers": [...]}`` for the page (``no-store``).
* ``OPTIONS`` on each: the CORS preflight (``204``) for an allowed Origin.

The AccessGuard checks Host, Origin and the bearer token of every request under the path
except ``OPTIONS`` (``AccessPolicy.call_paths``) before it gets here.  Every refusal (the
guard's on this path too) and every offer abandoned unconnected (``connect_timeout``) is
counted in ``brisvox_signaling_refused_total{reason}`` (the reason the body names).  A call whose
Opus encoder failed is counted in ``brisvox_engine_failures_total{stage="webrtc_encoder",fatal="true"}``.

The call runs in the POST's own request task after the response is sent (``_Answer``), as
a WebSocket call runs in its connection's task (a response that could not be sent hangs the
call up at once): it waits for ICE and
DTLS (``connect_timeout``), and only then spawns the admitted slot with the call link
(``hold=True``), so the engine never sees an offer that did not connect.  The slot, the
address's call count and the registry entry are released on every path.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import secrets
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import Receive, Scope, Send

from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import ConfigError, DeadlineExceeded
from brisvox.core.ratelog import RateLimitedLog
from brisvox.core.secret import Secret
from brisvox.server.auth import ANY, check_origin
from brisvox.server.call import SendText
from brisvox.server.metrics import ServerMetrics
from brisvox.server.session import SessionManager, SessionSlot
from brisvox.transport.link import CallEnds, CallLink
from brisvox.transport.webrtc import (
    EndReason,
    OfferRejected,
    WebRtcCall,
    WebRtcConfig,
    WebRtcStats,
    answer_offer,
)
from brisvox.transport.webrtc.signaling import (
    AddressCalls,
    IceServer,
    OfferRate,
    SignalingRefusal,
    ice_json,
    link_headers,
    parse_offer,
    turn_credentials,
)

__all__ = ["TurnConfig", "WebRtcEndpoint", "WhipConfig"]

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5
CONNECT_TIMEOUT = "connect_timeout"
"""The ``reason`` of an offer whose browser never connected (abandoned at ``connect_timeout``)."""
ENCODER_STAGE = "webrtc_encoder"
"""The ``stage`` of ``brisvox_engine_failures_total`` for a call whose Opus encoder failed (the call ends)."""
_CORS_METHODS = "POST, DELETE, GET, OPTIONS"
_CORS_HEADERS = "Authorization, Content-Type"


@dataclass(frozen=True, slots=True, kw_only=True)
class TurnConfig:
    """A coturn relay the browser may use (``use-auth-secret``): ``urls`` such as
    ``turn:turn.example.com:3478?transport=udp``; credentials valid ``ttl`` seconds."""

    urls: tuple[str, ...]
    secret: Secret
    ttl: int = 3600


@dataclass(frozen=True, slots=True, kw_only=True)
class WhipConfig:
    """The signaling route's limits (bytes, seconds)."""

    path: str = "/whip"
    max_body: int = 64 * 1024
    max_header_bytes: int = 8 * 1024
    body_timeout: float = 5.0
    offers_per_second: float = 1.0
    offer_burst: float = 5.0
    calls_per_address: int = 4
    stun: tuple[str, ...] = ()
    """STUN URLs given to the browser (none by default: the server's host candidates need none)."""
    turn: TurnConfig | None = None
    allowed_origins: frozenset[str] = frozenset()
    """Origins answered with CORS headers besides the server's own (the guard's allowlist)."""
    webrtc: WebRtcConfig = field(default_factory=WebRtcConfig)

    def validate(self) -> None:
        if not self.path.startswith("/") or self.path.endswith("/"):
            raise ConfigError(f"WhipConfig.path={self.path!r}: must start with '/' and not end with one")
        for name in ("max_body", "max_header_bytes", "calls_per_address"):
            if getattr(self, name) < 1:
                raise ConfigError(f"WhipConfig.{name}={getattr(self, name)!r}: must be at least 1")
        for name in ("body_timeout", "offers_per_second", "offer_burst"):
            if not getattr(self, name) > 0:
                raise ConfigError(f"WhipConfig.{name}={getattr(self, name)!r}: must be positive")
        if self.turn is not None and (not self.turn.urls or self.turn.ttl < 60):
            raise ConfigError("WhipConfig.turn: name at least one URL and a ttl of at least 60 s")
        self.webrtc.validate()


class WebRtcEndpoint:
    """The WHIP routes (see the module docs); :meth:`close` ends every call (idempotent)."""

    def __init__(self, clock: Clock, config: WhipConfig | None = None,
                 session_item: Callable[[CallLink, SendText], object] = lambda link, send_text: link) -> None:
        self.config = config or WhipConfig()
        self.config.validate()
        self.clock = clock
        self.stats = WebRtcStats()
        self._metrics: ServerMetrics | None = None  # set by routes(): where refusals are counted
        self._item = session_item
        self._rate = OfferRate(self.config.offers_per_second, self.config.offer_burst)
        self._addresses = AddressCalls(self.config.calls_per_address)
        self._calls: dict[str, WebRtcCall] = {}
        self._live: set[CallEnds] = set()
        self._shutdown = asyncio.Event()
        self._log = RateLimitedLog(log, "webrtc signaling refused", lambda: clock.wall().timestamp())

    @property
    def path(self) -> str:
        return self.config.path

    @property
    def pending_calls(self) -> int:
        """Calls answered and not ended (connecting or connected)."""
        return len(self._calls)

    def close(self) -> None:
        self._shutdown.set()
        for ends in list(self._live):
            ends.out.wake()

    def routes(self, manager: SessionManager[Any], metrics: ServerMetrics) -> Sequence[BaseRoute]:
        path = self.config.path
        self._metrics = metrics

        async def post(request: Request) -> Response:
            if request.method == "OPTIONS":
                return self._preflight(request)
            return await self._post(request, manager, metrics)

        async def ice(request: Request) -> Response:
            if request.method == "OPTIONS":
                return self._preflight(request)
            return JSONResponse(ice_json(self.ice_servers("page")), headers={**self._cors(request),
                                                                           "Cache-Control": "no-store"})

        async def resource(request: Request) -> Response:
            if request.method == "OPTIONS":
                return self._preflight(request)
            call = self._calls.get(request.path_params["call_id"])
            if call is None:
                return self._refuse(request, SignalingRefusal(404, "no_such_call", "no such call"))
            call.hang_up()
            return PlainTextResponse("ok\n", headers=self._cors(request))

        return [Route(path, post, methods=["POST", "OPTIONS"]),
                Route(f"{path}/ice", ice, methods=["GET", "OPTIONS"]),
                Route(path + "/{call_id}", resource, methods=["DELETE", "OPTIONS"])]

    # --- ICE servers ---------------------------------------------------------------------------

    def ice_servers(self, user: str) -> list[IceServer]:
        """The STUN and TURN servers for one browser (TURN credentials minted now, on wall time:
        coturn compares them with its own Unix time)."""
        servers = [IceServer(self.config.stun)] if self.config.stun else []
        turn = self.config.turn
        if turn is not None:
            username, password = turn_credentials(turn.secret.reveal(), user, now=self.clock.wall().timestamp(),
                                                  ttl=turn.ttl)
            servers.append(IceServer(turn.urls, username, password))
        return servers

    # --- POST ----------------------------------------------------------------------------------

    async def _post(self, request: Request, manager: SessionManager[Any], metrics: ServerMetrics) -> Response:
        cfg = self.config
        address = request.client.host if request.client is not None else "unknown"
        header_bytes = sum(len(k) + len(v) + 4 for k, v in request.headers.raw)
        if header_bytes > cfg.max_header_bytes:
            return self._refuse(request, SignalingRefusal(431, "headers_too_large",
                                                          f"request headers over {cfg.max_header_bytes} bytes"))
        wait = self._rate.admit(address, self.clock.now())
        if wait is not None:
            return self._refuse(request, SignalingRefusal(429, "offer_rate", "too many offers from this address"),
                                retry_after=max(1, int(wait + 0.999)))
        body = await self._body(request)
        if isinstance(body, SignalingRefusal):
            return self._refuse(request, body)
        offer = parse_offer(request.headers.get("content-type"), body, max_body=cfg.max_body)
        if isinstance(offer, SignalingRefusal):
            return self._refuse(request, offer)
        if not self._addresses.take(address):
            return self._refuse(request, SignalingRefusal(429, "address_calls",
                                                          f"more than {cfg.calls_per_address} calls from this address"),
                                retry_after=RETRY_AFTER_SECONDS)
        slot: SessionSlot[Any] | None = None
        handed = False
        try:
            admitted = manager.try_admit()
            if not isinstance(admitted, SessionSlot):
                metrics.record_refusal(admitted.reason)
                return self._refuse(request, SignalingRefusal(503, admitted.reason, "too many calls, retry later"),
                                    retry_after=RETRY_AFTER_SECONDS)
            slot = admitted
            call_id = secrets.token_urlsafe(16)
            try:
                call = await answer_offer(offer, clock=self.clock, config=cfg.webrtc, stats=self.stats,
                                          call_id=call_id, metadata={"peer_addr": address})
            except OfferRejected as exc:
                return self._refuse(request, SignalingRefusal(400, "bad_offer", str(exc)))
            except DeadlineExceeded:
                why = f"the answer was not ready within {cfg.webrtc.gather_timeout:g} s (ICE gathering)"
                return self._refuse(request, SignalingRefusal(503, "answer_timeout", why), retry_after=RETRY_AFTER_SECONDS)
            headers = {**self._cors(request), "Location": f"{cfg.path}/{call_id}", "Cache-Control": "no-store"}
            response = _Answer(call.answer_sdp, headers, run=functools.partial(self._run, call, admitted, address, manager),
                               abandon=call.hang_up)
            for value in link_headers(self.ice_servers(call_id)):
                response.headers.append("Link", value)
            self._calls[call_id] = call
            handed = True  # the response runs the call: it owns the slot and the address's count now
            return response
        finally:
            if not handed:
                if slot is not None:
                    slot.release()
                self._addresses.give_back(address)

    async def _body(self, request: Request) -> bytes | SignalingRefusal:
        cfg = self.config
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > cfg.max_body):
            return SignalingRefusal(413, "offer_too_large", f"the offer is over {cfg.max_body} bytes")

        async def read() -> bytes | SignalingRefusal:
            body = bytearray()
            async for chunk in request.stream():
                body += chunk
                if len(body) > cfg.max_body:
                    return SignalingRefusal(413, "offer_too_large", f"the offer is over {cfg.max_body} bytes")
            return bytes(body)

        try:
            return await bounded(self.clock, cfg.body_timeout, read(), "offer body")
        except DeadlineExceeded:
            return SignalingRefusal(408, "body_timeout", f"the offer did not arrive within {cfg.body_timeout:g} s")

    async def _run(self, call: WebRtcCall, slot: SessionSlot[Any], address: str, manager: SessionManager[Any]) -> None:
        """The call after its 201, in the request's task: the engine gets it once connected; a server
        that starts draining abandons it before (a drain waits for connected calls only)."""

        async def deliver(link: CallLink) -> bool:
            slot.spawn(self._item(link, call.send_text), name="webrtc-call", hold=True)
            return True

        def register(ends: CallEnds) -> Callable[[], None]:
            self._live.add(ends)
            return lambda: self._live.discard(ends)

        try:
            ended = await call.run(deliver, self._shutdown, register, abandon_if=lambda: manager.draining)
            if ended is EndReason.ABANDONED and self._metrics is not None:
                self._metrics.record_signaling_refusal(CONNECT_TIMEOUT)
            elif ended is EndReason.ENCODER and self._metrics is not None:
                self._metrics.record_failure(ENCODER_STAGE, fatal=True)  # logged by the track with its traceback
        except Exception:
            log.exception("webrtc call %s failed in the transport", call.call_id)
        finally:
            slot.release()
            self._addresses.give_back(address)
            self._calls.pop(call.call_id, None)

    # --- responses -----------------------------------------------------------------------------

    def _refuse(self, request: Request, refusal: SignalingRefusal, retry_after: int | None = None) -> Response:
        if self._metrics is not None:
            self._metrics.record_signaling_refusal(refusal.reason)
        client = request.client
        self._log.note(f"{refusal.status} {refusal.reason}",
                       f"{request.method} from {client.host if client else 'unknown'}: {refusal.detail}")
        headers = self._cors(request)
        if retry_after is not None:
            headers["Retry-After"] = str(retry_after)
        return PlainTextResponse(refusal.body(), status_code=refusal.status, headers=headers)

    def _cors(self, request: Request) -> dict[str, str]:
        origin = request.headers.get("origin")
        if origin is None:
            return {}
        allowed = self.config.allowed_origins
        if check_origin(origin, request.headers.get("host"), allowed) is not None:
            return {}
        return {"Access-Control-Allow-Origin": "*" if ANY in allowed else origin, "Vary": "Origin",
                "Access-Control-Expose-Headers": "Location, Link"}

    def _preflight(self, request: Request) -> Response:
        headers = self._cors(request)
        if not headers:
            return self._refuse(request, SignalingRefusal(403, "origin_not_allowed", "the Origin is not allowed"))
        headers.update({"Access-Control-Allow-Methods": _CORS_METHODS, "Access-Control-Allow-Headers": _CORS_HEADERS,
                        "Access-Control-Max-Age": "600"})
        return Response(status_code=204, headers=headers)


class _Answer(Response):
    """The 201: sends the answer, then runs the call in the same task (see the module docs)."""

    def __init__(self, sdp: str, headers: dict[str, str], *, run: Callable[[], Awaitable[None]],
                 abandon: Callable[[], None]) -> None:
        super().__init__(sdp, status_code=201, media_type="application/sdp", headers=headers)
        self._run_call = run
        self._abandon = abandon

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except BaseException:
            self._abandon()  # the browser never got the answer: the call ends before it connects
            await self._run_call()
            raise
        await self._run_call()
