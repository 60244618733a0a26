"""Engine-internal records of SideEffect calls and the late-note mailbox."""

from __future__ import annotations

import json
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from brisvox.agent.context import SystemMessage, ToolCall, ToolMessage, late_note_text
from brisvox.agent.tools._lifecycle import ORPHAN_PHASES, Event, Phase, next_phase
from brisvox.agent.tools.registry import RegisteredTool
from brisvox.agent.tools.results import Outcome
from brisvox.agent.tools.store import IdempotencyKey, fnv1a64

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "MAILBOX_CAPACITY",
    "ORPHAN_CAPACITY",
    "LateNote",
    "Mailbox",
    "Record",
    "ReplayClaim",
    "Settled",
    "Slot",
    "arguments_digest",
]

MAILBOX_CAPACITY = 64
ORPHAN_CAPACITY = 32


def arguments_digest(tool: str, arguments: Any) -> int:
    """Digest of tool name and arguments compared as JSON values (key order does not matter)."""
    canon = json.dumps(arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return fnv1a64(f"{tool}\x00{canon}".encode())


@dataclass(frozen=True, slots=True)
class Settled:
    """How a SideEffect task ended: the text the model reads, and whether it is an error."""

    content: str
    is_error: bool
    outcome: Outcome
    lost: bool = False
    delivered: tuple[str, ...] = ()
    """What the tool's value listed under ``delivered`` (``_answers.delivered_of``)."""
    line: str | None = None
    """What the agent says of this result itself (the tool's ``result_line``; a success only)."""


@dataclass(frozen=True, slots=True)
class LateNote:
    """A SideEffect result that could not be delivered in its own slot."""

    call_id: str
    tool: str
    epoch: int
    content: str
    is_error: bool

    @property
    def text(self) -> str:
        return late_note_text(self.tool, self.call_id, self.content, self.is_error)

    def message(self) -> SystemMessage:
        return SystemMessage(text=self.text)

    def __repr__(self) -> str:
        return f"LateNote(call_id={self.call_id!r}, tool={self.tool!r}, content=<{len(self.content)} chars>)"


@dataclass(slots=True, eq=False)
class Record:
    """One SideEffect call the engine started (or, for a delivered replay, stands for).

    ``phase`` says where its result is on its way to the model; it changes only through
    :meth:`move` and the table of :mod:`brisvox.agent.tools._lifecycle`.  ``claimed_by``
    is the run whose pending execution answers an identical call from this record.
    """

    key: IdempotencyKey
    tool: str
    digest: int
    run_id: int
    started_at: float
    phase: Phase = Phase.AWAITED
    waiter: asyncio.Future[Settled] | None = None
    settled: Settled | None = None
    claimed_by: int | None = field(default=None)

    @property
    def epoch(self) -> int:
        return self.key.epoch

    @property
    def is_orphan(self) -> bool:
        """Its result can no longer reach its own slot."""
        return self.phase in ORPHAN_PHASES

    def move(self, event: Event) -> Phase:
        """Applies ``event`` (raises :class:`LifecycleError` if the phase does not allow it)."""
        self.phase = next_phase(self.phase, event, self.key.call_id)
        return self.phase

    def note(self) -> LateNote:
        assert self.settled is not None
        return LateNote(self.key.call_id, self.tool, self.key.epoch, self.settled.content, self.settled.is_error)


class Mailbox:
    """Bounded FIFO of late notes; a note that finds it full is counted and dropped."""

    __slots__ = ("_items", "capacity", "dropped")

    def __init__(self, capacity: int = MAILBOX_CAPACITY) -> None:
        self.capacity = capacity
        self._items: deque[tuple[LateNote, Record]] = deque()
        self.dropped = 0

    def push(self, note: LateNote, record: Record) -> bool:
        if len(self._items) >= self.capacity:
            self.dropped += 1
            return False
        self._items.append((note, record))
        return True

    def take_all(self) -> list[tuple[LateNote, Record]]:
        items = list(self._items)
        self._items.clear()
        return items

    def put_back(self, items: Sequence[tuple[LateNote, Record]]) -> None:
        """Returns notes taken by an undelivered execution to the front, oldest first.

        A note whose call was replayed to the model in the meantime stays out (it would say
        the same thing twice).
        """
        items = [item for item in items if item[1].phase is not Phase.REPLAYED]
        room = self.capacity - len(self._items)
        keep = items[:room] if room > 0 else []
        self.dropped += len(items) - len(keep)
        self._items.extendleft(reversed(keep))

    def remove_for(self, record: Record) -> None:
        self._items = deque(item for item in self._items if item[1] is not record)

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True, slots=True)
class ReplayClaim:
    """An orphan answered from its record under a new call id (settled at delivery)."""

    orphan: Record
    call_id: str
    epoch: int
    run_id: int


@dataclass(slots=True, eq=False)
class Slot:
    """One call of a round, from planning to its answer."""

    index: int
    call_id: str
    tool: str
    call: ToolCall | None = None
    registered: RegisteredTool | None = None
    answer: ToolMessage | None = None
    outcome: Outcome | None = None
    delivered: tuple[str, ...] = ()
    line: str | None = None  # the tool's result line, filled for a call that succeeded
    malformed: bool = False
    held: bool = False
    record: Record | None = None
    carried: bool = False
    claim: ReplayClaim | None = None
    retries: int = 0

    @property
    def is_side_effect(self) -> bool:
        return self.registered is not None and self.registered.spec.is_side_effect
