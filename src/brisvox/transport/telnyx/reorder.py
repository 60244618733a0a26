"""The reorder buffer of Telnyx's inbound media (pure: times are passed in).

Telnyx does not promise that ``media`` frames arrive in order.  :class:`Reorder` takes
each chunk with its ``chunk`` number and releases chunks in number order.  The first chunk
anchors the numbering.  An in-order chunk is released at once.  A chunk ahead of the one
due is held (at most ``window``); the gap before it is given up when the window overflows
or ``timeout`` after the first chunk behind the gap arrived (:meth:`expire`, driven by the
caller's clock at :meth:`deadline`, which follows the arrival times of what is still held,
so a later gap keeps its own full wait).  Late chunks (behind the one due) and duplicates
are dropped and counted.  A chunk more than ``MAX_JUMP`` ahead of or behind the one due
is dropped; more than ``max(window, 4)`` of those in a row re-anchor the buffer on the
newest (``resyncs``), so a corrupt or restarted counter cannot silence the caller.
Released payloads may be None: a chunk whose payload was unusable still fills its place.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

__all__ = ["DEFAULT_REORDER_TIMEOUT", "DEFAULT_WINDOW", "MAX_JUMP", "MAX_WINDOW", "DtmfOrder", "Reorder"]

DEFAULT_WINDOW = 8
MAX_WINDOW = 64
DEFAULT_REORDER_TIMEOUT = 0.1
MAX_JUMP = 1500


@dataclass(frozen=True, slots=True)
class _Held:
    data: bytes | None
    arrived: float


class Reorder:
    """See the module docs.  ``offer`` and ``expire`` return the payloads released, in order."""

    __slots__ = ("_far", "_held", "_next", "_skipped", "duplicates", "gaps", "late", "reordered", "resyncs",
                 "timeout", "window")

    def __init__(self, window: int = DEFAULT_WINDOW, timeout: float = DEFAULT_REORDER_TIMEOUT) -> None:
        if not 1 <= window <= MAX_WINDOW:
            raise ValueError(f"reorder window must be 1 to {MAX_WINDOW}, got {window}")
        if not timeout > 0:
            raise ValueError(f"reorder timeout must be positive, got {timeout}")
        self.window = window
        self.timeout = timeout
        self._next: int | None = None
        self._held: dict[int, _Held] = {}
        self._skipped: deque[int] = deque(maxlen=2 * MAX_WINDOW)  # chunks given up on (a late one is counted late)
        self._far = 0
        self.reordered = 0  # chunks that waited in the buffer
        self.late = 0
        self.duplicates = 0
        self.gaps = 0  # chunks given up on
        self.resyncs = 0

    def __len__(self) -> int:
        return len(self._held)

    @property
    def expected(self) -> int | None:
        """The chunk number due next (None before the first chunk)."""
        return self._next

    def offer(self, chunk: int, data: bytes | None, now: float) -> list[bytes | None]:
        due = self._next
        if due is None:
            self._next = chunk + 1
            return [data]
        if abs(chunk - due) > MAX_JUMP:
            self._far += 1
            if self._far <= max(self.window, 4):
                return []
            released = self.flush()  # what was held is older than the new numbering: play it first
            self.resyncs += 1
            self._far = 0
            self._skipped.clear()
            self._next = chunk + 1
            released.append(data)
            return released
        self._far = 0
        if chunk < due:
            if chunk in self._skipped:
                self._skipped.remove(chunk)
                self.late += 1
            else:
                self.duplicates += 1
            return []
        if chunk == due:
            self._next = chunk + 1
            released = [data]
            self._drain(released)
            return released
        if chunk in self._held:
            self.duplicates += 1
            return []
        self._held[chunk] = _Held(data, now)
        self.reordered += 1
        released = []
        while len(self._held) > self.window:
            self._skip_to_first(released)
        return released

    def deadline(self) -> float | None:
        """When :meth:`expire` must run next (None: nothing held)."""
        if not self._held:
            return None
        return min(h.arrived for h in self._held.values()) + self.timeout

    def expire(self, now: float) -> list[bytes | None]:
        """Give up the gaps whose wait is over; the payloads released."""
        released: list[bytes | None] = []
        while (due := self.deadline()) is not None and due <= now:
            self._skip_to_first(released)
        return released

    def flush(self) -> list[bytes | None]:
        """Release everything held, in order (the stream is ending)."""
        released: list[bytes | None] = []
        while self._held:
            self._skip_to_first(released)
        return released

    def _skip_to_first(self, released: list[bytes | None]) -> None:
        first = min(self._held)
        assert self._next is not None
        for missing in range(self._next, first):
            self._skipped.append(missing)
        self.gaps += first - self._next
        self._next = first
        self._drain(released)

    def _drain(self, released: list[bytes | None]) -> None:
        assert self._next is not None
        while (held := self._held.pop(self._next, None)) is not None:
            released.append(held.data)
            self._next += 1


@dataclass(frozen=True, slots=True)
class _Digit:
    sequence: int
    digit: str
    arrived: float
    order: int


class DtmfOrder:
    """DTMF digits held up to ``timeout`` and released in ``sequence_number`` order (at most
    ``capacity`` held: past that the oldest are released early).  ``reordered`` counts digits
    released before one that arrived earlier."""

    __slots__ = ("_arrivals", "_held", "capacity", "reordered", "timeout")

    def __init__(self, timeout: float = DEFAULT_REORDER_TIMEOUT, capacity: int = 32) -> None:
        self.timeout = timeout
        self.capacity = capacity
        self._held: list[_Digit] = []
        self._arrivals = 0
        self.reordered = 0

    def __len__(self) -> int:
        return len(self._held)

    def offer(self, sequence: int, digit: str, now: float) -> list[str]:
        self._arrivals += 1
        self._held.append(_Digit(sequence, digit, now, self._arrivals))
        if len(self._held) > self.capacity:
            return self._release(min(d.sequence for d in self._held))
        return []

    def deadline(self) -> float | None:
        return min(d.arrived for d in self._held) + self.timeout if self._held else None

    def expire(self, now: float) -> list[str]:
        due = [d.sequence for d in self._held if d.arrived + self.timeout <= now]
        return self._release(max(due)) if due else []

    def flush(self) -> list[str]:
        return self._release(max(d.sequence for d in self._held)) if self._held else []

    def _release(self, upto: int) -> list[str]:
        out = sorted((d for d in self._held if d.sequence <= upto), key=lambda d: (d.sequence, d.order))
        self._held = [d for d in self._held if d.sequence > upto]
        last = 0
        for d in out:
            if d.order < last:
                self.reordered += 1
            last = max(last, d.order)
        return [d.digit for d in out]
