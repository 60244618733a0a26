"""host.serve: the listener, the start-up line, the exit status, and the edge it gives uvicorn."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import io
import socket
from collections.abc import AsyncIterator, Callable
from typing import ClassVar

import pytest

from brisvox.core.clock import SystemClock, bounded
from brisvox.core.tasks import TaskScope
from brisvox.server.host import PAUSE_LIMIT, PAUSED_CHECK, AcceptGate, ServerParts, bind_listener, serve
from brisvox.server.lifecycle import EXIT_STARTUP_FAILURE, StopRequests
from brisvox.server.node import ACCEPT_SLACK, NodeRow, NodeSeat, NodeTable
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


# --- the accept gate of a worker (brisvox serve --workers N) ---------------------------------------


class _Served(asyncio.Protocol):
    """A connection the gate handed over: records its socket, holds it open."""

    made: ClassVar[list[socket.socket]] = []

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        _Served.made.append(transport.get_extra_info("socket"))


@contextlib.asynccontextmanager
async def _gate(held: int, clock: SystemClock) -> AsyncIterator[tuple[AcceptGate, NodeTable, Callable[[], None]]]:
    """Worker 0's gate on a fresh listener, beside a sibling (worker 1) that admits calls and holds
    none; with a ``connect()`` that opens a client connection (closed on the way out)."""
    table = NodeTable(2)
    table.write(1, NodeRow(alive=1, ready=1))
    listener = bind_listener("127.0.0.1", 0)
    _Served.made = []
    clients: list[socket.socket] = []
    try:
        async with TaskScope("test") as scope:
            gate = AcceptGate(listener, _Served, NodeSeat(table, 0, pid=1), scope, clock,
                              held=lambda: held, admits=lambda: True)
            gate.start()
            try:
                yield gate, table, lambda: clients.append(
                    socket.create_connection(listener.getsockname()[:2], timeout=5))
            finally:
                gate.close()
    finally:
        for c in clients:
            c.close()
        listener.close()
        table.close()


async def test_a_worker_over_its_share_leaves_new_connections_to_its_sibling_until_the_sibling_catches_up() -> None:
    clock = SystemClock()
    held = ACCEPT_SLACK + 3  # this worker is held busy
    async with _gate(held, clock) as (gate, table, connect):
        connect()
        await clock.sleep(10 * PAUSED_CHECK)
        assert _Served.made == [] and gate.pauses == 1  # queued in the kernel for the sibling
        assert table.connections(0) == held  # what the sibling reads at its own accepts
        table.over_share(1, held - ACCEPT_SLACK, admits=True)  # the sibling took calls: within the slack now
        await bounded(clock, 5, _until(lambda: len(_Served.made) == 1, clock), "the accept")
        assert _Served.made[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        assert gate.accepted == 1


async def test_a_sibling_that_does_not_take_its_share_is_not_waited_for_past_the_pause_limit() -> None:
    clock = SystemClock()
    async with _gate(10, clock) as (gate, _table, connect):  # the sibling never accepts (a hung loop)
        started = clock.now()
        connect()
        connect()
        await bounded(clock, 5, _until(lambda: len(_Served.made) == 2, clock), "the accepts")
        assert clock.now() - started >= 2 * PAUSE_LIMIT  # each waited for the sibling, within the limit
        assert gate.overdue == 2


async def _until(done: object, clock: SystemClock) -> None:
    assert callable(done)
    while not done():
        await clock.sleep(0.005)


def test_the_least_loaded_worker_always_accepts_and_a_full_one_defers_to_a_sibling_with_room() -> None:
    table = NodeTable(3)
    try:
        assert not table.over_share(0, 50, admits=True)  # no live sibling: it accepts whatever it holds
        for i in (1, 2):
            table.write(i, NodeRow(alive=1, ready=1))
        table.over_share(1, 10, admits=True)
        table.over_share(2, 4, admits=True)
        assert not table.over_share(0, 4 + ACCEPT_SLACK, admits=True)
        assert table.over_share(0, 5 + ACCEPT_SLACK, admits=True)  # above the least-loaded (4) + the slack
        assert not table.over_share(2, 4, admits=True)  # the least-loaded never pauses
        assert table.over_share(0, 0, admits=False)  # full: a sibling that admits takes the call
        table.write(2, NodeRow(alive=1, ready=1, draining=1))  # a draining sibling is no reference
        assert not table.over_share(0, 10 + ACCEPT_SLACK, admits=True)
        table.retire(1)  # a dead one neither
        assert not table.over_share(0, 100, admits=False)
        assert table.connections(1) == 0
    finally:
        table.close()
