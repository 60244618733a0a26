"""A loopback WebSocket server (the ``websockets`` library) driven by a test's handler."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qs, urlsplit

from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.http11 import Request, Response


@dataclass
class Upgrade:
    path: str
    query: dict[str, list[str]]
    headers: Headers


Handler = Callable[[ServerConnection, Upgrade], Awaitable[None]]


@dataclass
class FakeWsServer:
    handler: Handler
    refuse_with: int | None = None  # answer every upgrade with this HTTP status
    upgrades: list[Upgrade] = field(default_factory=list)
    _server: Server | None = None

    @property
    def url(self) -> str:
        assert self._server is not None
        port = next(iter(self._server.sockets)).getsockname()[1]
        return f"ws://127.0.0.1:{port}"

    async def __aenter__(self) -> FakeWsServer:
        self._server = await serve(
            self._on_connection,
            "127.0.0.1",
            0,
            process_request=self._process_request,
            ping_interval=None,
            compression=None,
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close(close_connections=True)
        with contextlib.suppress(Exception):
            await self._server.wait_closed()

    def _process_request(self, connection: ServerConnection, request: Request) -> Response | None:
        url = urlsplit(request.path)
        self.upgrades.append(Upgrade(url.path, parse_qs(url.query), request.headers))
        if self.refuse_with is not None:
            return connection.respond(HTTPStatus(self.refuse_with), "refused\n")
        return None

    async def _on_connection(self, ws: ServerConnection) -> None:
        with contextlib.suppress(Exception):
            await self.handler(ws, self.upgrades[-1])


def as_json(message: Any) -> Any:
    import json

    return json.loads(message)
