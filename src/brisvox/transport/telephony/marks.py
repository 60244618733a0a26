"""The MarkBook: marks sent to a carrier and not echoed yet (pure; times are passed in).

A telephony carrier (Twilio, Telnyx) echoes a mark when the audio before it has played.
The adapter names every mark it sends itself: ``e<n>`` for an engine mark (the engine's id
is kept here, never put on the wire) and ``p<n>`` for a progress mark the adapter adds
between them to learn how far playback is.  Names are never reused, so after :meth:`clear`
(the adapter sent the carrier a clear) an echo of a flushed mark (Twilio echoes those too)
is unknown and dropped: it can never be taken for a played one.  The transport core's
ledger reports the engine's cut marks as MarkCleared; the book only forgets them.

At most ``capacity`` marks are in flight; past that the oldest is forgotten and counted
in ``evicted`` (its echo will then be dropped as unknown).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["DEFAULT_MAX_MARKS", "Echo", "MarkBook", "MarkKind"]

DEFAULT_MAX_MARKS = 512


class MarkKind(enum.Enum):
    ENGINE = "engine"
    PROGRESS = "progress"


@dataclass(frozen=True, slots=True)
class _Sent:
    kind: MarkKind
    engine_id: str | None
    at: float
    position: int  # audio bytes sent before the mark


@dataclass(frozen=True, slots=True)
class Echo:
    """A resolved echo: the mark's kind, the engine's id (engine marks), how long the echo took
    and the audio sent before the mark (so ``sent_total - position`` is still unplayed)."""

    kind: MarkKind
    engine_id: str | None
    latency: float
    position: int


class MarkBook:
    """See the module docs.  Not thread-safe (one event loop owns it)."""

    __slots__ = ("_next", "_sent", "capacity", "evicted", "unmatched")

    def __init__(self, capacity: int = DEFAULT_MAX_MARKS) -> None:
        if capacity < 1:
            raise ValueError(f"MarkBook capacity must be at least 1, got {capacity}")
        self.capacity = capacity
        self._sent: OrderedDict[str, _Sent] = OrderedDict()
        self._next = 0
        self.evicted = 0
        self.unmatched = 0

    def __len__(self) -> int:
        return len(self._sent)

    def engine(self, engine_id: str, *, at: float, position: int) -> str:
        """Record an engine mark; returns the name to send (``e<n>``)."""
        return self._add("e", _Sent(MarkKind.ENGINE, engine_id, at, position))

    def progress(self, *, at: float, position: int) -> str:
        """Record a progress mark; returns the name to send (``p<n>``)."""
        return self._add("p", _Sent(MarkKind.PROGRESS, None, at, position))

    def _add(self, prefix: str, sent: _Sent) -> str:
        self._next += 1
        name = f"{prefix}{self._next}"
        if len(self._sent) >= self.capacity:
            self._sent.popitem(last=False)
            self.evicted += 1
        self._sent[name] = sent
        return name

    def echo(self, name: str, *, at: float) -> Echo | None:
        """Resolve an echo; None (counted in ``unmatched``) for a name not in flight: unknown,
        evicted, echoed already, or flushed by a clear."""
        sent = self._sent.pop(name, None)
        if sent is None:
            self.unmatched += 1
            return None
        return Echo(sent.kind, sent.engine_id, max(0.0, at - sent.at), sent.position)

    def clear(self) -> int:
        """Forget every mark in flight (a clear was sent); returns how many."""
        count = len(self._sent)
        self._sent.clear()
        return count
