"""One log line per interval for things a hostile client can repeat at will.

A refused frame, a dropped connection or a refused credential is counted in a metric by its
owner; the log gets at most one WARNING per :data:`LOG_INTERVAL` seconds per
:class:`RateLimitedLog`, saying how many of each kind happened since the previous line (and
the last one's detail), so a flood of refusals cannot flood the log.  Pure: the caller gives
the time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

__all__ = ["LOG_INTERVAL", "RateLimitedLog"]

LOG_INTERVAL = 10.0
"""Seconds between two lines of one :class:`RateLimitedLog`."""


class RateLimitedLog:
    """Counts events by kind and logs them as one line at most every ``interval`` seconds.

    The first event logs at once; the ones within the interval after a line are counted and
    reported by the first event past it."""

    def __init__(self, logger: logging.Logger, prefix: str, now: Callable[[], float],
                 interval: float = LOG_INTERVAL) -> None:
        self._logger = logger
        self._prefix = prefix
        self._now = now
        self._interval = interval
        self._logged_at: float | None = None
        self.pending: dict[str, int] = {}
        """What happened since the last line, by kind."""

    def note(self, kind: str, detail: str = "") -> bool:
        """Count one ``kind``; log the counts (and ``detail``, this event's) when the interval
        has passed. Returns whether a line was logged."""
        self.pending[kind] = self.pending.get(kind, 0) + 1
        now = self._now()
        if self._logged_at is not None and now - self._logged_at < self._interval:
            return False
        self._logged_at = now
        counts = ", ".join(f"{n} {k}" for k, n in sorted(self.pending.items()))
        self._logger.warning("%s: %s%s", self._prefix, counts, f" (last: {detail})" if detail else "")
        self.pending.clear()
        return True
