"""The WebSocket call endpoint: the generic WebSocket transport, mounted in the Starlette app.

:class:`TransportEndpoint` is a :class:`~brisvox.server.app.CallEndpoint`.  For each
admitted connection it accepts the upgrade and runs the transport's per-connection code
(:func:`brisvox.transport.websocket.run_call`: ``start``, the call pair, reader, writer
and monitor) over a :class:`StarletteWsPeer`.  When the call has started, its
:class:`~brisvox.transport.link.CallLink` is handed to the session manager
(``slot.spawn(link)``), so the session runner (the engine) owns the call while this
endpoint owns the socket.

ASGI has no ping frames: under ``brisvox serve`` the peer's ``ping()`` goes through the
edge's scope extension (:data:`brisvox.server.edge.PING_EXTENSION`), so the transport's
monitor decides a silent client (``ping_timeout``, 1008).  Under another ASGI server
without it the ping completes at once and liveness rests on the client's frames.
``abort()`` drops the TCP connection through uvicorn's protocol object when it can
reach it, so a write blocked on a client that reads nothing is still ended.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

from brisvox.core.clock import Clock
from brisvox.server.edge import PING_EXTENSION, RECEIVE_TAP_EXTENSION
from brisvox.server.session import SessionSlot
from brisvox.transport.link import CallEnds, CallLink
from brisvox.transport.websocket import PeerClosed, ServerConfig, ServerStats, run_call

__all__ = ["LiveCalls", "StarletteWsPeer", "TransportEndpoint"]

log = logging.getLogger(__name__)

_ABNORMAL = 1006


class StarletteWsPeer:
    """A Starlette WebSocket (already accepted) as the transport's WsPeer."""

    __slots__ = ("_closed", "_waiting", "_ws")

    def __init__(self, websocket: WebSocket) -> None:
        self._ws = websocket
        self._closed = False
        self._waiting = False  # recv() waits for the next message: nothing taken is in hand

    def tap(self, handler: Callable[[bytes], bool] | None) -> bool:
        """Offer each binary message to ``handler`` in the edge's read callback while
        :meth:`recv` waits for the next message (:data:`~brisvox.server.edge.RECEIVE_TAP_EXTENSION`);
        what it takes (True) :meth:`recv` never returns (None: offer nothing).  False: this server
        has no tap."""
        set_tap = self._ws.scope.get("extensions", {}).get(RECEIVE_TAP_EXTENSION)
        if not callable(set_tap):
            return False

        if handler is None:
            set_tap(None)
            return True
        take = handler

        def offer(data: bytes) -> bool:
            return self._waiting and not self._closed and take(data)

        set_tap(offer)
        return True

    @property
    def remote(self) -> str:
        client = self._ws.client
        return f"{client.host}:{client.port}" if client is not None else "unknown"

    async def recv(self) -> bytes | str:
        if self._closed:
            raise PeerClosed(by_peer=False)
        self._waiting = True
        try:
            message = await self._ws.receive()
        except (RuntimeError, OSError):
            self._closed = True
            raise PeerClosed(by_peer=False) from None
        finally:
            self._waiting = False
        if message["type"] == "websocket.disconnect":
            self._closed = True
            code = message.get("code")
            if code == _ABNORMAL:
                raise PeerClosed(by_peer=False)
            if code in (1002, 1007, 1009):  # closed by the WebSocket layer itself
                raise PeerClosed(by_peer=False, code=code)
            raise PeerClosed(by_peer=True)
        data = message.get("bytes")
        if data is not None:
            return bytes(data)
        text = message.get("text")
        return text if text is not None else b""

    async def send(self, data: bytes | str) -> None:
        if self._closed:
            raise PeerClosed(by_peer=False)
        try:
            if isinstance(data, bytes):
                await self._ws.send_bytes(data)
            else:
                await self._ws.send_text(data)
        except (WebSocketDisconnect, RuntimeError, OSError):
            self._closed = True
            raise PeerClosed(by_peer=False) from None

    async def ping(self) -> Awaitable[object]:
        if self._closed:
            raise PeerClosed(by_peer=False)
        ping = self._ws.scope.get("extensions", {}).get(PING_EXTENSION)
        if callable(ping):
            pong: asyncio.Future[object] = ping()
            return pong
        done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def close(self, code: int, reason: str) -> None:
        if self._closed or self._ws.application_state == WebSocketState.DISCONNECTED:
            return
        self._closed = True
        with contextlib.suppress(RuntimeError, OSError):
            await self._ws.close(code=code, reason=reason)

    def abort(self) -> None:
        self._closed = True
        transport = _server_transport(getattr(self._ws, "_send", None))
        if isinstance(transport, asyncio.BaseTransport) and getattr(transport.get_protocol(), "close_sent", False):
            # the close frame is on its way (the edge drops the socket if it never gets through): an
            # abort now would discard it, and the messages before it, at the client
            return
        abort = getattr(transport, "abort", None)
        if callable(abort):
            abort()


def _server_transport(send: object, depth: int = 4) -> object | None:
    """The asyncio transport behind an ASGI ``send``: uvicorn's ``send`` is a method of its
    protocol (which holds ``transport``); Starlette's middleware wraps it in closures."""
    for _ in range(depth):
        owner = getattr(send, "__self__", None)
        if owner is not None and hasattr(owner, "transport"):
            transport: object = owner.transport
            return transport
        cells = getattr(send, "__closure__", None) or ()
        inner = [c.cell_contents for c in cells if callable(getattr(c, "cell_contents", None))]
        if not inner:
            return None
        send = inner[0]
    return None


class LiveCalls:
    """The calls an endpoint has connected, so a shutdown can say goodbye to each of them."""

    def __init__(self) -> None:
        self._shutdown = asyncio.Event()
        self._live: set[CallEnds] = set()

    @property
    def live_calls(self) -> int:
        return len(self._live)

    def _register(self, ends: CallEnds) -> Callable[[], None]:
        self._live.add(ends)
        return lambda: self._live.discard(ends)

    def close(self) -> None:
        """Say goodbye to every call still connected (idempotent)."""
        self._shutdown.set()
        for ends in list(self._live):
            ends.out.wake()


class TransportEndpoint(LiveCalls):
    """Runs admitted WebSocket calls through the transport (see the module docs); :meth:`close` says
    goodbye (``stop{shutdown}`` and close 1001) to every call still connected."""

    def __init__(self, clock: Clock, config: ServerConfig | None = None, stats: ServerStats | None = None) -> None:
        """``stats``: counters shared with another WebSocket-based endpoint (``brisvox serve`` exports one set)."""
        super().__init__()
        self.clock = clock
        self.config = config or ServerConfig()
        self.stats = stats if stats is not None else ServerStats()

    async def __call__(self, websocket: WebSocket, slot: SessionSlot[Any], /) -> None:
        await websocket.accept()
        peer = StarletteWsPeer(websocket)

        async def deliver(link: CallLink) -> bool:
            slot.spawn(link, name="call", hold=True)
            return True

        await run_call(peer, clock=self.clock, config=self.config, deliver=deliver, shutdown=self._shutdown,
                       stats=self.stats, register=self._register)

