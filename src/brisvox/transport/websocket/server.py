"""WebSocketServer: the generic WebSocket transport on the `websockets` library.

``await server.bind()`` validates the config and listens; ``await server.accept()``
yields a :class:`CallLink` per connection that completed the upgrade and sent a valid
``start``; ``await server.shutdown()`` says goodbye (``stop{shutdown}`` + close 1001) to
every call and waits for them (bounded by ``shutdown_timeout``; stragglers are aborted).

Admission: more than ``max_calls`` live connections get an HTTP 503 with
``Retry-After``; more than ``max_rejects`` concurrent refusals are dropped without an
answer; a wrong path gets 404.  A started call that the engine does not accept within
``send_timeout`` (accept queue full) is refused with ``server_busy`` and close 1013.

The per-connection work is :func:`~brisvox.transport.websocket.connection.run_call`,
which needs only a :class:`~brisvox.transport.websocket.connection.WsPeer`; this module
adapts a `websockets` connection to it (:class:`WebsocketsPeer`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from http import HTTPStatus
from types import TracebackType

from websockets.asyncio.connection import Connection
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from brisvox.core.channel import Channel
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import ChannelClosed, DeadlineExceeded
from brisvox.transport.link import CallEnds, CallLink
from brisvox.transport.websocket.config import ServerConfig
from brisvox.transport.websocket.connection import PeerClosed, run_call
from brisvox.transport.websocket.stats import ServerStats

__all__ = ["WebSocketServer", "WebsocketsPeer"]

log = logging.getLogger(__name__)


def _closed(exc: ConnectionClosed) -> PeerClosed:
    by_peer = exc.rcvd is not None
    code = exc.sent.code if (exc.sent is not None and not by_peer) else None
    return PeerClosed(by_peer=by_peer, code=code)


class WebsocketsPeer:
    """A `websockets` connection (server or client side) as a WsPeer."""

    __slots__ = ("_c",)

    def __init__(self, conn: Connection) -> None:
        self._c = conn

    @property
    def remote(self) -> str:
        addr = self._c.remote_address
        return f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) and len(addr) >= 2 else str(addr)

    async def recv(self) -> bytes | str:
        try:
            return await self._c.recv()
        except ConnectionClosed as exc:
            raise _closed(exc) from None

    async def send(self, data: bytes | str) -> None:
        try:
            await self._c.send(data)
        except ConnectionClosed as exc:
            raise _closed(exc) from None

    async def ping(self) -> Awaitable[object]:
        try:
            return await self._c.ping()
        except ConnectionClosed as exc:
            raise _closed(exc) from None

    async def close(self, code: int, reason: str) -> None:
        await self._c.close(code, reason)

    def abort(self) -> None:
        self._c.transport.abort()


class WebSocketServer:
    """The generic WebSocket transport (a Transport; see module docs)."""

    def __init__(self, clock: Clock, config: ServerConfig | None = None) -> None:
        self.config = config or ServerConfig()
        self.stats = ServerStats()
        self._clock = clock
        self._accept: Channel[CallLink] = Channel(self.config.accept_queue, name="websocket accept queue")
        self._server: Server | None = None
        self._shutdown = asyncio.Event()
        self._permits: set[ServerConnection] = set()
        self._rejecting: set[ServerConnection] = set()
        self._live: set[CallEnds] = set()

    @property
    def port(self) -> int:
        assert self._server is not None, "bind() first"
        return int(next(iter(self._server.sockets)).getsockname()[1])

    @property
    def url(self) -> str:
        return f"ws://{self.config.host}:{self.port}{self.config.path}"

    @property
    def active_calls(self) -> int:
        return len(self._permits)

    async def bind(self) -> WebSocketServer:
        cfg = self.config
        cfg.validate()
        self._server = await serve(
            self._handle, cfg.host, cfg.port,
            process_request=self._process_request, process_response=self._process_response,
            compression=None, open_timeout=cfg.handshake_timeout, ping_interval=None, ping_timeout=None,
            close_timeout=cfg.close_grace, max_size=max(cfg.max_audio_bytes, cfg.max_control_bytes),
            server_header=None,
        )
        return self

    async def __aenter__(self) -> WebSocketServer:
        return await self.bind()

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.shutdown()

    async def accept(self) -> CallLink:
        """The next started call; raises ChannelClosed after shutdown."""
        return await self._accept.recv()

    async def shutdown(self, timeout: float | None = None) -> None:
        """Refuse new connections, say goodbye to every call and wait for all of them."""
        if self._server is None or self._shutdown.is_set():
            return
        self._shutdown.set()
        self._accept.close()
        for ends in list(self._live):
            ends.out.wake()
        server = self._server
        server.close(close_connections=False)
        limit = self.config.shutdown_timeout if timeout is None else timeout
        try:
            await bounded(self._clock, limit, server.wait_closed(), "websocket shutdown")
        except DeadlineExceeded:
            log.warning("websocket server: %d connection(s) did not close in %.1f s; aborting them",
                        len(server.connections), limit)
            for conn in list(server.connections):
                conn.transport.abort()
            await bounded(self._clock, limit, server.wait_closed(), "websocket abort")

    # --- admission -------------------------------------------------------------------------

    def _process_request(self, conn: ServerConnection, request: Request) -> Response | None:
        cfg = self.config
        if request.path.split("?", 1)[0] != cfg.path:
            return conn.respond(HTTPStatus.NOT_FOUND, "not found\n")
        if self._shutdown.is_set() or len(self._permits) >= cfg.max_calls:
            if len(self._rejecting) >= cfg.max_rejects:
                self.stats.refused_dropped += 1
                conn.transport.abort()
            self.stats.refused_limit += 1
            self._rejecting.add(conn)
            resp = conn.respond(HTTPStatus.SERVICE_UNAVAILABLE, "too many calls, retry later\n")
            resp.headers["Retry-After"] = str(cfg.retry_after)
            return resp
        self._permits.add(conn)
        return None

    def _process_response(self, conn: ServerConnection, request: Request, response: Response) -> None:
        self._rejecting.discard(conn)
        if response.status_code != HTTPStatus.SWITCHING_PROTOCOLS:
            self._permits.discard(conn)

    async def _deliver(self, link: CallLink) -> bool:
        try:
            if not self._accept.try_send(link):
                await bounded(self._clock, self.config.send_timeout, self._accept.send(link), "accept hand-off")
        except (DeadlineExceeded, ChannelClosed):
            return False
        return True

    def _register(self, ends: CallEnds) -> Callable[[], None]:
        self._live.add(ends)
        return lambda: self._live.discard(ends)

    async def _handle(self, conn: ServerConnection) -> None:
        try:
            await run_call(WebsocketsPeer(conn), clock=self._clock, config=self.config, deliver=self._deliver,
                           shutdown=self._shutdown, stats=self.stats, register=self._register)
        finally:
            self._permits.discard(conn)
