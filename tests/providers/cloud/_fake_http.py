"""A loopback HTTP/1.1 server that answers each request with a scripted streaming response.

Tests start it with ``async with FakeHttpServer(handler) as server`` (127.0.0.1, a free
port).  ``handler(request, response)`` writes the answer: a status and headers, then
chunks (chunked transfer encoding), SSE events, pauses (virtual time under the test
loop) or an abrupt cut in the middle of the body.  Every request is recorded with its
headers and JSON body, so tests assert what reached the "vendor".
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class RecordedRequest:
    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: bytes
    peer: int = 0  # the client's port: requests on one kept-alive connection share it

    def json(self) -> Any:
        return json.loads(self.body)


class Response:
    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self.started = False
        self.ended = False

    async def start(self, status: int = 200, content_type: str = "text/event-stream", **headers: str) -> None:
        lines = [f"HTTP/1.1 {status} X", f"content-type: {content_type}", "transfer-encoding: chunked"]
        lines += [f"{k.replace('_', '-')}: {v}" for k, v in headers.items()]
        self._writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await self._writer.drain()
        self.started = True

    async def chunk(self, data: bytes) -> None:
        if not self.started:
            await self.start()
        if data:
            self._writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await self._writer.drain()

    async def sse(self, data: Any, event: str | None = None) -> None:
        text = data if isinstance(data, str) else json.dumps(data)
        head = f"event: {event}\n" if event else ""
        await self.chunk(f"{head}data: {text}\n\n".encode())

    async def json_error(self, status: int, body: Any, **headers: str) -> None:
        await self.start(status, "application/json", **headers)
        await self.chunk(json.dumps(body).encode())
        await self.end()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def end(self) -> None:
        if not self.started:
            await self.start()
        self._writer.write(b"0\r\n\r\n")
        await self._writer.drain()
        self.ended = True

    def cut(self) -> None:
        """Drop the connection in the middle of the body."""
        self.ended = True
        transport = self._writer.transport
        transport.abort()


Handler = Callable[[RecordedRequest, Response], Awaitable[None]]


@dataclass
class FakeHttpServer:
    handler: Handler
    requests: list[RecordedRequest] = field(default_factory=list)
    _server: asyncio.Server | None = None
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    @property
    def base_url(self) -> str:
        assert self._server is not None
        port = self._server.sockets[0].getsockname()[1]
        return f"http://127.0.0.1:{port}"

    async def __aenter__(self) -> FakeHttpServer:
        self._server = await asyncio.start_server(self._on_client, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(BaseException):
                await task
        await self._server.wait_closed()

    async def _on_client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                try:
                    head = await reader.readuntil(b"\r\n\r\n")
                except (asyncio.IncompleteReadError, ConnectionError):
                    return
                request_line, *header_lines = head.decode("latin-1").split("\r\n")
                method, target, _ = request_line.split(" ", 2)
                headers = {}
                for line in header_lines:
                    if ":" in line:
                        k, v = line.split(":", 1)
                        headers[k.strip().lower()] = v.strip()
                body = await reader.readexactly(int(headers.get("content-length", "0")))
                url = urlsplit(target)
                peer = writer.get_extra_info("peername")[1]
                req = RecordedRequest(method, url.path, parse_qs(url.query), headers, body, peer)
                self.requests.append(req)
                resp = Response(writer)
                await self.handler(req, resp)
                if not resp.ended:
                    await resp.end()
                if writer.transport.is_closing():
                    return
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            self._tasks.discard(task)
            writer.close()
