"""The per-session idempotency store of SideEffect calls.

Each SideEffect call is keyed by :class:`IdempotencyKey` (session, turn epoch, call id)
and moves through three states: in flight, done (the recorded result, a tool error
included) and lost (its task ended without a result).  The store is bounded by entry
count and by recorded result bytes; when a bound is reached the oldest *settled* entry
is evicted.  An in-flight entry is never evicted, so a store whose every entry is in
flight refuses new calls (``store_full``).
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["EntryState", "IdempotencyKey", "IdempotencyStore", "IdempotencyUsage", "StoreEntry", "fnv1a64"]

_FNV_OFFSET = 0xCBF29CE484222325
_FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


def fnv1a64(data: bytes) -> int:
    h = _FNV_OFFSET
    for b in data:
        h ^= b
        h = (h * _FNV_PRIME) & _MASK
    return h


@dataclass(frozen=True, slots=True)
class IdempotencyKey:
    """Identifies one SideEffect call of one session: (session, epoch, call id)."""

    session: str
    epoch: int
    call_id: str

    def digest(self) -> int:
        """A stable FNV-1a 64-bit value of the tuple, for logs and provider idempotency headers.

        Distinct keys may share a digest: key your own store on the whole key.
        """
        return fnv1a64(f"{self.session}\x00{self.epoch}\x00{self.call_id}".encode())

    def hex(self) -> str:
        return f"{self.digest():016x}"


class EntryState(enum.Enum):
    IN_FLIGHT = "in_flight"
    DONE = "done"
    LOST = "lost"


@dataclass(slots=True)
class StoreEntry:
    state: EntryState
    content: str = ""
    is_error: bool = False
    delivered: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return len(self.content.encode()) if self.state is EntryState.DONE else 0


@dataclass(frozen=True, slots=True)
class IdempotencyUsage:
    entries: int
    bytes: int


class IdempotencyStore:
    """Bounded map of key -> entry, oldest first."""

    __slots__ = ("_bytes", "_entries", "capacity", "max_bytes")

    def __init__(self, capacity: int, max_bytes: int) -> None:
        self.capacity = max(1, capacity)
        self.max_bytes = max_bytes
        self._entries: OrderedDict[IdempotencyKey, StoreEntry] = OrderedDict()
        self._bytes = 0

    def get(self, key: IdempotencyKey) -> StoreEntry | None:
        return self._entries.get(key)

    def usage(self) -> IdempotencyUsage:
        return IdempotencyUsage(entries=len(self._entries), bytes=self._bytes)

    def __len__(self) -> int:
        return len(self._entries)

    def _evict_oldest_settled(self, keep: IdempotencyKey | None = None) -> bool:
        for key, entry in self._entries.items():
            if entry.state is not EntryState.IN_FLIGHT and key != keep:
                del self._entries[key]
                self._bytes -= entry.size
                return True
        return False

    def begin(self, key: IdempotencyKey) -> bool:
        """Records ``key`` as in flight; ``False`` (nothing recorded) when every entry is in flight."""
        while len(self._entries) >= self.capacity:
            if not self._evict_oldest_settled():
                return False
        self._entries[key] = StoreEntry(EntryState.IN_FLIGHT)
        return True

    def finish(self, key: IdempotencyKey, content: str, is_error: bool, delivered: tuple[str, ...] = ()) -> None:
        """Records the result of an in-flight key (evicting older settled entries for room)."""
        entry = self._entries.get(key)
        if entry is None:  # pragma: no cover - in-flight entries are never evicted
            return
        self._bytes -= entry.size
        entry.state = EntryState.DONE
        entry.content = content
        entry.is_error = is_error
        entry.delivered = delivered
        self._bytes += entry.size
        while self._bytes > self.max_bytes and self._evict_oldest_settled(keep=key):
            pass

    def lose(self, key: IdempotencyKey) -> None:
        entry = self._entries.get(key)
        if entry is None:  # pragma: no cover
            return
        self._bytes -= entry.size
        entry.state = EntryState.LOST
        entry.content = ""
