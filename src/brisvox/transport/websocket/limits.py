"""Per-call limits of the WebSocket transport that are pure arithmetic (no I/O, no clock).

:class:`AudioRateLimit` keeps a caller from sending audio faster than real time: a token
bucket over *seconds of audio*.  Tokens accrue at ``ratio`` seconds of audio per second
of time (1.25: a quarter over real time, room for network jitter) up to ``burst``; a
frame that finds too few tokens is dropped.  Dropped audio adds to a flood count that
decays by :data:`FLOOD_DECAY` seconds every second; past ``flood`` seconds the call is a
flood and ends.  A client that catches up after a network stall loses part of the stall
and goes on; one sending hundreds of times faster than real time ends within a fraction
of a second, and one at twice real time within about ten seconds (defaults).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

__all__ = ["FLOOD_DECAY", "AudioRateLimit", "AudioVerdict"]

FLOOD_DECAY = 0.25
"""Seconds of dropped audio forgiven per second of time."""


class AudioVerdict(enum.Enum):
    PASS = "pass"  # within the rate: deliver the frame
    DROP = "drop"  # over the rate: drop the frame (counted)
    FLOOD = "flood"  # too much was dropped: end the call


@dataclass(slots=True)
class AudioRateLimit:
    """See the module docs.  ``admit(seconds, now)`` judges one frame of ``seconds`` of audio
    arriving at ``now`` (any monotonic seconds)."""

    ratio: float
    burst: float
    flood: float
    dropped: float = 0.0
    """Seconds of audio dropped over the whole call."""
    _tokens: float = field(init=False)
    _excess: float = field(default=0.0, init=False)
    _last: float | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._tokens = self.burst

    def admit(self, seconds: float, now: float) -> AudioVerdict:
        if self._last is not None:
            elapsed = max(0.0, now - self._last)
            self._tokens = min(self.burst, self._tokens + elapsed * self.ratio)
            self._excess = max(0.0, self._excess - elapsed * FLOOD_DECAY)
        self._last = now
        if seconds <= self._tokens:
            self._tokens -= seconds
            return AudioVerdict.PASS
        self.dropped += seconds
        self._excess += seconds
        return AudioVerdict.FLOOD if self._excess > self.flood else AudioVerdict.DROP
