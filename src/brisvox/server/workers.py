"""``brisvox serve --workers N``: N worker processes behind one port, supervised.

The supervisor binds the listening socket, makes the node's shared table
(:mod:`brisvox.server.node`) and a directory for ``prometheus_client``'s multiprocess files,
then forks N workers before it has started any thread or event loop.  Each worker inherits
the socket and accepts on it while it holds no more than its share of the node's connections
(:class:`~brisvox.server.host.AcceptGate`: an even spread), builds its own providers and
engine, admits its own calls and publishes its row; ``/readyz`` and ``/metrics`` of any
worker answer for the node.

Stop: the first SIGTERM or SIGINT is passed to every worker, which drains its own calls
(docs/OPERATIONS.md); a second one is passed on too and skips the rest of the drains.  The
node's exit status is the worst of its workers'.  A worker that dies while the node is not
stopping is logged with its status, counted (``brisvox_worker_restarts_total``) and
replaced after a back-off (:data:`RESTART_BACKOFF`, doubling up to :data:`MAX_BACKOFF`,
reset once a replacement has published itself alive); the other workers' calls are
untouched.  A worker that dies before every worker has started (a setting or a key it cannot
start with) stops the node instead: exit status 1.  The supervisor runs no event loop: it waits on the workers' sentinels and a
self-pipe the signal handlers write to.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import signal
import socket
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import wait
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import TextIO

from brisvox.server.lifecycle import EXIT_ABORTED, EXIT_STARTUP_FAILURE, STOP_SIGNALS
from brisvox.server.node import NodeSeat, NodeTable

__all__ = ["MAX_BACKOFF", "MAX_WORKERS", "RESTART_BACKOFF", "STARTUP_TIMEOUT", "WorkerStart", "run_node"]

log = logging.getLogger(__name__)

RESTART_BACKOFF = 0.5
"""Seconds before the first replacement of a dead worker."""
MAX_BACKOFF = 10.0
MAX_WORKERS = 256
STARTUP_TIMEOUT = 120.0
"""Seconds the workers have to publish themselves alive (building providers may load models)."""


@dataclass(frozen=True, slots=True)
class WorkerStart:
    """What a forked worker gets: its seat, the node's socket and the metrics directory."""

    seat: NodeSeat
    listener: socket.socket
    metrics_dir: Path


WorkerMain = Callable[[WorkerStart], int]
"""Runs one worker (in the forked process) and returns its exit status."""


@dataclass(slots=True)
class _Worker:
    index: int
    process: BaseProcess | None = None
    backoff: float = RESTART_BACKOFF
    restart_in: float | None = None  # seconds until the replacement starts (None: none pending)
    codes: list[int] = field(default_factory=list)


def _child(main: WorkerMain, start: WorkerStart, wakeup: int) -> None:
    # The supervisor's signal plumbing is not the worker's: its loop installs its own handlers.
    signal.set_wakeup_fd(-1)
    os.close(wakeup)
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    start.seat.pid = os.getpid()
    _die_with_parent()
    code = EXIT_STARTUP_FAILURE
    try:
        code = main(start)
    except BaseException:
        log.exception("worker %d failed", start.seat.index)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    os._exit(code)


