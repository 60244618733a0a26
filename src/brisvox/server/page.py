"""The demo web page ``brisvox serve`` serves: ``/`` (the page), ``/static/*`` and ``/agent.json``.

The page (``static/index.html`` and ``static/app.js``) calls over WebRTC by default (WHIP at
``/whip``: the microphone as Opus, the bot's audio on an ``<audio>`` element, the engine's
``event`` messages on a data channel; docs/WEBRTC.md) and falls back to the generic WebSocket
protocol when the server has no WebRTC endpoint, the offer is refused or the call does not
connect within 10 s (``?transport=ws`` forces it): microphone audio as PCM16 at 16 kHz from an
AudioWorklet, the bot's audio played on a schedule (a ``clear`` stops what has not played,
marks are echoed once played).  Either way the status line says which transport the call
uses, and the ``event`` messages are drawn as a live transcript with tool calls, their
outcomes and a latency figure per turn.  ``/agent.json`` tells the page
which agent and which LLM the server runs before a call starts.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

__all__ = ["STATIC_DIR", "page_routes"]

STATIC_DIR = Path(__file__).resolve().parent / "static"


def page_routes(agent: Mapping[str, Any]) -> list[BaseRoute]:
    """The page's routes; ``agent`` is the JSON of ``/agent.json``."""
    body = dict(agent)

    async def index(request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    async def agent_json(request: Request) -> Response:
        return JSONResponse(body)

    return [
        Route("/", index, methods=["GET"]),
        Route("/agent.json", agent_json, methods=["GET"]),
        Mount("/static", app=StaticFiles(directory=STATIC_DIR), name="static"),
    ]
