"""The SideEffect lifecycle table (tools/_lifecycle.py), and the hang-up of the engine."""

from __future__ import annotations

import pytest

from brisvox.agent.tools._lifecycle import (
    ORPHAN_PHASES,
    TRANSITIONS,
    Event,
    LifecycleError,
    Phase,
    next_phase,
)
from brisvox.agent.tools._records import LateNote, Mailbox, Record
from brisvox.agent.tools.cancel import CancelToken
from brisvox.agent.tools.registry import ToolRegistry
from brisvox.agent.tools.store import IdempotencyKey
from brisvox.core.clock import SimClock
from brisvox.core.errors import BrisvoxError
from tests.agent.tools._helpers import SE, Probe, call, engine, kind, scripted, spec


def _record(phase: Phase = Phase.AWAITED) -> Record:
    return Record(key=IdempotencyKey("s", 1, "t1.0"), tool="book", digest=0, run_id=1, started_at=0.0, phase=phase)


def test_the_happy_path_reads_the_result_into_its_slot_and_delivers_it() -> None:
    rec = _record()
    assert [rec.move(e) for e in (Event.FINISH, Event.READ, Event.DELIVER)] == [
        Phase.READY, Phase.IN_SLOT, Phase.DELIVERED
    ]
    assert not rec.is_orphan


def test_a_call_that_outlives_its_slot_becomes_a_note_then_reported_and_is_an_orphan_until_replayed() -> None:
    rec = _record()
    assert rec.move(Event.DETACH) is Phase.DETACHED and rec.is_orphan
    assert rec.move(Event.FINISH) is Phase.NOTED and rec.is_orphan
    assert rec.move(Event.REPORT) is Phase.REPORTED and rec.is_orphan
    assert rec.move(Event.REPLAY) is Phase.REPLAYED and not rec.is_orphan


def test_a_discarded_execution_turns_a_result_read_into_its_slot_into_a_note() -> None:
    assert next_phase(Phase.IN_SLOT, Event.DISCARD, "t1.0") is Phase.NOTED
    assert next_phase(Phase.READY, Event.DETACH, "t1.0") is Phase.NOTED  # read by nobody: a note


@pytest.mark.parametrize("phase", list(Phase))
@pytest.mark.parametrize("event", list(Event))
def test_every_move_outside_the_table_raises_a_typed_error_naming_phase_and_event(phase: Phase, event: Event) -> None:
    rec = _record(phase)
    if (phase, event) in TRANSITIONS:
        assert rec.move(event) is TRANSITIONS[(phase, event)]
        return
    with pytest.raises(LifecycleError) as caught:
        rec.move(event)
    assert isinstance(caught.value, BrisvoxError)
    assert caught.value.phase is phase and caught.value.event is event
    assert repr(phase.value) in str(caught.value) and repr(event.value) in str(caught.value)
    assert "t1.0" in str(caught.value)
    assert rec.phase is phase  # nothing changed


def test_a_result_reaches_the_model_at_most_once_in_the_table() -> None:
    # No path leaves a delivered or replayed call, and a finished call never finishes again.
    assert not [k for k in TRANSITIONS if k[0] is Phase.DELIVERED]
    assert {t for (p, e), t in TRANSITIONS.items() if p is Phase.REPLAYED} <= {Phase.REPLAYED}
    assert {p for (p, e) in TRANSITIONS if e is Event.FINISH} == {Phase.AWAITED, Phase.DETACHED}
    assert {Phase.DETACHED, Phase.NOTED, Phase.REPORTED} == ORPHAN_PHASES


def test_a_note_whose_call_was_replayed_meanwhile_is_not_put_back() -> None:
    box = Mailbox(4)
    kept, replayed = _record(Phase.NOTED), _record(Phase.REPLAYED)
    note = LateNote("t1.0", "book", 1, "{}", False)
    box.put_back([(note, kept), (note, replayed)])
    assert [rec for _, rec in box.take_all()] == [kept]


async def test_after_the_hang_up_no_side_effect_starts_but_lookups_still_run() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("book", SE), scripted(probe, "book"))
    reg.register(spec("look"), scripted(probe, "look"))
    async with engine(reg, clock) as eng:
        eng.hang_up()
        assert eng.hung_up
        ex = await eng.execute([call("t1.0", "book", day="mon"), call("t1.1", "look")], 1, CancelToken())
        ex.mark_delivered()
        assert kind(ex.results[0]) == "interrupted" and "hung up" in ex.results[0].content
        assert kind(ex.results[1]) is None
        assert probe.count("start", "book") == 0 and probe.count("start", "look") == 1
        assert eng.stats().not_started_cancelled == 1


async def test_waiting_for_side_effects_lets_a_running_call_finish_into_a_late_note() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("book", SE, timeout=1.0), scripted(probe, "book", delay=3.0))
    reg.register(spec("slow", SE, timeout=1.0), scripted(probe, "slow", delay=30.0))
    async with engine(reg, clock) as eng:
        ex = await eng.execute([call("t1.0", "book"), call("t1.1", "slow")], 1, CancelToken())
        ex.mark_delivered()
        assert [kind(m) for m in ex.results] == ["timeout", "timeout"]
        assert await eng.wait_side_effects(5.0) == 1  # "slow" is still running
        assert clock.now() == pytest.approx(6.0)  # the wait ended at its bound
        assert [n.call_id for n in eng.take_late_notes()] == ["t1.0"]
        assert await eng.wait_side_effects(0.0) == 1
