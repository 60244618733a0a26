"""The load client's call socket: loadtest_wire's framing on an asyncio Protocol.

No WebSocket library between the callers and the socket: a send is one write of ready bytes
(the frames are encoded and masked once, ``loadtest_wire.client_frame``), and the server's
messages reach the caller as views of the bytes the socket returned, stamped with the moment
they were read.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable

from brisvox.core.clock import SystemClock, bounded
from brisvox.core.errors import DeadlineExceeded
from brisvox.loadtest_wire import (
    MAX_HEAD,
    Kind,
    ServerBytesError,
    ServerFrames,
    client_frame,
    handshake_request,
    parse_handshake,
)

__all__ = ["CLOSE_WAIT", "MAX_UNSENT", "Connection", "OnBinary", "open_call"]

OnBinary = Callable[[float, memoryview], None]
"""Called with (the moment the bytes were read, the message) for each binary message."""

_CLOCK = SystemClock()  # the callers run on real time

MAX_UNSENT = 1 << 20  # bytes: a call whose server stopped reading this much of its audio is ended
CLOSE_WAIT = 2.0  # s: how long a hang-up waits for the server's side of the closing handshake


class Connection(asyncio.Protocol):
    """One call's socket (loadtest_wire's framing on an asyncio Protocol): the handshake, then
    ready frames out and the server's messages in; each binary message goes to ``on_binary``
    with the moment its bytes were read.  What ends the call from the server's side (a close, a
    lost connection, bytes that break the protocol, ``on_binary`` refusing a message) is kept in
    ``failure``; the next send raises it."""

    def __init__(self, key: str, on_binary: OnBinary | None) -> None:
        loop = asyncio.get_running_loop()
        self.opened: asyncio.Future[BaseException | None] = loop.create_future()
        self.lost: asyncio.Future[None] = loop.create_future()
        self.failure: BaseException | None = None
        self._key, self._on_binary = key, on_binary
        self._transport: asyncio.Transport | None = None
        self._head = b""
        self._frames = ServerFrames()
        self._close_sent = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        now = _CLOCK.now()
        try:
            if not self.opened.done():
                data = self._handshake(data)
            for message in self._frames.feed(data) if data else ():
                if message.kind is Kind.BINARY:
                    if self._on_binary is not None:
                        self._on_binary(now, message.payload)
                elif message.kind is Kind.PING:
                    self._write(client_frame(Kind.PONG, bytes(message.payload)))
                elif message.kind is Kind.CLOSE:
                    code = int.from_bytes(message.payload[:2], "big") if len(message.payload) >= 2 else None
                    self._fail(ConnectionError(f"the server closed the call (code {code})"))
                    self._send_close()
        except Exception as exc:  # bad bytes, or a message the caller refused: this call ends, named
            self._fail(exc)
            assert self._transport is not None
            self._transport.abort()

    def _handshake(self, data: bytes) -> bytes:
        self._head += data
        head, sep, rest = self._head.partition(b"\r\n\r\n")
        if not sep:
            if len(self._head) > MAX_HEAD:
                raise ServerBytesError(f"the server's handshake response is longer than {MAX_HEAD} bytes")
            return b""
        parse_handshake(head, self._key)
        self._head = b""
        self.opened.set_result(None)
        return rest

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(ConnectionError(f"the connection was lost ({exc!r})" if exc else "the server closed the connection"))
        if not self.lost.done():
            self.lost.set_result(None)

    def _fail(self, exc: BaseException) -> None:
        self.failure = self.failure or exc
        if not self.opened.done():
            self.opened.set_result(self.failure)

    def _write(self, data: bytes) -> None:
        assert self._transport is not None
        if not self._transport.is_closing():
            self._transport.write(data)

    def _send_close(self) -> None:
        if not self._close_sent:
            self._close_sent = True
            self._write(client_frame(Kind.CLOSE, (1000).to_bytes(2, "big")))

    def send(self, frame: bytes) -> None:
        """Write one ready frame; ConnectionError when the server ended the call or stopped reading."""
        if self.failure is not None:
            raise ConnectionError(f"the server ended the call ({self.failure!r})")
        assert self._transport is not None
        if self._transport.get_write_buffer_size() > MAX_UNSENT:
            raise ConnectionError(f"the server stopped reading the call's audio ({MAX_UNSENT} bytes unsent)")
        self._transport.write(frame)

    async def close(self) -> None:
        """Hang up: the closing handshake, bounded; the socket is closed whatever the server does."""
        if self._transport is None:
            return
        self._send_close()
        try:
            await bounded(_CLOCK, CLOSE_WAIT, asyncio.shield(self.lost), "the server's side of the hang-up")
        except DeadlineExceeded:
            self._transport.abort()  # the call's measurement is over: a server slow to close only loses its socket
        finally:
            self._transport.close()


async def open_call(url: str, timeout: float, on_binary: OnBinary | None = None) -> Connection:
    """A call's WebSocket to ``url``, opened within ``timeout`` s (no extension, Nagle off)."""
    import base64
    import ssl
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    secure = parts.scheme == "wss"
    host, port = parts.hostname or "127.0.0.1", parts.port or (443 if secure else 80)
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    key = base64.b64encode(os.urandom(16)).decode()
    loop = asyncio.get_running_loop()
    made: list[Connection] = []

    async def opening() -> Connection:
        _, conn = await loop.create_connection(lambda: Connection(key, on_binary), host, port,
                                               ssl=ssl.create_default_context() if secure else None)
        made.append(conn)
        conn._write(handshake_request(parts.netloc, path, key))
        failure = await conn.opened
        if failure is not None:
            raise failure
        return conn

    try:
        return await bounded(_CLOCK, timeout, opening(), f"opening {url}")
    except BaseException:
        for conn in made:
            if conn._transport is not None:
                conn._transport.abort()
        raise
