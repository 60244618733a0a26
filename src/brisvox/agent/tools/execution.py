"""What a tool round hands back: an :class:`Execution` (to append) or a :class:`Speculation`.

An execution carries a delivery guard.  :meth:`Execution.append_to` (or
:meth:`Execution.mark_delivered` for a caller that wrote the messages itself) marks it
delivered; :meth:`Execution.discard` says it never reached the model.  A discarded
execution gives back every SideEffect result it carried as a late note, marks its
SideEffect calls as orphans (so a regenerated identical call is answered from the
record, not run again) and returns the notes it took from the mailbox.  An execution
that is garbage-collected while still pending is discarded then (a safety net; the
runner discards explicitly).
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from brisvox.agent.context import Context, ContextError, ToolCall, ToolMessage
from brisvox.agent.tools._records import LateNote, Record, ReplayClaim, Slot
from brisvox.agent.tools.results import Outcome
from brisvox.core.errors import BrisvoxError, InvalidInput

__all__ = ["AlreadySettled", "DeliveryHooks", "Execution", "Receipt", "Speculation"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Receipt:
    """What one execution carries of the engine's SideEffect bookkeeping (engine-internal).

    The engine builds it; the execution hands it back through :class:`DeliveryHooks` when it
    is delivered or discarded, so neither side reaches into the other's private members.
    """

    ran: tuple[Record, ...] = ()  # SideEffect calls this round started
    carried: tuple[Record, ...] = ()  # of those, the ones whose result answers their slot
    claims: tuple[ReplayClaim, ...] = ()  # orphans answered from their record in this execution
    taken: tuple[tuple[LateNote, Record], ...] = ()  # late notes taken from the mailbox

    @property
    def late_notes(self) -> tuple[LateNote, ...]:
        """Notes to append after the results (an orphan replayed here has its note held back)."""
        replayed = {id(c.orphan) for c in self.claims}
        return tuple(note for note, rec in self.taken if id(rec) not in replayed)


class DeliveryHooks(Protocol):
    """Who an execution reports its fate to (the engine's SideEffect book)."""

    def on_delivered(self, receipt: Receipt) -> None: ...

    def on_discarded(self, receipt: Receipt) -> None: ...


class AlreadySettled(BrisvoxError, RuntimeError):
    """An execution or speculation was used after it was delivered or discarded (also a ``RuntimeError``)."""


_SUCCESS = frozenset({Outcome.OK, Outcome.OK_TRUNCATED})  # a call that ran and returned its value


class _State(enum.Enum):
    PENDING = "pending"
    DELIVERED = "delivered"
    DISCARDED = "discarded"


class Execution:
    """One tool message per call, in issue order, plus the late notes to append after them.

    ``outcomes`` says how each call settled (parallel to ``results``), for watchers;
    ``delivered`` what each call's value listed under ``delivered`` (the sends it made, for the
    delivery claim guard; empty for a call that returned no such list or no value); ``lines``
    what the agent says itself of each call (its tool's ``result_line``, None for none).
    """

    __slots__ = ("_hooks", "_receipt", "_state", "budget_exhausted", "delivered", "epoch", "lines", "outcomes",
                 "results")

    def __init__(
        self,
        hooks: DeliveryHooks,
        *,
        epoch: int,
        results: Sequence[ToolMessage],
        budget_exhausted: bool,
        outcomes: Sequence[Outcome],
        receipt: Receipt | None = None,
        delivered: Sequence[tuple[str, ...]] | None = None,
        lines: Sequence[str | None] | None = None,
    ) -> None:
        if len(outcomes) != len(results):
            raise InvalidInput(f"Execution: {len(results)} results but {len(outcomes)} outcomes")
        if delivered is not None and len(delivered) != len(results):
            raise InvalidInput(f"Execution: {len(results)} results but {len(delivered)} delivered lists")
        if lines is not None and len(lines) != len(results):
            raise InvalidInput(f"Execution: {len(results)} results but {len(lines)} lines")
        self._hooks = hooks
        self.epoch = epoch
        self.results: tuple[ToolMessage, ...] = tuple(results)
        self.outcomes: tuple[Outcome, ...] = tuple(outcomes)
        self.delivered: tuple[tuple[str, ...], ...] = tuple(delivered) if delivered is not None else ((),) * len(results)
        self.lines: tuple[str | None, ...] = tuple(lines) if lines is not None else (None,) * len(results)
        self.budget_exhausted = budget_exhausted
        self._receipt = receipt if receipt is not None else Receipt()
        self._state = _State.PENDING

    @property
    def late_notes(self) -> tuple[LateNote, ...]:
        """Notes to append after the results (an orphan replayed here has its note held back)."""
        return self._receipt.late_notes

    def spoken_line(self) -> str | None:
        """The agent's own words for the whole round, when every call succeeded (its outcome ``ok``)
        and its tool declared a result line for it; else None (the model answers the results).
        A failed, refused or timed-out call never has its tool's success line."""
        if not self.results or any(o not in _SUCCESS for o in self.outcomes):
            return None
        said = [line for line in self.lines if line is not None]
        return " ".join(said) if len(said) == len(self.results) else None

    @property
    def is_delivered(self) -> bool:
        return self._state is _State.DELIVERED

    @property
    def is_discarded(self) -> bool:
        return self._state is _State.DISCARDED

    def append_to(self, context: Context) -> None:
        """Pushes the results, then the late notes, and marks the execution delivered."""
        if self._state is not _State.PENDING:
            raise AlreadySettled(f"execution already {self._state.value}; append_to accepts a pending execution once")
        before = context.messages
        try:
            for message in self.results:
                context.push(message)
            for note in self.late_notes:
                context.push(note.message())
        except ContextError:
            # All or nothing: the execution stays pending (deliver or discard it after fixing the context).
            context.set_messages(before)
            raise
        self.mark_delivered()

    def mark_delivered(self) -> None:
        """For a caller that wrote the results and notes into its context itself."""
        if self._state is _State.PENDING:
            self._state = _State.DELIVERED
            self._hooks.on_delivered(self._receipt)

    def discard(self) -> None:
        """The execution never reached the model (for example a barge-in right after it returned)."""
        if self._state is _State.PENDING:
            self._state = _State.DISCARDED
            self._hooks.on_discarded(self._receipt)

    def __del__(self) -> None:
        if getattr(self, "_state", None) is _State.PENDING:
            log.warning("a tool execution was dropped without append_to/mark_delivered/discard; discarding it")
            try:
                self.discard()
            except Exception:  # pragma: no cover - never raise from a finalizer
                log.exception("discarding a dropped execution failed")

    def __repr__(self) -> str:
        return f"Execution(epoch={self.epoch}, results={len(self.results)}, notes={len(self._receipt.taken)}, {self._state.value})"


class Speculation:
    """A speculative round: ReadOnly calls ran, SideEffect calls wait for :meth:`ToolEngine.commit`."""

    __slots__ = ("_held", "_slots", "_state", "budget_exhausted", "epoch")

    def __init__(self, *, epoch: int, slots: list[Slot], held: list[ToolCall], budget_exhausted: bool) -> None:
        self.epoch = epoch
        self._slots = slots
        self._held = held
        self.budget_exhausted = budget_exhausted
        self._state = _State.PENDING

    def held_calls(self) -> list[ToolCall]:
        """The held SideEffect calls, in issue order."""
        return list(self._held)

    def answered(self) -> list[ToolMessage]:
        """Results already settled (ReadOnly results, malformed calls and refusals), in issue order."""
        return [s.answer for s in self._slots if s.answer is not None]

    @property
    def is_open(self) -> bool:
        return self._state is _State.PENDING

    def discard(self) -> None:
        """Drops the speculation: its held calls never run (close them in the context)."""
        self._state = _State.DISCARDED

    def take_slots(self) -> list[Slot]:
        """The round's slots, once, for :meth:`ToolEngine.commit` (which runs the held ones)."""
        if self._state is not _State.PENDING:
            raise AlreadySettled(f"speculation already {self._state.value}; commit accepts a pending speculation once")
        self._state = _State.DELIVERED
        return self._slots

    def __repr__(self) -> str:
        return f"Speculation(epoch={self.epoch}, held={len(self._held)}, {self._state.value})"