def _die_with_parent() -> None:
    """Linux: the kernel sends SIGKILL to this worker when its supervisor dies (a killed node leaves no
    worker holding its port); elsewhere a worker outlives a supervisor killed with SIGKILL."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if sys.platform != "linux" or name is None:
        return
    pr_set_pdeathsig = 1
    if ctypes.CDLL(name, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGKILL) != 0:
        log.warning("worker %d: prctl(PR_SET_PDEATHSIG) failed (errno %d): it would outlive a killed supervisor",
                    os.getpid(), ctypes.get_errno())


def run_node(workers: int, host: str, port: int, main: WorkerMain, *, banner: Callable[[int], str],
             out: TextIO | None = None) -> int:
    """Serve ``host:port`` with ``workers`` forked processes each running ``main`` until a stop
    signal drained them all; returns the node's exit status (see the module docs).
    ``banner(port)`` is the ``listening on`` line, printed once every worker is alive."""
    from brisvox.server.host import bind_listener

    out = out or sys.stdout
    if not 1 <= workers <= MAX_WORKERS:
        print(f"brisvox serve: --workers must be 1 to {MAX_WORKERS}, not {workers}", file=sys.stderr)
        return EXIT_STARTUP_FAILURE
    try:
        listener = bind_listener(host, port)
    except OSError as exc:
        print(f"brisvox serve: cannot listen on {host}:{port}: {exc}", file=sys.stderr)
        return EXIT_STARTUP_FAILURE
    table = NodeTable(workers)
    metrics_dir = Path(tempfile.mkdtemp(prefix="brisvox-metrics-"))
    ctx = multiprocessing.get_context("fork")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    stops: list[int] = []

    def on_signal(signum: int, _frame: object) -> None:
        stops.append(signum)

    previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    previous_fd = signal.set_wakeup_fd(wake_w)
    pool = [_Worker(i) for i in range(workers)]

    def start(w: _Worker) -> None:
        seat = NodeSeat(table, w.index, pid=0)
        w.process = ctx.Process(target=_child, args=(main, WorkerStart(seat, listener, metrics_dir), wake_w),
                                name=f"brisvox-worker-{w.index}", daemon=False)
        w.process.start()
        log.info("worker %d started (pid %s)", w.index, w.process.pid)

    try:
        for w in pool:
            start(w)
        code = _supervise(pool, table, start, stops, wake_r, banner(int(listener.getsockname()[1])), out)
    finally:
        signal.set_wakeup_fd(previous_fd)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        os.close(wake_r)
        os.close(wake_w)
        listener.close()
        table.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)
    print(f"brisvox serve: stopped ({workers} workers, exit status {code})", file=out, flush=True)
    return code


def _supervise(pool: list[_Worker], table: NodeTable, start: Callable[[_Worker], None], stops: list[int],
               wake_r: int, banner: str, out: TextIO) -> int:
    forwarded = 0
    announced = False
    failed_start = False
    waited = 0.0
    while True:
        if len(stops) > forwarded:  # pass each stop request on to every live worker
            for signum in stops[forwarded:]:
                for w in pool:
                    if w.process is not None and w.process.is_alive() and w.process.pid is not None:
                        os.kill(w.process.pid, signum)
            forwarded = len(stops)
        stopping = forwarded > 0
        if stopping and all(w.process is None or not w.process.is_alive() for w in pool):
            for w in pool:
                if w.process is not None:
                    w.process.join()
            worst = max((max(w.codes) if w.codes else 0) for w in pool)
            return EXIT_STARTUP_FAILURE if failed_start else worst
        if not announced:
            if table.totals().alive == len(pool):
                print(banner, file=out, flush=True)
                announced = True
            elif waited > STARTUP_TIMEOUT and not stopping:
                log.error("the workers did not start within %.0f s; stopping", STARTUP_TIMEOUT)
                stops.append(signal.SIGTERM)
                continue
        for w in pool:  # a replacement that published itself alive resets its back-off
            if w.restart_in is None and w.backoff > RESTART_BACKOFF and table.read(w.index).alive:
                w.backoff = RESTART_BACKOFF
        pending = [w.restart_in for w in pool if w.restart_in is not None]
        timeout = min([*pending, 0.2 if not announced else 1.0])
        sentinels = [w.process.sentinel for w in pool if w.process is not None and w.process.is_alive()]
        woke = wait([*sentinels, wake_r], timeout=timeout)
        if wake_r in woke:
            os.read(wake_r, 512)  # the signal handler already recorded the stop; this only woke the wait
        elapsed = timeout if not woke else 0.0  # a wake-up by an event restarts the wait: the back-off only grows
        waited += timeout if not woke else 0.0
        for w in pool:
            if w.process is not None and not w.process.is_alive() and w.process.exitcode is not None \
                    and w.restart_in is None:
                code = w.process.exitcode
                w.process.join()
                w.process = None
                if stopping:  # the node's status is its workers' drains; a replaced worker's death was logged
                    w.codes.append(code if code >= 0 else EXIT_ABORTED)  # negative: killed by a signal
                    continue
                if not announced:  # a worker that cannot start (a setting, a key): its replacement could not either
                    log.error("worker %d failed to start (exit status %d); stopping the node", w.index, code)
                    failed_start = True
                    stops.append(signal.SIGTERM)
                    continue
                table.retire(w.index)
                log.error("worker %d died (exit status %d); restarting it in %.1f s; the other workers' calls "
                          "go on", w.index, code, w.backoff)
                w.restart_in = w.backoff
                w.backoff = min(MAX_BACKOFF, w.backoff * 2)
            elif w.restart_in is not None:
                w.restart_in -= elapsed
                if stopping:
                    w.restart_in = None
                elif w.restart_in <= 0:
                    w.restart_in = None
                    start(w)
