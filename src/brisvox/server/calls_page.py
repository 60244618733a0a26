"""The call timeline over HTTP: ``/api/calls`` (JSON, behind the server's auth) and the
``/calls/<id>`` page that draws one call's turns as a waterfall.

* ``GET /api/calls``: the live calls, then the newest ended ones (:meth:`CallLog.summaries`):
  id, transport, start, live or how it ended, turns, and the last turn with its stage times
  (``brisvox tail`` polls it).
* ``GET /api/calls/{call_id}``: one call, every kept turn (:meth:`CallTimeline.to_json`), 404
  when this process holds no call by that id (with ``--workers N``, each worker knows its own).
* ``GET /calls/{call_id}``: the page (``static/call.html``): it holds no call data, so it is
  served like the demo page; its script fetches ``/api/calls/{call_id}`` (with the token the
  operator types, when the server requires one) and redraws every second while the call is live.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Route

from brisvox.server.calllog import CallLog
from brisvox.server.page import STATIC_DIR

__all__ = ["calls_routes"]


def calls_routes(calls: CallLog) -> list[BaseRoute]:
    async def listing(request: Request) -> Response:
        return JSONResponse({"calls": calls.summaries()})

    async def one(request: Request) -> Response:
        timeline = calls.get(request.path_params["call_id"])
        if timeline is None:
            return JSONResponse({"error": "no such call on this process"}, status_code=404)
        return JSONResponse(timeline.to_json())

    async def page(request: Request) -> Response:
        return FileResponse(STATIC_DIR / "call.html", media_type="text/html")

    return [
        Route("/api/calls", listing, methods=["GET"]),
        Route("/api/calls/{call_id:str}", one, methods=["GET"]),
        Route("/calls/{call_id:str}", page, methods=["GET"]),
    ]
