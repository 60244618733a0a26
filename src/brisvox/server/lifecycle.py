"""Process lifecycle: stop signals, the drain, and the exit status.

:class:`StopRequests` counts stop requests (SIGTERM and SIGINT feed it through
:func:`install_stop_signals`; tests call :meth:`StopRequests.request`).  The first one
starts :func:`drain_on_stop`: the manager begins draining at once (``/readyz`` turns
503 and admission answers ShuttingDown), then :meth:`SessionManager.shutdown` waits up
to the drain timeout on the injected clock, a second request skips the rest of the
drain, and the cancel and abort stages deal with what is left.  The report's
``exit_code`` is the process's exit status: :data:`EXIT_DRAINED` (0),
:data:`EXIT_CANCELLED` (3), :data:`EXIT_ABORTED` (4), :data:`EXIT_LEAKED` (5);
:data:`EXIT_STARTUP_FAILURE` (1) is for a server that could not start.
"""

from __future__ import annotations

import asyncio
import logging
import signal
from collections.abc import Callable
from typing import Any

from brisvox.server.session import SessionManager, ShutdownPolicy, ShutdownReport

__all__ = [
    "EXIT_ABORTED",
    "EXIT_CANCELLED",
    "EXIT_DRAINED",
    "EXIT_LEAKED",
    "EXIT_STARTUP_FAILURE",
    "STOP_SIGNALS",
    "StopRequests",
    "drain_on_stop",
    "install_stop_signals",
]

log = logging.getLogger(__name__)

EXIT_DRAINED = 0
EXIT_STARTUP_FAILURE = 1
EXIT_CANCELLED = 3
EXIT_ABORTED = 4
EXIT_LEAKED = 5

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopRequests:
    """Stop requests of a process: ``first`` is set by the first, ``second`` by the second."""

    __slots__ = ("count", "first", "second")

    def __init__(self) -> None:
        self.count = 0
        self.first = asyncio.Event()
        self.second = asyncio.Event()

    def request(self, why: str = "stop requested") -> None:
        self.count += 1
        if self.count == 1:
            log.info("%s: draining (a second stop skips the drain)", why)
            self.first.set()
        elif self.count == 2:
            log.warning("%s again: skipping the rest of the drain", why)
            self.second.set()


def install_stop_signals(loop: asyncio.AbstractEventLoop, stops: StopRequests) -> Callable[[], None]:
    """Route SIGTERM and SIGINT to ``stops``; returns the function that removes the handlers."""
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, stops.request, signal.Signals(sig).name)

    def remove() -> None:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)

    return remove


async def drain_on_stop(
    manager: SessionManager[Any],
    stops: StopRequests,
    policy: ShutdownPolicy,
    on_cancel: Callable[[], None] | None = None,
) -> ShutdownReport:
    """Wait for the first stop request, then shut ``manager`` down under ``policy``
    (``on_cancel``: see :meth:`SessionManager.shutdown`)."""
    await stops.first.wait()
    manager.begin_drain()
    report = await manager.shutdown(policy, skip_drain=stops.second, on_cancel=on_cancel)
    log.info(
        "shutdown %s: drain %.2f s%s, cancel %.2f s, abort %.2f s; cancelled %d, aborted %d, leaked %d",
        report.outcome.value, report.drain_seconds, " (skipped)" if report.drain_skipped else "",
        report.cancel_seconds, report.abort_seconds, len(report.cancelled), len(report.aborted), len(report.leaked),
    )
    return report
