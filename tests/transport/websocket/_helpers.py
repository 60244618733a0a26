"""Helpers of the WebSocket tests: an in-process server with an echo engine, a raw client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed

from brisvox.core.clock import SimClock
from brisvox.core.tasks import TaskScope
from brisvox.transport.echo import EchoOptions, run_echo
from brisvox.transport.websocket import ServerConfig, WebSocketServer


@asynccontextmanager
async def ws_server(
    config: ServerConfig | None = None, *, echo: bool = True, options: EchoOptions | None = None
) -> AsyncIterator[tuple[SimClock, WebSocketServer, TaskScope]]:
    clock = SimClock()
    async with TaskScope("test-engine") as scope:
        server = await WebSocketServer(clock, config or ServerConfig()).bind()
        try:
            if echo:
                scope.spawn(run_echo(clock, server, scope, options), name="echo")
            yield clock, server, scope
        finally:
            await server.shutdown()


def client(url: str) -> connect:
    return connect(url, ping_interval=None, compression=None, max_size=None, close_timeout=2)


async def start(ws: ClientConnection, **fields: Any) -> dict[str, Any]:
    msg = {"type": "start", "sample_rate": 16000, **fields}
    await ws.send(json.dumps(msg))
    reply = json.loads(await ws.recv())
    assert reply["type"] == "started", reply
    return reply  # type: ignore[no-any-return]


async def read_until_closed(ws: ClientConnection) -> tuple[list[bytes | dict[str, Any]], int | None]:
    """Everything the server sent until it closed, and the close code it sent."""
    got: list[bytes | dict[str, Any]] = []
    try:
        async for m in ws:
            got.append(m if isinstance(m, bytes) else json.loads(m))
    except ConnectionClosed:
        pass
    rcvd = ws.protocol.close_rcvd
    return got, (rcvd.code if rcvd is not None else None)


def texts(msgs: list[bytes | dict[str, Any]]) -> list[dict[str, Any]]:
    return [m for m in msgs if isinstance(m, dict)]
