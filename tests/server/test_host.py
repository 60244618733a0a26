"""host.serve: the listener, the start-up line, the exit status, and the edge it gives uvicorn."""

from __future__ import annotations

import asyncio
import gc
import io
import socket

import pytest

from brisvox.core.clock import SystemClock, bounded
from brisvox.server.host import ServerParts, bind_listener, serve
from brisvox.server.lifecycle import EXIT_STARTUP_FAILURE, StopRequests
from brisvox.server.settings import Settings
from brisvox.server.ws_endpoint import TransportEndpoint
from tests.server._echo import echo_runner
from tests.server.test_edge import closed_within

pytestmark = pytest.mark.realtime


def _parts(clock: SystemClock) -> ServerParts:
    endpoint = TransportEndpoint(clock)
    return ServerParts(runner=echo_runner(clock), call_endpoint=endpoint, description="echo",
                       on_stop_calls=endpoint.close)


async def test_a_port_in_use_is_a_startup_failure_with_exit_status_1(capsys: pytest.CaptureFixture[str]) -> None:
    taken = bind_listener("127.0.0.1", 0)
    try:
        port = taken.getsockname()[1]
        code = await serve(Settings(port=port), _parts(SystemClock()), stops=StopRequests(), out=io.StringIO())
    finally:
        taken.close()
    assert code == EXIT_STARTUP_FAILURE
    assert f"cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


async def test_connections_accepted_on_the_listener_have_nagles_algorithm_off() -> None:
    # With Nagle on, a call's second small write (a reply's first audio after its
    # bot-started-speaking) waited for the caller's delayed ACK: up to one 20 ms frame.
    listener = bind_listener("127.0.0.1", 0)
    accepted: asyncio.Future[asyncio.StreamWriter] = asyncio.get_running_loop().create_future()
    server = await asyncio.start_server(lambda _r, w: accepted.set_result(w), sock=listener)
    clock = SystemClock()
    try:
        _reader, client = await bounded(clock, 5, asyncio.open_connection(*listener.getsockname()[:2]), "connect")
        served = await bounded(clock, 5, accepted, "accept")
        sock = served.get_extra_info("socket")
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        client.close()
        served.close()
        await client.wait_closed()
        await served.wait_closed()
    finally:
        server.close()
        await server.wait_closed()


async def test_serve_prints_its_url_applies_the_settings_edge_limits_and_exits_0_when_drained() -> None:
    clock = SystemClock()
    stops = StopRequests()
    out = io.StringIO()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(serve(Settings(port=0, handshake_timeout=0.4), _parts(clock), clock=clock,
                                         stops=stops, out=out, on_ready=ready.set_result))
    try:
        port = await asyncio.wait_for(ready, 20)
        assert f"listening on http://127.0.0.1:{port} (calls on ws://127.0.0.1:{port}/ws; echo)" in out.getvalue()
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"GET /")  # and nothing more: the settings' 0.4 s handshake deadline ends it
        assert await closed_within(r, 2.0)
        w.close()
    finally:
        stops.request("test stop")
        code = await asyncio.wait_for(server, 30)
    assert code == 0 and "stopped (drained, exit status 0)" in out.getvalue()


async def test_serve_freezes_the_startup_heap_while_it_listens_and_gives_it_back_when_stopped() -> None:
    # A full collection on the loop walked the start-up heap too: a stall in every reply playing (heap.py).
    clock = SystemClock()
    stops = StopRequests()
    frozen: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(serve(Settings(port=0), _parts(clock), clock=clock, stops=stops,
                                         out=io.StringIO(), on_ready=lambda _port: frozen.set_result(gc.get_freeze_count())))
    try:
        assert await asyncio.wait_for(frozen, 20) > 1000  # the modules, the app, uvicorn: thousands of objects
    finally:
        stops.request("test stop")
        assert await asyncio.wait_for(server, 30) == 0
    assert gc.get_freeze_count() == 0
