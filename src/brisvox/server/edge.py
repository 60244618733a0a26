"""The server's edge: what uvicorn does with a connection before and around the ASGI app.

uvicorn's own protocols leave four holes that a hostile client can use, and one cost per audio frame; this module
closes them with two protocol classes (:meth:`Edge.protocols`) that :func:`brisvox.server.host.serve`
gives uvicorn:

* **Handshake deadline.** h11 has no deadline for a request head, so a client sending one
  header byte every 10 s holds its socket for ever (1,100 of them exhausted the file
  descriptors).  Every wait for a request head (a new connection, and a keep-alive
  connection between requests) is bounded by ``handshake_timeout``; past it the
  connection is dropped and counted.
* **Connections that have not started.** At most ``max_unstarted`` connections may be
  between their TCP accept and their first request head (HTTP) or their first WebSocket
  message (a call's ``start``); a new connection past the cap drops the *oldest* of them.
  Together with the deadline this bounds the sockets a flood of slow clients can hold, and
  a new client still gets in: a real one finishes its request head in milliseconds, long
  before a flood of newer connections reaches it.
* **Pings of the application.** ASGI has no ping: the WebSocket protocol class puts a
  ``brisvox.ping`` extension in the scope (:data:`PING_EXTENSION`: a callable returning a
  future that completes when the pong arrives), so the transport's monitor decides a silent
  peer with its own ``ping_timeout`` (``error{ping_timeout}``, 1008) instead of uvicorn's
  keepalive (1011), which host.py turns off.
* **Bounded pongs.** The pongs a client's pings ask for go straight to the socket, outside
  the app's flow control; a client that pings without reading grew the process by 100 MB.
  A pong is dropped (and counted) while the socket's unsent data is over
  ``max_pong_backlog`` bytes.

* **Binary messages handed over in the read callback.** The scope's ``brisvox.receive_tap``
  extension (:data:`RECEIVE_TAP_EXTENSION`) takes a handler (None removes it): while nothing
  waits in the app's queue, each binary message is offered to it in the protocol's read
  callback, and one it takes (True) never enters the queue.  A call's caller audio (50
  messages a second) then costs no queue hand-off and no wake-up of the app's task; anything
  the handler declines is queued as before, behind nothing, so the app sees the messages in
  order.
* **Reading pauses at a backlog, not at every message.** uvicorn pauses the socket's reading
  after each message and resumes it when the app has taken it: two ``epoll_ctl`` calls per
  20 ms audio frame, a third of the edge's CPU per frame (``bench/density/edge_lever.py``).
  Reading pauses when :data:`RECEIVE_BACKLOG` messages wait for the app (and resumes when it
  has taken them all), so the queue stays bounded and a client that outruns its call still
  meets TCP backpressure.

A frame the WebSocket layer refuses (invalid UTF-8, bad framing, too big) is closed with
its code as before, but logged as one short line at most every :data:`brisvox.core.ratelog.LOG_INTERVAL`
seconds (with the count), never a traceback.  Timers are loop timer handles at clock
instants (clock time is loop time, :mod:`brisvox.core.clock`), like
:func:`brisvox.transport._timeout.bounded`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.frames import Frame
from websockets.http11 import Request
from websockets.protocol import State

from brisvox.core.clock import Clock, Timer, call_at
from brisvox.core.errors import ConfigError
from brisvox.core.ratelog import RateLimitedLog

__all__ = ["PING_EXTENSION", "RECEIVE_BACKLOG", "RECEIVE_TAP_EXTENSION", "Edge", "EdgeConfig", "EdgeStats"]

log = logging.getLogger(__name__)

PING_EXTENSION = "brisvox.ping"
"""The scope extension through which the app pings its WebSocket peer."""

RECEIVE_TAP_EXTENSION = "brisvox.receive_tap"
"""The scope extension that sets the handler offered each binary message in the read callback
(see the module docs)."""

REFUSED_LINGER = 2.0
"""Seconds a connection whose frame was refused keeps reading for the client's close."""


