"""An in-memory WebSocket connection: the server side is a ``WsPeer`` for an adapter's
``run_call``, the client side is what a test (or a driver) uses.  No sockets, so the
adapters run on virtual time."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Awaitable

from brisvox.transport.websocket.connection import PeerClosed


class MemoryPeer:
    """The server's end (implements :class:`~brisvox.transport.websocket.connection.WsPeer`)."""

    def __init__(self) -> None:
        self.inbox: deque[bytes | str] = deque()  # client -> server
        self.outbox: deque[bytes | str] = deque()  # server -> client
        self.arrived = asyncio.Event()  # something in inbox, or closed
        self.sent = asyncio.Event()  # something in outbox, or closed
        self.close_code: int | None = None  # the code the server closed with
        self.client_closed: bool | None = None  # True: a close frame from the client; False: vanished
        self.aborted = False
        self.unstalled = asyncio.Event()  # cleared: the client reads nothing, sends block
        self.unstalled.set()

    @property
    def remote(self) -> str:
        return "127.0.0.1:9"

    @property
    def closed(self) -> bool:
        return self.close_code is not None or self.aborted

    async def recv(self) -> bytes | str:
        while not self.inbox:
            if self.client_closed is not None or self.closed:
                raise PeerClosed(by_peer=bool(self.client_closed) and not self.closed)
            self.arrived.clear()
            await self.arrived.wait()
        return self.inbox.popleft()

    async def send(self, data: bytes | str) -> None:
        if self.closed or self.client_closed is not None:
            raise PeerClosed(by_peer=False)
        await self.unstalled.wait()
        if self.closed:
            raise PeerClosed(by_peer=False)  # aborted while the write was blocked
        self.outbox.append(data)
        self.sent.set()

    async def ping(self) -> Awaitable[object]:
        done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def close(self, code: int, reason: str) -> None:
        if self.close_code is None:
            self.close_code = code
        self.arrived.set()
        self.sent.set()

    def abort(self) -> None:
        self.aborted = True
        self.unstalled.set()
        self.arrived.set()
        self.sent.set()

    # --- the client's side -------------------------------------------------------------------

    def push(self, data: bytes | str) -> None:
        self.inbox.append(data)
        self.arrived.set()

    def client_close(self) -> None:
        """A close frame from the client."""
        self.client_closed = True
        self.arrived.set()

    def client_vanish(self) -> None:
        self.client_closed = False
        self.arrived.set()

    async def pull(self) -> bytes | str | None:
        """The server's next message; None once it closed and everything was read."""
        while not self.outbox:
            if self.closed:
                return None
            self.sent.clear()
            await self.sent.wait()
        return self.outbox.popleft()
