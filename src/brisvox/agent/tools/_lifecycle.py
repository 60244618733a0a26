"""The lifecycle of one SideEffect call, as a state enum and one transition table (pure).

A SideEffect call runs on its own task; its result must reach the model exactly once,
in its own slot or as a late note (or, for an orphan, as the replay of an identical
later call).  Where that result is on its way is the call's :class:`Phase`; what can
happen to it is an :class:`Event`; :data:`TRANSITIONS` is every legal move, and any
other raises :class:`LifecycleError` naming the phase and the event (the h11 style of
:mod:`brisvox.agent.turn`)::

    AWAITED --finish--> READY --read--> IN_SLOT --deliver--> DELIVERED
       |                  |                |
     detach             detach          discard
       v                  v                v
    DETACHED --finish--> NOTED <-----------+      (a note waits in the mailbox)
                          |  \\--replay--> REPLAYED (an identical later call carried it)
                        report
                          v
                       REPORTED --replay--> REPLAYED

* ``detach``: the slot stops waiting (the tool's timeout, the turn's cancellation, or
  the round was dropped); the call keeps running.
* ``discard``: the execution that read the result never reached the model (or the
  round was dropped after reading it); the result becomes a note.  A discarded round
  leaves calls that already detached, noted or were reported where they are.
* ``report``: the note reached the model (``take_late_notes`` or a delivered execution).
* ``replay``: a delivered execution answered an identical later call from this record
  (the orphan check), so its own note is withdrawn.

A call whose result cannot reach its own slot any more (detached, noted, reported) is an
*orphan*: an identical call of a later round is answered from its record.
"""

from __future__ import annotations

import enum

from brisvox.core.errors import BrisvoxError

__all__ = ["ORPHAN_PHASES", "TRANSITIONS", "Event", "LifecycleError", "Phase", "next_phase"]


class Phase(enum.Enum):
    AWAITED = "awaited"  # running; its slot waits for the result
    READY = "ready"  # finished; the waiting slot has not read the result yet
    DETACHED = "detached"  # running; nobody waits, the result will be a note
    IN_SLOT = "in_slot"  # the result answers its slot; the execution is not delivered yet
    DELIVERED = "delivered"  # the slot reached the model
    NOTED = "noted"  # a late note waits for the model
    REPORTED = "reported"  # the note reached the model
    REPLAYED = "replayed"  # an identical later call's answer carried the result to the model


class Event(enum.Enum):
    FINISH = "finish"  # the task ended (a result, a failure, or lost)
    READ = "read"  # the waiting slot took the result
    DETACH = "detach"  # the slot stopped waiting; the call keeps running
    DELIVER = "deliver"  # the execution carrying the slot reached the model
    DISCARD = "discard"  # the execution (or dropped round) carrying the call never reached the model
    REPORT = "report"  # the call's late note reached the model
    REPLAY = "replay"  # a delivered replay of an identical later call carried the result


P, E = Phase, Event

TRANSITIONS: dict[tuple[Phase, Event], Phase] = {
    (P.AWAITED, E.FINISH): P.READY,
    (P.AWAITED, E.DETACH): P.DETACHED,
    (P.READY, E.READ): P.IN_SLOT,
    (P.READY, E.DETACH): P.NOTED,
    (P.DETACHED, E.FINISH): P.NOTED,
    (P.IN_SLOT, E.DELIVER): P.DELIVERED,
    (P.IN_SLOT, E.DISCARD): P.NOTED,
    (P.NOTED, E.REPORT): P.REPORTED,
    (P.NOTED, E.REPLAY): P.REPLAYED,
    # Two executions pending at once can deliver the note and then the replay.
    (P.REPORTED, E.REPLAY): P.REPLAYED,
    # A discarded round's calls that had already left their slot stay where they are.
    (P.DETACHED, E.DISCARD): P.DETACHED,
    (P.NOTED, E.DISCARD): P.NOTED,
    (P.REPORTED, E.DISCARD): P.REPORTED,
    (P.REPLAYED, E.DISCARD): P.REPLAYED,
}
"""Every legal move; anything else is a bug in the engine."""

ORPHAN_PHASES = frozenset({P.DETACHED, P.NOTED, P.REPORTED})
"""Phases in which an identical later call is answered from the record."""


class LifecycleError(BrisvoxError, RuntimeError):
    """An event that the call's phase does not allow (a bug in the engine, never the model's input)."""

    def __init__(self, phase: Phase, event: Event, call_id: str) -> None:
        super().__init__(f"side-effect call {call_id}: event {event.value!r} is illegal in phase {phase.value!r}")
        self.phase, self.event, self.call_id = phase, event, call_id


def next_phase(phase: Phase, event: Event, call_id: str) -> Phase:
    """The phase after ``event``; raises :class:`LifecycleError` for an illegal move."""
    try:
        return TRANSITIONS[(phase, event)]
    except KeyError:
        raise LifecycleError(phase, event, call_id) from None
