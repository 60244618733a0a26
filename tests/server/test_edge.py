"""The server's edge under uvicorn (brisvox.server.edge), through ``host.serve`` on 127.0.0.1."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import io
import json
import logging
import os
import socket
import struct
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from brisvox.core.clock import SystemClock
from brisvox.server.edge import Edge
from brisvox.server.host import ServerParts, serve
from brisvox.server.lifecycle import StopRequests
from brisvox.server.settings import Settings
from brisvox.server.ws_endpoint import TransportEndpoint
from tests.server._echo import echo_runner

pytestmark = pytest.mark.realtime

TCP_ESTABLISHED = 1  # tcpi_state (linux/tcp_states.h)


@dataclasses.dataclass
class Running:
    port: int
    edge: Edge
    endpoint: TransportEndpoint

    @property
    def ws(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"


@asynccontextmanager
async def running(close_deadline: float = 12.0, **settings: Any) -> AsyncIterator[Running]:
    clock = SystemClock()
    s = Settings(port=0, **settings)
    endpoint = TransportEndpoint(clock, s.transport_config())
    parts = ServerParts(runner=echo_runner(clock), call_endpoint=endpoint, description="echo",
                        on_stop_calls=endpoint.close, transport_stats=endpoint.stats)
    edge = Edge(clock, dataclasses.replace(s.edge_config(), close_deadline=close_deadline))
    stops = StopRequests()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(serve(s, parts, clock=clock, stops=stops, out=io.StringIO(),
                                         on_ready=ready.set_result, edge=edge))
    try:
        port = await asyncio.wait_for(ready, 20)
        yield Running(port, edge, endpoint)
    finally:
        stops.request("test stop")
        await asyncio.wait_for(server, 30)


async def closed_within(reader: asyncio.StreamReader, seconds: float) -> bool:
    """Whether the server closes the connection (EOF or reset) within ``seconds``."""
    try:
        while await asyncio.wait_for(reader.read(65536), seconds):
            pass
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False
    return True


async def get(port: int, path: str) -> int:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    status = await asyncio.wait_for(r.readline(), 5)
    w.close()
    return int(status.split()[1])


async def get_body(port: int, path: str) -> str:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode())
    data = await asyncio.wait_for(r.read(), 5)
    w.close()
    return data.decode()


def frame(opcode: int, payload: bytes) -> bytes:
    """A masked client frame (mask key zero: the payload goes as is)."""
    n = len(payload)
    head = bytes([0x80 | opcode])
    if n < 126:
        head += bytes([0x80 | n])
    elif n < 65536:
        head += bytes([0x80 | 126]) + struct.pack("!H", n)
    else:
        head += bytes([0x80 | 127]) + struct.pack("!Q", n)
    return head + b"\0\0\0\0" + payload


async def upgrade(port: int, rcvbuf: int | None = None) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    sock = socket.socket()
    if rcvbuf is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    sock.setblocking(False)
    await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
    r, w = await asyncio.open_connection(sock=sock)
    key = base64.b64encode(os.urandom(16)).decode()
    w.write((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
             f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = await asyncio.wait_for(r.readuntil(b"\r\n\r\n"), 5)
    assert head.startswith(b"HTTP/1.1 101"), head
    return r, w


async def test_a_connection_that_sends_its_request_head_one_byte_at_a_time_is_dropped_at_the_deadline() -> None:
    async with running(handshake_timeout=0.5) as srv:
        r, w = await asyncio.open_connection("127.0.0.1", srv.port)
        for b in b"GET /healthz HT":  # slowloris: a byte every 0.1 s keeps no deadline from firing
            w.write(bytes([b]))
            await asyncio.sleep(0.1)
            if r.at_eof() or w.is_closing():
                break
        assert await closed_within(r, 2.0)
        w.close()
        assert srv.edge.stats.handshake_timeouts == 1
        assert await get(srv.port, "/healthz") == 200
        scraped = await get_body(srv.port, "/metrics")
        assert 'brisvox_edge_events_total{event="handshake_timeouts"} 1.0' in scraped
        assert 'brisvox_transport_events_total{event="audio_floods"} 0.0' in scraped


async def test_a_keep_alive_connection_dripping_its_next_request_is_dropped_at_the_deadline() -> None:
    async with running(handshake_timeout=0.6) as srv:
        r, w = await asyncio.open_connection("127.0.0.1", srv.port)
        w.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert (await asyncio.wait_for(r.readline(), 5)).startswith(b"HTTP/1.1 200")
        await asyncio.wait_for(r.readuntil(b"ok\n"), 5)
        for b in b"GET /healthz HTTP/1.1\r\n":  # uvicorn's keep-alive timer restarts on every byte
            if w.is_closing():
                break
            w.write(bytes([b]))
            await asyncio.sleep(0.1)
        assert await closed_within(r, 2.0)
        w.close()
        assert srv.edge.stats.handshake_timeouts == 1


async def test_past_the_cap_on_unstarted_connections_a_new_one_drops_the_oldest_and_gets_in() -> None:
    async with running(max_unstarted=3, handshake_timeout=30.0) as srv:
        idle = []
        for _ in range(3):
            idle.append(await asyncio.open_connection("127.0.0.1", srv.port))
            await asyncio.sleep(0.05)
        r, w = await asyncio.open_connection("127.0.0.1", srv.port)
        assert await closed_within(idle[0][0], 1.0)  # the oldest made room
        assert srv.edge.stats.evicted_unstarted == 1 and srv.edge.stats.unstarted == 3
        assert not any(await asyncio.gather(*(closed_within(ir, 0.1) for ir, _ in idle[1:])))
        assert not await closed_within(r, 0.1)
        assert await get(srv.port, "/healthz") == 200  # a real client still gets in (evicting another)
        for _, iw in [*idle, (r, w)]:
            iw.close()
        await asyncio.sleep(0.2)
        assert srv.edge.stats.unstarted == 0


async def test_a_call_stops_counting_as_unstarted_at_its_first_message() -> None:
    async with running(max_unstarted=1) as srv, connect(srv.ws, compression=None) as a:
        await a.send(json.dumps({"type": "start"}))
        assert json.loads(await a.recv())["type"] == "started"
        assert srv.edge.stats.unstarted == 0
        async with connect(srv.ws, compression=None) as b:
            await b.send(json.dumps({"type": "start"}))
            assert json.loads(await b.recv())["type"] == "started"
        assert await get(srv.port, "/healthz") == 200


async def test_a_wrong_websocket_path_gets_404() -> None:
    async with running() as srv:
        with pytest.raises(InvalidStatus) as info:
            async with connect(f"ws://127.0.0.1:{srv.port}/nope"):
                pass
        assert info.value.response.status_code == 404


async def test_permessage_deflate_is_not_negotiated() -> None:
    async with running() as srv, connect(srv.ws, compression="deflate") as ws:
        assert ws.protocol.extensions == []
        assert ws.response is not None and "Sec-WebSocket-Extensions" not in ws.response.headers


async def test_invalid_utf8_frames_are_closed_1007_with_one_short_log_line_and_no_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with running() as srv:
        for _ in range(3):
            async with connect(srv.ws, compression=None) as ws:
                await ws.send(b"\xff\xfe not utf-8", text=True)
                with pytest.raises(ConnectionClosed):
                    await asyncio.wait_for(ws.recv(), 5)
                assert ws.protocol.close_rcvd is not None and ws.protocol.close_rcvd.code == 1007
        assert srv.edge.stats.refused_frames == 3
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]
    edge_lines = [r for r in caplog.records if r.name == "brisvox.server.edge"]
    assert len(edge_lines) == 1 and "\n" not in edge_lines[0].getMessage()


async def test_a_client_that_stops_reading_is_ended_by_the_servers_ping_timeout_with_1008() -> None:
    async with running(ping_interval=0.3, ping_timeout=1.0) as srv, connect(srv.ws, compression=None,
                                                                            ping_interval=None) as ws:
        await ws.send(json.dumps({"type": "start"}))
        assert json.loads(await ws.recv())["type"] == "started"
        ws.transport.pause_reading()  # no pongs, no frames
        await asyncio.sleep(1.8)
        ws.transport.resume_reading()
        texts = []
        try:
            async for m in ws:
                if isinstance(m, str):
                    texts.append(json.loads(m))
        except ConnectionClosed:
            pass
        assert {"type": "error", "code": "ping_timeout", "fatal": True,
                "message": "nothing from the client for 1 s"} in texts
        assert ws.protocol.close_rcvd is not None and ws.protocol.close_rcvd.code == 1008
        assert srv.endpoint.stats.ping_timeouts == 1


async def test_a_silent_client_that_answers_pings_stays_connected() -> None:
    async with running(ping_interval=0.3, ping_timeout=1.0) as srv, connect(srv.ws, compression=None,
                                                                            ping_interval=None) as ws:
        await ws.send(json.dumps({"type": "start"}))
        assert json.loads(await ws.recv())["type"] == "started"
        await asyncio.sleep(2.0)  # only the server's pings and our pongs
        await ws.send(b"\x01\x00" * 160)
        assert await asyncio.wait_for(ws.recv(), 5) == b"\x01\x00" * 160
        assert srv.endpoint.stats.ping_timeouts == 0


async def test_pongs_to_a_ping_flood_from_a_client_that_does_not_read_are_dropped() -> None:
    async with running(max_pong_backlog=16384) as srv:
        _r, w = await upgrade(srv.port, rcvbuf=4096)
        w.write(frame(0x1, json.dumps({"type": "start"}).encode()))
        ping = frame(0x9, b"p" * 125)
        for _ in range(40):
            w.write(ping * 1000)  # 40,000 pings asking for 5 MB of pongs
            await w.drain()
        await asyncio.sleep(0.5)
        assert srv.edge.stats.pongs_dropped > 0
        w.close()
        assert await get(srv.port, "/healthz") == 200


async def test_a_client_still_sending_after_a_refused_frame_gets_the_close_frame_not_a_reset() -> None:
    async with running() as srv:
        r, w = await upgrade(srv.port)
        w.write(frame(0x1, b"\xff not utf-8"))
        for _ in range(50):  # the client has not seen the close yet and goes on sending
            w.write(frame(0x2, bytes(20000)))
        await w.drain()
        await asyncio.sleep(0.5)  # the close frame waits unread at the client, as on a slow network
        got = b""
        try:
            while chunk := await asyncio.wait_for(r.read(65536), 5):
                got += chunk
                if len(got) >= 4:
                    break
        except ConnectionResetError:
            pass
        assert got[:1] == b"\x88" and struct.unpack("!H", got[2:4])[0] == 1007, got
        w.write(frame(0x8, struct.pack("!H", 1007)))
        assert await closed_within(r, 3.0)
        w.close()


async def test_a_close_stuck_behind_data_the_client_never_reads_is_dropped_at_the_close_deadline() -> None:
    async with running(close_deadline=1.0, max_pong_backlog=1 << 30) as srv:
        _r, w = await upgrade(srv.port, rcvbuf=4096)
        w.write(frame(0x1, json.dumps({"type": "start"}).encode()))
        ping = frame(0x9, b"p" * 125)
        for _ in range(80):  # 10 MB of pongs (no backlog limit here) fill every buffer: the client reads nothing
            w.write(ping * 1000)
            await w.drain()
        await asyncio.sleep(0.3)
        dropped = asyncio.Event()  # the deadline's drop, whenever a loaded machine gets to it
        note = srv.edge.note

        def noted(kind: str) -> None:
            note(kind)
            if srv.edge.stats.close_deadlines:
                dropped.set()

        srv.edge.note = noted  # type: ignore[method-assign]
        w.write(frame(0x1, b"\xff"))  # refused: the close frame queues behind the unread pongs
        await w.drain()
        await asyncio.wait_for(dropped.wait(), 60)
        assert srv.edge.stats.close_deadlines == 1
        tcp_state = w.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 1)[0]
        assert tcp_state != TCP_ESTABLISHED  # the server let go of it, rather than waiting on us for ever
        w.close()


async def test_a_refused_frame_and_the_clients_close_in_one_read_get_the_close_answered(
        caplog: pytest.LogCaptureFixture) -> None:
    async with running() as srv:
        r, w = await upgrade(srv.port)
        w.write(frame(0x1, b"\xc3(") + frame(0x8, struct.pack("!H", 1000)))
        got = await asyncio.wait_for(r.read(4), 5)
        assert got[:1] == b"\x88", got  # a close frame, not a dropped connection
        assert await closed_within(r, 3.0)
        w.close()
    assert not [r for r in caplog.records if r.exc_info or r.levelno >= logging.ERROR]


class _Transport(asyncio.Transport):
    """A transport that records what the protocol does with reading."""

    def __init__(self) -> None:
        super().__init__()
        self.paused = False
        self.pauses = 0
        self.written = b""

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"sockname": ("127.0.0.1", 1), "peername": ("127.0.0.1", 2)}.get(name, default)

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written += bytes(data)

    def is_closing(self) -> bool:
        return False

    def pause_reading(self) -> None:
        self.paused = True
        self.pauses += 1

    def resume_reading(self) -> None:
        self.paused = False

    def close(self) -> None:
        pass


def _upgraded(app: Any) -> tuple[Any, _Transport]:
    """The edge's WebSocket protocol for ``app`` on a fake transport, its upgrade request read."""
    import uvicorn
    from uvicorn.server import ServerState

    _http, ws_protocol = Edge(SystemClock()).protocols()
    config = uvicorn.Config(app, ws_per_message_deflate=False, lifespan="off")
    config.load()
    protocol = ws_protocol(config, ServerState(), {})
    transport = _Transport()
    protocol.connection_made(transport)
    key = base64.b64encode(os.urandom(16)).decode()
    protocol.data_received((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                            f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    return protocol, transport


async def test_reading_pauses_at_the_receive_backlog_not_at_every_message_and_resumes_once_the_app_took_them() -> None:

    from brisvox.server.edge import RECEIVE_BACKLOG

    taken: list[Any] = []
    take = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        await take.wait()
        for _ in range(RECEIVE_BACKLOG):
            taken.append(await receive())

    protocol, transport = _upgraded(app)
    for _ in range(20):  # the app accepts
        await asyncio.sleep(0)
    assert transport.written.startswith(b"HTTP/1.1 101")
    for i in range(RECEIVE_BACKLOG - 1):  # audio frames, one per socket read, that the app has not taken yet
        protocol.data_received(frame(0x2, bytes([i]) * 640))
        assert not transport.paused, f"reading paused at message {i + 1}"
    protocol.data_received(frame(0x2, bytes(640)))
    assert transport.paused and transport.pauses == 1  # the backlog is bounded: the socket is not read further
    take.set()
    for _ in range(50):
        await asyncio.sleep(0)
    assert len(taken) == RECEIVE_BACKLOG and taken[0]["bytes"] == bytes(640)
    assert not transport.paused  # the app took them all: reading resumed
    protocol.connection_lost(None)
    for task in list(protocol.tasks):
        await task


async def test_a_binary_message_the_receive_tap_takes_never_reaches_the_queue_and_one_behind_a_queued_message_waits() -> None:

    from brisvox.server.edge import RECEIVE_TAP_EXTENSION

    tapped: list[bytes] = []
    received: list[bytes] = []

    def take(data: bytes) -> bool:  # takes audio (first byte 1), declines the rest
        if data[0] == 1:
            tapped.append(data)
            return True
        return False

    async def app(scope: Any, receive: Any, send: Any) -> None:
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept"})
        scope["extensions"][RECEIVE_TAP_EXTENSION](take)
        while (msg := await receive())["type"] == "websocket.receive":
            received.append(msg["bytes"])

    protocol, _transport = _upgraded(app)
    for _ in range(20):  # the app accepts and sets its tap
        await asyncio.sleep(0)
    protocol.data_received(frame(0x2, b"\x01a"))
    assert tapped == [b"\x01a"] and protocol.queue.empty()  # taken in the read callback
    protocol.data_received(frame(0x2, b"\x02b") + frame(0x2, b"\x01c"))  # declined, then audio behind it
    assert tapped == [b"\x01a"]  # not offered: the declined message waits for the app, in order
    for _ in range(20):
        await asyncio.sleep(0)
    assert received == [b"\x02b", b"\x01c"]
    protocol.connection_lost(None)
    for task in list(protocol.tasks):
        await task
