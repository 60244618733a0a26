"""The confirmation gate: SideEffect tools that run only after the user says yes.

A call to a tool declared ``confirm=True`` does not run.  The engine records a pending
request and answers ``confirmation_required``; the model asks the user, and only a
``confirm_pending(call_id)`` call made after a *later* user turn runs the held call,
with the arguments of the original request, through the normal SideEffect path.

The rules kept here (the meaning of "yes" is the model's judgment; the order of events
is not): a later user turn, the request's epoch, a TTL on the injected clock, cleared
at a barge-in, taken once, at most 8 waiting (the oldest dropped; an identical request
replaces its predecessor), per session.  Pure state: time comes in as an argument.
"""

from __future__ import annotations

import enum
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from brisvox.agent.context import ToolCall

__all__ = [
    "DEFAULT_CONFIRM_TTL",
    "MAX_PENDING_CONFIRMATIONS",
    "Confirmations",
    "PendingConfirmation",
    "Refusal",
    "confirmation_required_body",
]

DEFAULT_CONFIRM_TTL = 120.0
MAX_PENDING_CONFIRMATIONS = 8


def confirmation_required_body(tool: str, call_id: str) -> str:
    """The (non-error) result that answers a gated call: compact JSON, the instruction in one
    short sentence pair (every token of it is prompt the next round evaluates: the first
    wording's 60 words cost a local model seconds, docs/DECISIONS.md).  The gate itself is
    the engine's (:meth:`Confirmations.take`); the text tells the model how to use it."""
    return json.dumps(
        {
            "status": "confirmation_required",
            "tool": tool,
            "call_id": call_id,
            "message": (
                "Not done yet. Tell the user what you will do and ask if you should go ahead; call "
                "confirm_pending with this call_id only if their next reply clearly says yes."
            ),
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


@dataclass(frozen=True, slots=True)
class PendingConfirmation:
    call: ToolCall
    epoch: int
    created_at: float
    user_turns: int
    speech_seq: int
    digest: int


class Refusal(enum.Enum):
    """Why a ``confirm_pending`` was refused."""

    NOT_PENDING = "no pending request has this call_id (it was confirmed, expired or cleared); ask the user again"
    NO_REPLY_YET = "the user has not replied since you asked; wait for their answer"
    STALE = "the request belongs to a newer turn than this confirmation"
    EXPIRED = "the request expired; ask the user again"


class Confirmations:
    """The pending requests of one session."""

    __slots__ = ("_pending", "_speech_seq", "_turn_speech_seq", "_user_turns", "capacity", "ttl")

    def __init__(self, ttl: float = DEFAULT_CONFIRM_TTL, capacity: int = MAX_PENDING_CONFIRMATIONS) -> None:
        self.ttl = ttl
        self.capacity = max(1, capacity)
        self._pending: OrderedDict[str, PendingConfirmation] = OrderedDict()
        self._user_turns = 0
        self._speech_seq = 0
        self._turn_speech_seq = 0

    def note_user_turn(self) -> None:
        """A user turn ended (its message entered the context)."""
        self._user_turns += 1
        self._turn_speech_seq = self._speech_seq

    def note_user_speech_started(self) -> None:
        """The user began to speak (speech-to-speech sessions report this before the turn ends)."""
        self._speech_seq += 1

    def clear(self) -> int:
        """Drops every pending request (a barge-in); returns how many there were."""
        n = len(self._pending)
        self._pending.clear()
        return n

    def drop(self, call_id: str) -> bool:
        """Drops one pending request (the caller declined it); returns whether it was there."""
        return self._pending.pop(call_id, None) is not None

    def __len__(self) -> int:
        return len(self._pending)

    def pending(self) -> list[PendingConfirmation]:
        return list(self._pending.values())

    def replied(self, p: PendingConfirmation) -> bool:
        """Whether the user spoke a turn since ``p`` was asked (only then may it be confirmed)."""
        return self._user_turns > p.user_turns and (self._speech_seq == 0 or self._turn_speech_seq > p.speech_seq)

    def request(self, call: ToolCall, epoch: int, now: float, digest: int) -> None:
        """Records a gated call (replacing an identical pending one; the oldest goes past capacity)."""
        for cid, p in list(self._pending.items()):
            if p.call.name == call.name and p.digest == digest:
                del self._pending[cid]
        while len(self._pending) >= self.capacity:
            self._pending.popitem(last=False)
        self._pending[call.id] = PendingConfirmation(
            call=call,
            epoch=epoch,
            created_at=now,
            user_turns=self._user_turns,
            speech_seq=self._speech_seq,
            digest=digest,
        )

    def take(self, call_id: Any, epoch: int, now: float) -> PendingConfirmation | Refusal:
        """The request to run, removed; or why not (a request kept waiting stays pending)."""
        p = self._pending.get(call_id) if isinstance(call_id, str) else None
        if p is None:
            return Refusal.NOT_PENDING
        if now - p.created_at > self.ttl:
            del self._pending[call_id]
            return Refusal.EXPIRED
        if epoch < p.epoch:
            return Refusal.STALE
        if not self.replied(p):
            return Refusal.NO_REPLY_YET
        del self._pending[call_id]
        return p
