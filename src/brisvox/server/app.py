"""The HTTP/WebSocket surface: a Starlette application (served by uvicorn, mountable in FastAPI).

Routes:

* ``GET /healthz``: 200 ``ok`` while the process is alive.
* ``GET /readyz``: 200 when a call would be admitted now and every embedded model's pool
  takes jobs, 503 when full, draining or a pool is saturated; the body is JSON
  ``{"ready", "draining", "active", "reserved", "max", "saturated"}`` (``saturated``: the
  names of the full pools).  In a worker of a node (``--workers N``) the answer is the
  node's: ready while any live worker admits, and the body adds ``"node"`` with the
  node's ``workers``, ``alive``, ``ready``, ``active``, ``reserved`` and ``max``, and
  ``each``: every worker's ``pid``, ``alive`` and ``active``.
* ``GET /metrics``: the Prometheus text exposition of :class:`~brisvox.server.metrics.ServerMetrics`.
* ``POST /api/calls/{call_id}/hangup`` (with a :class:`~brisvox.server.directory.CallDirectory`):
  ends the call as a stop request does, wherever it lives (:mod:`brisvox.server.directory`):
  ``202`` ``{"call", "outcome": "done"|"forwarded", "owner"}``, ``404`` when no process holds
  it, ``503`` when it is not here and the registry cannot be asked.
* Before any route, with an ``access`` policy: the Host, Origin and token checks
  (:mod:`brisvox.server.access`); a refused request gets 401/403 and reaches no route.
* ``WS`` on any other path: ``404``.
* ``WS <ws_path>``: the call endpoint.  Admission happens *before* the upgrade: a
  refused call gets an HTTP 503 with ``Retry-After`` (when the ASGI server supports
  denial responses, as uvicorn does) and is counted; with a global cap
  (``BRISVOX_GLOBAL_MAX_CALLS``) a call past it is refused the same way
  (``at_global_capacity``); an admitted one is handed, with its
  :class:`~brisvox.server.session.SessionSlot`, to the :class:`CallEndpoint`.

The call endpoint is a seam: the WebSocket transport's per-connection code plugs in
there (:class:`~brisvox.server.ws_endpoint.TransportEndpoint` reads ``start``, builds the
call link and spawns the slot with it).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any, Protocol

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import BaseRoute, Route, WebSocketRoute
from starlette.websockets import WebSocket

from brisvox.inference.pool import InferencePool, live_pools
from brisvox.server.access import AccessGuard, AccessPolicy
from brisvox.server.capacity import saturated_pools
from brisvox.server.directory import CallDirectory, Control, ControlOutcome
from brisvox.server.metrics import CONTENT_TYPE, ServerMetrics
from brisvox.server.node import NodeTotals
from brisvox.server.session import AtCapacity, SessionManager, SessionSlot

__all__ = ["AT_GLOBAL_CAPACITY", "RETRY_AFTER_SECONDS", "CallEndpoint", "HttpCallEndpoint", "build_app"]

log = logging.getLogger(__name__)

RETRY_AFTER_SECONDS = 5
AT_GLOBAL_CAPACITY = "at_global_capacity"
"""The refusal reason of a call past ``BRISVOX_GLOBAL_MAX_CALLS``."""
_TRY_AGAIN = 1013


class CallEndpoint(Protocol):
    """Serves one admitted WebSocket call: accept ``websocket``, run the call, and
    ``slot.spawn(..., hold=True)`` the session once it started.  The endpoint returns when the
    socket is closed; the app then releases the slot (on every path), so a call's place is
    held from admission until its socket closed and its session ended."""

    async def __call__(self, websocket: WebSocket, slot: SessionSlot[Any], /) -> None: ...


class HttpCallEndpoint(Protocol):
    """Calls started by plain HTTP requests under ``path`` (WebRTC's WHIP signaling): its routes
    admit through ``manager`` themselves; the AccessGuard checks Origin and token on them
    (``AccessPolicy.call_paths``)."""

    @property
    def path(self) -> str: ...

    def close(self) -> None:
        """End every call (idempotent): the shutdown's goodbye."""
        ...

    def routes(self, manager: SessionManager[Any], metrics: ServerMetrics, /) -> Sequence[BaseRoute]:
        """The routes; admission refusals are counted in ``metrics`` like the WebSocket route's."""
        ...


def build_app(
    manager: SessionManager[Any],
    metrics: ServerMetrics,
    *,
    ws_path: str = "/ws",
    call_endpoint: CallEndpoint,
    extra_routes: Sequence[BaseRoute] = (),
    access: AccessPolicy | None = None,
    pools: Callable[[], Iterable[InferencePool]] = live_pools,
    call_routes: Sequence[tuple[str, CallEndpoint]] = (),
    node: Callable[[], NodeTotals] | None = None,
    directory: CallDirectory | None = None,
    http_call_endpoints: Sequence[HttpCallEndpoint] = (),
) -> Starlette:
    """The server's ASGI application over ``manager`` (see the module docs); ``access``: the Host,
    Origin and token checks before routing (:mod:`brisvox.server.access`; None: none, for an
    application that embeds this one and checks its requests itself); ``pools`` gives the
    embedded models' pools whose saturation ``/readyz`` reports; ``call_routes``: more call
    endpoints by path (a carrier's, such as Twilio's), admitted exactly like ``ws_path``;
    ``node``: the node's totals, for a worker of ``--workers N`` (``/readyz`` answers for the node);
    ``directory``: the calls by id, for the control routes and the global cap;
    ``http_call_endpoints``: HTTP call routes (WebRTC signaling) that admit through ``manager``."""
    metrics.watch(manager)

    async def healthz(request: Request) -> Response:
        return PlainTextResponse("ok\n")

    async def readyz(request: Request) -> Response:
        saturated = saturated_pools(pools())
        ready = manager.ready and not saturated
        body: dict[str, Any] = {
            "ready": ready,
            "draining": manager.draining,
            "active": manager.active,
            "reserved": manager.reserved,
            "max": manager.max_sessions,
            "saturated": saturated,
        }
        if node is not None:
            totals = node()
            # This worker's live state counts for itself; the table's row for it may be half a publish old.
            ready = not manager.draining and (ready or totals.admits)
            body["ready"] = ready
            body["node"] = {"workers": totals.workers, "alive": totals.alive, "ready": totals.ready,
                            "active": totals.active, "reserved": totals.reserved, "max": totals.max_calls,
                            "each": [{"pid": r.pid, "alive": bool(r.alive), "active": r.active} for r in totals.rows]}
        return JSONResponse(body, status_code=200 if ready else 503)

    async def metrics_route(request: Request) -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    def admitting(endpoint: CallEndpoint) -> Callable[[WebSocket], Awaitable[None]]:
        async def call(websocket: WebSocket) -> None:
            admitted = manager.try_admit()
            if not isinstance(admitted, SessionSlot):
                metrics.record_refusal(admitted.reason)
                text = "too many calls, retry later\n" if isinstance(admitted, AtCapacity) else "shutting down\n"
                await _deny(websocket, text)
                return
            if directory is not None and directory.over_global_cap():
                admitted.release()
                metrics.record_refusal(AT_GLOBAL_CAPACITY)
                await _deny(websocket, "too many calls across the deployment, retry later\n")
                return
            try:
                await endpoint(websocket, admitted)
            finally:
                admitted.release()  # the socket is closed: unused, or a held session's place (see SessionSlot)

        return call

    async def hangup(request: Request) -> Response:
        assert directory is not None
        call_id = request.path_params["call_id"]
        outcome, owner = await directory.control(call_id, Control.HANGUP)
        if outcome is ControlOutcome.UNKNOWN:
            return JSONResponse({"call": call_id, "error": "no such call"}, status_code=404)
        if outcome is ControlOutcome.UNREACHABLE:
            return JSONResponse({"call": call_id, "error": "the call is not on this node and the call registry "
                                 "cannot be reached"}, status_code=503)
        return JSONResponse({"call": call_id, "outcome": outcome.value, "owner": owner}, status_code=202)

    control = [Route("/api/calls/{call_id:str}/hangup", hangup, methods=["POST"])] if directory is not None else []
    routes: list[BaseRoute] = [
        *control,
        Route("/healthz", healthz, methods=["GET"]),
        Route("/readyz", readyz, methods=["GET"]),
        Route("/metrics", metrics_route, methods=["GET"]),
        WebSocketRoute(ws_path, admitting(call_endpoint)),
        *(WebSocketRoute(path, admitting(endpoint)) for path, endpoint in call_routes),
        # before the extra routes, whose Mounts would take WebSocket scopes too; Starlette's default is a 403
        WebSocketRoute("/{path:path}", _no_such_path),
        *(route for endpoint in http_call_endpoints for route in endpoint.routes(manager, metrics)),
        *extra_routes,
    ]
    guard = [Middleware(AccessGuard, policy=access, metrics=metrics,
                        signaling_refused=metrics.record_signaling_refusal)] if access is not None else []
    return Starlette(routes=routes, middleware=guard)


async def _no_such_path(websocket: WebSocket) -> None:
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(PlainTextResponse("not found\n", status_code=404))
    else:
        await websocket.close()


async def _deny(websocket: WebSocket, text: str) -> None:
    if "websocket.http.response" in websocket.scope.get("extensions", {}):
        await websocket.send_denial_response(
            PlainTextResponse(text, status_code=503, headers={"Retry-After": str(RETRY_AFTER_SECONDS)})
        )
    else:
        await websocket.close(code=_TRY_AGAIN, reason=text.strip())
