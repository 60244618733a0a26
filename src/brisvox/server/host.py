"""The server process: bind, serve the ASGI app with uvicorn, drain on a stop signal, exit.

:func:`serve` is the whole life of ``brisvox serve``.  It binds the listener itself (a
port in use is a startup failure, exit status 1, not an exception from inside uvicorn),
runs uvicorn with its own signal handling turned off (the stop signals belong to
:mod:`brisvox.server.lifecycle`) and with the edge's protocol classes
(:mod:`brisvox.server.edge`: handshake deadline, cap on connections not started, the app's
own pings, bounded pongs; uvicorn's keepalive pings and permessage-deflate are off), prints one ``listening on`` line, waits for a stop
request, drains, stops uvicorn (bounded) and returns the exit status.

In a worker of ``brisvox serve --workers N`` (:mod:`brisvox.server.workers`) the listener
is the node's, made by the supervisor, the ``listening on`` line is the supervisor's, and
the worker publishes its admission state and limit counters to its seat in the node's
table (:mod:`brisvox.server.node`) every :data:`~brisvox.server.node.PUBLISH_INTERVAL`,
so ``/readyz`` and ``/metrics`` answer for the node.  A worker accepts the node's connections
itself (:class:`AcceptGate`, not uvicorn's listener): it stops reading the socket while it holds
more than its share (:meth:`~brisvox.server.node.NodeTable.over_share`), so the node's calls
spread evenly over its workers (docs/SCALING.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import socket
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, TextIO

import uvicorn
from starlette.routing import BaseRoute

from brisvox.core.clock import Clock, SystemClock, deadline
from brisvox.core.errors import DeadlineExceeded
from brisvox.core.tasks import TaskScope
from brisvox.inference.pool import live_pools
from brisvox.server.access import AccessPolicy
from brisvox.server.app import CallEndpoint, HttpCallEndpoint, build_app
from brisvox.server.capacity import default_max_calls, saturated_pools
from brisvox.server.directory import CallDirectory
from brisvox.server.edge import Edge
from brisvox.server.heap import frozen_startup_heap
from brisvox.server.lifecycle import EXIT_STARTUP_FAILURE, StopRequests, drain_on_stop, install_stop_signals
from brisvox.server.metrics import ServerMetrics
from brisvox.server.node import PUBLISH_INTERVAL, NodeSeat
from brisvox.server.session import SessionManager, SessionRunner
from brisvox.server.settings import Settings
from brisvox.transport.websocket.stats import ServerStats

__all__ = ["ACCEPT_BURST", "HTTP_STOP_TIMEOUT", "PAUSED_CHECK", "PAUSE_LIMIT", "AcceptGate", "ServerParts", "bind_listener", "serve"]

log = logging.getLogger(__name__)

HTTP_STOP_TIMEOUT = 3.0
"""Seconds uvicorn gets to close its connections after the sessions are gone."""


ACCEPT_BURST = 16
"""Connections accepted per wake-up of the listening socket at most (the loop's other work goes on)."""
PAUSED_CHECK = 0.02
"""Seconds between a paused worker's looks at the node's table."""
PAUSE_LIMIT = 0.5
"""Seconds a worker stays paused at most: then it accepts one connection whatever its share (a
sibling that looks least-loaded but does not accept, a hung loop, is not waited for longer)."""


class AcceptGate:
    """A worker's accept loop on the node's shared socket: it accepts while it holds at most its
    share of the node's connections and otherwise stops reading the socket (the kernel keeps the
    connection queued for a sibling) until its share is back.  An accepted connection is always
    served: the balance never refuses one.  ``held()`` is the connections the worker holds;
    ``admits()`` whether it admits calls now."""

    def __init__(self, listener: socket.socket, protocol: Callable[[], asyncio.Protocol], seat: NodeSeat,
                 scope: TaskScope, clock: Clock, *, held: Callable[[], int], admits: Callable[[], bool]) -> None:
        self._listener = listener
        self._protocol = protocol
        self._seat = seat
        self._scope = scope
        self._clock = clock
        self._held = held
        self._admits = admits
        self._setting_up = 0  # accepted, not yet handed to their protocol
        self._loop = asyncio.get_running_loop()
        self._paused: asyncio.Task[None] | None = None
        self._open = False
        self.accepted = 0
        self.pauses = 0
        self.overdue = 0
        """Connections accepted over the share because a pause ran out (PAUSE_LIMIT)."""

    def start(self) -> None:
        self._open = True
        self._loop.add_reader(self._listener.fileno(), self._readable)

    def close(self) -> None:
        """Stop accepting for good (the server stops); connections being set up finish in the scope."""
        if self._open:
            self._open = False
            self._loop.remove_reader(self._listener.fileno())
        if self._paused is not None:
            self._paused.cancel()

    def _over_share(self) -> bool:
        return self._seat.over_share(self._held() + self._setting_up, admits=self._admits())

    def _readable(self, overdue: bool = False) -> None:
        """Accept what is queued while within the share; ``overdue``: the first one whatever the share."""
        for _ in range(ACCEPT_BURST):
            if not overdue and self._over_share():
                self._loop.remove_reader(self._listener.fileno())
                self.pauses += 1
                self._paused = self._scope.spawn(self._resume_when_under(), name="accept paused")
                return
            try:
                conn, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                return  # a sibling took it
            except OSError as exc:  # out of descriptors or buffers: the queued callers wait, the loop goes on
                log.error("accepting a connection failed: %s; trying again in %.1f s", exc, 1.0)
                self._loop.remove_reader(self._listener.fileno())
                self._paused = self._scope.spawn(self._resume_when_under(delay=1.0), name="accept paused")
                return
            conn.setblocking(False)
            self.overdue += overdue
            overdue = False
            self.accepted += 1
            self._setting_up += 1
            self._scope.spawn(self._serve(conn), name="accept")

    async def _resume_when_under(self, delay: float = PAUSED_CHECK) -> None:
        await self._clock.sleep(delay)
        waited, overdue = delay, False
        while self._over_share():
            if waited >= PAUSE_LIMIT:
                overdue = True
                break
            await self._clock.sleep(PAUSED_CHECK)
            waited += PAUSED_CHECK
        self._paused = None
        if self._open:
            self._loop.add_reader(self._listener.fileno(), self._readable)
            if overdue:  # now, while the reader is on: a connection queued meanwhile is taken, none is left waiting
                self._readable(overdue=True)

    async def _serve(self, conn: socket.socket) -> None:
        try:
            await self._loop.connect_accepted_socket(self._protocol, conn)
        except Exception:  # asyncio's own server reports a failed set-up the same way and serves on
            log.exception("setting up an accepted connection failed; it is closed")
            conn.close()
        finally:
            self._setting_up -= 1


class _Uvicorn(uvicorn.Server):
    """uvicorn without its own signal handlers."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@dataclass(frozen=True, slots=True)
class ServerParts:
    """What :func:`serve` runs: the session runner, the call endpoint and a description for the banner."""

    runner: SessionRunner[Any]
    call_endpoint: CallEndpoint
    description: str = ""
    on_stop_calls: Callable[[], None] | None = None
    """The endpoint's goodbye to connected calls: called when the shutdown's cancel stage begins
    and again once the sessions are gone, before the HTTP server stops (so it must be idempotent)."""
    ws_max_size: int = 16 * 1024 * 1024
    extra_routes: tuple[BaseRoute, ...] = ()
    """More routes of the app (the demo page)."""
    metrics: ServerMetrics | None = None
    """The metrics ``/metrics`` exports; the runner feeds the same object (a fresh one when None)."""
    agent: str | None = None
    """The served agent's name: signed call tokens that name another agent are refused."""
    call_routes: tuple[tuple[str, CallEndpoint], ...] = ()
    """More call endpoints by path (Twilio's, RTVI's ``/rtvi``), admitted like the WebSocket route."""
    self_authenticating: frozenset[str] = frozenset()
    """Paths of ``call_routes`` that check their own credential (AccessPolicy.self_authenticating)."""
    query_token: frozenset[str] = frozenset()
    """Paths of ``call_routes`` that also take the token as ``?token=`` (AccessPolicy.query_token)."""
    http_call_endpoints: tuple[HttpCallEndpoint, ...] = ()
    """Call endpoints over plain HTTP (WebRTC signaling): Origin and token checked like a call upgrade."""
    transport_stats: ServerStats | None = None
    """The call endpoint's transport counters, exported on ``/metrics`` (``brisvox_transport_events_total``)."""
    directory: CallDirectory | None = None
    """The calls by id: the control routes (``/api/calls/{id}/hangup``) and the global cap."""


def max_calls_for(settings: Settings, workers: int = 1) -> int:
    """This process's call limit: ``BRISVOX_MAX_CALLS`` (the node's) or the default from the
    cores and the inference pools, shared evenly by ``workers`` processes (logged)."""
    if settings.max_calls is not None:
        return max(1, settings.max_calls // workers)
    cores = max(1, (os.cpu_count() or 1) // workers)
    max_calls = default_max_calls(live_pools(), cores)
    log.info("max_calls %d (from %d cores and the pools %s)", max_calls, cores,
             ", ".join(f"{p.name}: {p.lane_capacity}" for p in live_pools()) or "(none)")
    return max_calls


def bind_listener(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (raises OSError).

    Made with ``IPPROTO_TCP`` named: asyncio turns Nagle's algorithm off (``TCP_NODELAY``) only on
    connections whose socket says so, and an accepted socket inherits the listener's protocol
    number.  With ``proto`` 0 every call's small writes waited for the caller's delayed ACK,
    which rides on its next 20 ms audio frame: up to 20 ms more voice-to-voice per turn
    (docs/PERFORMANCE.md, "Nagle's algorithm on the call sockets")."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(1024)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


async def serve(
    settings: Settings,
    parts: ServerParts,
    *,
    clock: Clock | None = None,
    stops: StopRequests | None = None,
    out: TextIO | None = None,
    on_ready: Callable[[int], None] | None = None,
    edge: Edge | None = None,
    listener: socket.socket | None = None,
    seat: NodeSeat | None = None,
) -> int:
    """Run the server until a stop request has drained it; returns the exit status.
    ``edge``: the connection limits (default: from ``settings``); pass one to read its counters.
    ``listener`` and ``seat``: a worker's node socket and its place in the node's table
    (see the module docs); the worker prints no ``listening on`` line."""
    clock = clock or SystemClock()
    stops = stops or StopRequests()
    out = out or sys.stdout
    if listener is not None:
        sock = listener
    else:
        try:
            sock = bind_listener(settings.host, settings.port)
        except OSError as exc:
            print(f"brisvox serve: cannot listen on {settings.host}:{settings.port}: {exc}", file=sys.stderr)
            return EXIT_STARTUP_FAILURE
    metrics = parts.metrics if parts.metrics is not None else ServerMetrics()

    def on_end(ended: Any) -> None:
        metrics.record_call_ended(ended)

    max_calls = max_calls_for(settings, seat.table.workers if seat is not None else 1)
    manager: SessionManager[Any] = SessionManager(
        parts.runner, max_sessions=max_calls, clock=clock, name="calls", on_end=on_end
    )
    wall_clock = clock
    # Token expiry is wall time by necessity: the tokens are minted on another machine.
    access = dataclasses.replace(
        AccessPolicy.from_settings(settings, agent=parts.agent, wall=lambda: wall_clock.wall().timestamp()),
        self_authenticating=parts.self_authenticating, query_token=parts.query_token,
        call_paths=frozenset(endpoint.path for endpoint in parts.http_call_endpoints))
    log.info("access: %s", access.describe())
    app = build_app(manager, metrics, ws_path=settings.ws_path, call_endpoint=parts.call_endpoint,
                    extra_routes=parts.extra_routes, access=access, call_routes=parts.call_routes,
                    node=seat.totals if seat is not None else None, directory=parts.directory,
                    http_call_endpoints=parts.http_call_endpoints)
    edge = edge or Edge(clock, settings.edge_config())
    metrics.watch_limits(edge.stats, parts.transport_stats)
    http_protocol, ws_protocol = edge.protocols()
    config = uvicorn.Config(
        app, log_level=settings.log_level, lifespan="off", http=http_protocol, ws=ws_protocol,
        timeout_graceful_shutdown=int(HTTP_STOP_TIMEOUT), access_log=False,
        # liveness is the transport's own ping (edge.PING_EXTENSION): error{ping_timeout} and 1008, not 1011
        ws_ping_interval=None, ws_ping_timeout=None,
        ws_per_message_deflate=False, ws_max_size=parts.ws_max_size,
    )
    http = _Uvicorn(config)
    gate: AcceptGate | None = None
    loop = asyncio.get_running_loop()
    remove_signals = install_stop_signals(loop, stops)
    port = int(sock.getsockname()[1])
    try:
        async with contextlib.AsyncExitStack() as heap, TaskScope("server") as scope:
            # a worker accepts through its gate (the module docs); uvicorn serves what it accepts
            http_task = scope.spawn(http.serve(sockets=[sock] if seat is None else []), name="http")
            while not http.started and not http_task.done():
                await clock.sleep(0.01)
            if http_task.done():
                print("brisvox serve: the HTTP server did not start", file=sys.stderr)
                return EXIT_STARTUP_FAILURE
            publisher = None
            heap.enter_context(frozen_startup_heap())  # it listens: the start-up heap is built (see heap.py)
            if seat is None:
                url = f"http://{settings.host}:{port}"
                print(f"brisvox serve: listening on {url} (calls on ws://{settings.host}:{port}{settings.ws_path}; "
                      f"{parts.description})", file=out, flush=True)
            else:
                publisher = scope.spawn(_publish(seat, manager, edge, parts.transport_stats, clock), name="publish")
                gate = AcceptGate(sock, _protocol_of(http), seat, scope, clock,
                                  held=lambda: len(http.server_state.connections), admits=lambda: manager.ready)
                gate.start()
            if on_ready is not None:
                on_ready(port)
            drain = scope.spawn(drain_on_stop(manager, stops, settings.shutdown_policy, parts.on_stop_calls), name="drain")
            await asyncio.wait([http_task, drain], return_when=asyncio.FIRST_COMPLETED)
            if not drain.done():
                # uvicorn ended on its own (it should not): treat it as a stop request.
                stops.request("the HTTP server stopped")
            report = await drain
            if publisher is not None:
                publisher.cancel()  # its last row says: not alive
            if parts.on_stop_calls is not None:
                parts.on_stop_calls()
            if gate is not None:
                gate.close()
            http.should_exit = True
            try:
                async with deadline(clock, HTTP_STOP_TIMEOUT, "HTTP server stop"):
                    await asyncio.wait([http_task])  # leaves the task to its scope (and to the cancel below)
            except DeadlineExceeded:
                log.warning("the HTTP server did not stop within %.0f s; leaving it", HTTP_STOP_TIMEOUT)
                http_task.cancel()
            if seat is None:
                print(f"brisvox serve: stopped ({report.outcome.value}, exit status {report.exit_code})",
                      file=out, flush=True)
            else:
                log.info("worker %d stopped (%s, exit status %d)", seat.index, report.outcome.value, report.exit_code)
            return report.exit_code
    except SystemExit as exc:  # uvicorn exits on some startup failures
        print(f"brisvox serve: the HTTP server failed to start (status {exc.code})", file=sys.stderr)
        return EXIT_STARTUP_FAILURE
    finally:
        remove_signals()
        sock.close()



def _protocol_of(http: uvicorn.Server) -> Callable[[], asyncio.Protocol]:
    """A connection's protocol as uvicorn's own listener makes it (``Server.startup``'s factory)."""
    config = http.config

    def make() -> asyncio.Protocol:
        protocol: asyncio.Protocol = config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=http.server_state, app_state=http.lifespan.state)
        return protocol

    return make


async def _publish(seat: NodeSeat, manager: SessionManager[Any], edge: Edge, transport: ServerStats | None,
                   clock: Clock) -> None:
    """A worker's row of the node's table, every PUBLISH_INTERVAL until the server stops (then not alive)."""
    try:
        while True:
            seat.publish(alive=True, ready=manager.ready and not saturated_pools(live_pools()),
                         draining=manager.draining, active=manager.active, reserved=manager.reserved,
                         max_calls=manager.max_sessions, edge=edge.stats, wire=transport)
            await clock.sleep(PUBLISH_INTERVAL)
    finally:
        seat.publish(alive=False, ready=False, draining=True, active=0, reserved=0, max_calls=0,
                     edge=edge.stats, wire=transport)
