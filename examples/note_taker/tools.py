"""The note-taker's tools: a ReadOnly ``get_time`` and a SideEffect ``save_note``.

``save_note`` is keyed on the call's idempotency key (session, epoch, call id): a call
the tool engine replays (after a barge-in, a lost result, a repeated request) finds the
note it already saved and returns it, so a note is never written twice.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, Field

import brisvox
from brisvox import ToolContext, ToolError, ToolSet
from brisvox.agent.tools import IdempotencyKey


class Note(BaseModel):
    """What save_note takes."""

    text: str = Field(min_length=1, max_length=2000)


@dataclass
class NoteBook:
    """Where saved notes go (a database in a real application)."""

    notes: dict[str, str] = field(default_factory=dict)
    by_key: dict[IdempotencyKey, str] = field(default_factory=dict)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def save(self, key: IdempotencyKey, text: str) -> tuple[str, bool]:
        """Save ``text`` once per key; returns (note id, whether this call saved it)."""
        if key in self.by_key:
            return self.by_key[key], False
        note_id = f"note-{next(self._ids)}"
        self.notes[note_id] = text
        self.by_key[key] = note_id
        return note_id, True


class NoteTaker:
    """The tools, as methods over one notebook (a database pool in a real application)."""

    def __init__(self, book: NoteBook, now: Any = None) -> None:
        self.book = book
        self.now = now or (lambda: datetime.now(UTC))

    @brisvox.tool.read_only(timeout=1.0, filler_after=None)
    async def get_time(self, zone: str = Field(description="IANA time zone name")) -> dict[str, str]:
        """The current local time in an IANA time zone such as Europe/Istanbul."""
        try:
            where = ZoneInfo(zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ToolError(f"unknown time zone {zone!r}") from None
        local = self.now().astimezone(where)
        return {"zone": str(where), "time": local.strftime("%H:%M"), "date": local.date().isoformat()}

    @brisvox.tool.side_effect(timeout=3.0)
    async def save_note(self, args: Note, ctx: ToolContext) -> dict[str, Any]:
        """Write down a note for the caller."""
        note_id, saved = self.book.save(ctx.idempotency_key(), args.text)
        return {"note_id": note_id, "saved": saved}


def build_tools(book: NoteBook, now: Any = None) -> ToolSet:
    """The example's tools over ``book`` for ``brisvox.run_with_tools``; ``now`` (a function
    returning an aware UTC datetime) replaces the wall clock in tests."""
    taker = NoteTaker(book, now)
    tools = ToolSet()
    tools.include(taker.get_time, taker.save_note)
    return tools