RECEIVE_BACKLOG = 16
"""Received messages the app has not taken yet at which reading pauses (TCP backpressure):
16 audio frames are 320 ms."""

MAX_PENDING_PINGS = 16
"""Pings of the app awaiting their pong; an older one is given up (cancelled) past it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class EdgeConfig:
    handshake_timeout: float = 5.0
    max_unstarted: int = 128
    max_pong_backlog: int = 64 * 1024
    close_deadline: float = 12.0
    """Seconds after the server's close frame when the socket is dropped whatever happens: uvicorn
    closes it 10 s after the app's close, but a close waits for unsent data that a client that
    does not read never takes."""

    def validate(self) -> None:
        if not self.handshake_timeout > 0:
            raise ConfigError(f"EdgeConfig.handshake_timeout={self.handshake_timeout!r}: must be positive")
        if not self.close_deadline > 0:
            raise ConfigError(f"EdgeConfig.close_deadline={self.close_deadline!r}: must be positive")
        if self.max_unstarted < 1:
            raise ConfigError(f"EdgeConfig.max_unstarted={self.max_unstarted!r}: must be at least 1")
        if self.max_pong_backlog < 0:
            raise ConfigError(f"EdgeConfig.max_pong_backlog={self.max_pong_backlog!r}: must be >= 0")


@dataclass(slots=True)
class EdgeStats:
    unstarted: int = 0
    """Connections now between their accept and their first request head or message."""
    evicted_unstarted: int = 0
    """Connections dropped (oldest first) to make room for a new one under ``max_unstarted``."""
    handshake_timeouts: int = 0
    pongs_dropped: int = 0
    refused_frames: int = 0
    close_deadlines: int = 0
    """Sockets dropped because their close did not get through within ``close_deadline``."""


class Edge:
    """One server's edge: its limits, its counters and its two protocol classes."""

    def __init__(self, clock: Clock, config: EdgeConfig | None = None) -> None:
        self.clock = clock
        self.config = config or EdgeConfig()
        self.config.validate()
        self.stats = EdgeStats()
        self._log = RateLimitedLog(log, "server edge", clock.now)
        self._holders: dict[object, Callable[[], None]] = {}  # unstarted connections, oldest first

    def note(self, kind: str) -> None:
        """Count one refused thing in the log (a line at most every ``ratelog.LOG_INTERVAL`` seconds)."""
        self._log.note(kind)

    def _acquire(self, holder: object, evict: Callable[[], None]) -> None:
        """Count ``holder`` as not started; at the cap the oldest one is evicted (``evict`` is
        how to drop a holder)."""
        if len(self._holders) >= self.config.max_unstarted:
            oldest = next(iter(self._holders))
            drop = self._holders.pop(oldest)
            self.stats.evicted_unstarted += 1
            self.note("connections dropped (the oldest not started, to make room)")
            drop()
        self._holders[holder] = evict
        self.stats.unstarted = len(self._holders)

    def _release(self, holder: object) -> None:
        self._holders.pop(holder, None)
        self.stats.unstarted = len(self._holders)

    def protocols(self) -> tuple[type[H11Protocol], type[WebSocketsSansIOProtocol]]:
        """The HTTP and WebSocket protocol classes for uvicorn's ``http=`` and ``ws=``."""
        edge = self

        class EdgeHttp(H11Protocol):
            _token = False
            _deadline: Timer | None = None

            def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
                super().connection_made(transport)
                self._token = True
                edge._acquire(self, self._evicted)
                self._arm()

            def _evicted(self) -> None:
                self._token = False
                self._cancel_deadline()
                self.transport.abort()

            def connection_lost(self, exc: Exception | None) -> None:
                self._disarm()
                super().connection_lost(exc)

            def data_received(self, data: bytes) -> None:
                before = self.cycle
                super().data_received(data)
                if self.cycle is not before:  # a request head arrived: the app has it now
                    self._disarm()

            def on_response_complete(self) -> None:
                super().on_response_complete()
                if not self.transport.is_closing():
                    self._arm()  # the next request head gets the same deadline

            def handle_websocket_upgrade(self, event: Any) -> None:
                token = self._token
                self._disarm()
                super().handle_websocket_upgrade(event)
                ws = self.transport.get_protocol()
                if token and isinstance(ws, EdgeWs) and not ws.disconnected:
                    ws.hold_token()  # released at the call's first message

            def _arm(self) -> None:
                self._cancel_deadline()
                self._deadline = call_at(edge.clock, edge.clock.now() + edge.config.handshake_timeout, self._expired)

            def _cancel_deadline(self) -> None:
                if self._deadline is not None:
                    self._deadline.cancel()
                    self._deadline = None

            def _disarm(self) -> None:
                self._cancel_deadline()
                if self._token:
                    self._token = False
                    edge._release(self)

            def _expired(self) -> None:
                self._deadline = None
                if not self.transport.is_closing():
                    edge.stats.handshake_timeouts += 1
                    edge.note("connections dropped (no request head within the handshake timeout)")
                    self.transport.abort()

        class EdgeWs(WebSocketsSansIOProtocol):
            def __init__(self, *args: Any, **kwargs: Any) -> None:
                super().__init__(*args, **kwargs)
                self._token = False
                self._refused = False
                self._close_deadline: Timer | None = None
                self._pings: dict[bytes, asyncio.Future[None]] = {}
                self._ping_ids = itertools.count(1)
                self._tap: Callable[[bytes], bool] | None = None

            def hold_token(self) -> None:
                self._token = True
                edge._acquire(self, self._evicted)

            def _evicted(self) -> None:
                self._token = False
                self.transport.abort()

            def _drop_token(self) -> None:
                if self._token:
                    self._token = False
                    edge._release(self)

            def connection_lost(self, exc: Exception | None) -> None:
                self._drop_token()
                if self._close_deadline is not None:
                    self._close_deadline.cancel()
                for fut in self._pings.values():
                    fut.cancel()
                self._pings.clear()
                super().connection_lost(exc)

            def handle_connect(self, event: Request) -> None:
                super().handle_connect(event)
                if self.response.status_code == 101:
                    extensions: dict[str, Any] = self.scope["extensions"]
                    extensions[PING_EXTENSION] = self.app_ping
                    extensions[RECEIVE_TAP_EXTENSION] = self._set_tap

            def _set_tap(self, handler: Callable[[bytes], bool] | None) -> None:
                self._tap = handler

            def app_ping(self) -> asyncio.Future[None]:
                """Send a ping; the future completes when its pong (or a later one) arrives,
                and is cancelled when the connection is lost first."""
                fut: asyncio.Future[None] = self.loop.create_future()
                if self.disconnected or self.close_sent or self.transport.is_closing():
                    fut.cancel()
                    return fut
                if len(self._pings) >= MAX_PENDING_PINGS:
                    oldest = next(iter(self._pings))
                    self._pings.pop(oldest).cancel()
                payload = b"bv%d" % next(self._ping_ids)
                self._pings[payload] = fut
                self.conn.send_ping(payload)
                self.transport.write(b"".join(self.conn.data_to_send()))
                return fut

            def handle_pong(self, event: Frame) -> None:
                payload = bytes(event.data)
                if payload not in self._pings:
                    super().handle_pong(event)
                    return
                # a pong answers its ping and every earlier one (RFC 6455 5.5.3)
                for key in list(self._pings):
                    fut = self._pings.pop(key)
                    if not fut.done():
                        fut.set_result(None)
                    if key == payload:
                        break

            def handle_ping(self) -> None:
                output = b"".join(self.conn.data_to_send())
                if self._refused:
                    return  # the write side is shut: a write now would fail the connection with a reset
                if self.transport.get_write_buffer_size() + len(output) > edge.config.max_pong_backlog:
                    edge.stats.pongs_dropped += 1
                    edge.note("pongs dropped (the client does not read)")
                    return
                self.transport.write(output)

            def handle_parser_exception(self) -> None:
                # uvicorn closes the socket at once (again on every later chunk); a client still
                # sending then gets a reset that can discard the close frame in flight.  Instead:
                # send the close frame, shut the write side, and keep reading (the parser discards)
                # until the client closes or REFUSED_LINGER passes.
                if self._refused:
                    return
                self._refused = True
                edge.stats.refused_frames += 1
                sent = self.conn.close_sent
                code, reason = (sent.code, sent.reason) if sent is not None else (1006, "")
                edge.note(f"frames refused ({code})")
                self.queue.put_nowait({"type": "websocket.disconnect", "code": code, "reason": reason})
                self.transport.write(b"".join(self.conn.data_to_send()))
                self.close_sent = True
                if self.transport.can_write_eof():
                    self.transport.write_eof()
                if self.read_paused:
                    self.read_paused = False
                    self.transport.resume_reading()
                if self.close_timer is not None:
                    self.close_timer.cancel()
                # uvicorn only ever cancels its close_timer, which a Timer supports
                self.close_timer = call_at(  # type: ignore[assignment]
                    edge.clock, edge.clock.now() + REFUSED_LINGER, self.transport.close)
                self._arm_close_deadline()

            async def send(self, message: Any) -> None:
                await super().send(message)
                if self.close_sent:
                    self._arm_close_deadline()

            def _arm_close_deadline(self) -> None:
                if self._close_deadline is None and not self.disconnected:
                    self._close_deadline = call_at(edge.clock, edge.clock.now() + edge.config.close_deadline,
                                                   self._close_overdue)

            def _close_overdue(self) -> None:
                self._close_deadline = None
                if not self.disconnected:
                    edge.stats.close_deadlines += 1
                    edge.note("sockets dropped (their close did not get through)")
                    sock = self.transport.get_extra_info("socket")
                    if sock is not None:
                        # a reset: a plain close would leave the kernel holding the unsent data
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.transport.abort()

            def send_receive_event_to_app(self) -> None:
                self._drop_token()
                if self.close_sent:
                    super().send_receive_event_to_app()
                    return
                data = self.frames[0] if len(self.frames) == 1 else b"".join(self.frames)
                self.frames = []
                if self.curr_msg_data_type != "text":
                    tap = self._tap
                    if tap is not None and self.queue.empty() and tap(data):
                        return
                    self._queue_for_app({"type": "websocket.receive", "bytes": data})
                    return
                try:
                    text = data.decode()
                except UnicodeDecodeError:
                    # uvicorn logs a traceback here, once per frame: a client's fault is a counted line
                    if self.conn.state is State.OPEN:
                        self.conn.send_close(1007)
                        self.handle_parser_exception()
                    else:
                        # the client's close frame came in the same read and was answered already
                        # (a second close would raise): handle_close sends that answer
                        edge.stats.refused_frames += 1
                        edge.note("frames refused (1007)")
                    return
                self._queue_for_app({"type": "websocket.receive", "text": text})

            def _queue_for_app(self, message: Any) -> None:
                # uvicorn pauses reading after every message and resumes when the app has taken
                # it: two epoll_ctl calls per 20 ms audio frame.  Reading pauses at RECEIVE_BACKLOG
                # messages instead (resumed by uvicorn's receive() once the app has taken them all),
                # so the queue stays bounded: RECEIVE_BACKLOG plus the frames of one socket read.
                self.queue.put_nowait(message)
                if not self.read_paused and self.queue.qsize() >= RECEIVE_BACKLOG:
                    self.read_paused = True
                    self.transport.pause_reading()

        return EdgeHttp, EdgeWs
