"""Offered now, heard slots: a turn that names a lookup's slots is answered through that lookup."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from brisvox.agent.context import Context
from brisvox.agent.tools.engine import ToolEngine
from brisvox.agent.tools.registry import RegistryError, ToolRegistry
from brisvox.agent.tools.slots import SlotKind
from brisvox.agent.tools.spec import Requirement, ToolSpec
from brisvox.core.clock import SimClock
from brisvox.core.errors import ConfigError
from brisvox.tool import read_only

from ._helpers import RO, SE, Probe, call, deliver_round, scripted, spec

FRIDAY = datetime.date(2026, 12, 4)
SLOT = {"type": "object", "properties": {
    "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
    "time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"},
    "party_size": {"type": "integer", "minimum": 1, "maximum": 20}}}
HEARD = {"date": SlotKind.DATE, "time": SlotKind.TIME, "party_size": SlotKind.COUNT}
BOOK = {"type": "object", "properties": {**SLOT["properties"], "name": {"type": "string"}}}
ASK = "is there a table tomorrow at seven for two"
ASKED = {"date": "2026-12-05", "time": "19:00", "party_size": 2}


def _engine(probe: Probe, clock: SimClock, *, fail: bool = False) -> ToolEngine:
    reg = ToolRegistry()
    reg.register(spec("check", RO, params=SLOT, lookup_when_heard=HEARD),
                 scripted(probe, "check", result={"free": True}, crash=fail))
    reg.register(spec("book", SE, params=BOOK, confirm=True, from_caller=("name",),
                      requires=Requirement("check", {"free": True}, bind=("date", "time", "party_size"))),
                 scripted(probe, "book", result="booked"))
    return ToolEngine(reg, "s", clock)


def _forced(eng: ToolEngine, tentative: str | None = None) -> dict[str, Any] | None:
    """The forced lookup's constants, or None when nothing is forced."""
    offered, required = eng.heard_offer(eng.offered_specs(), FRIDAY, tentative)
    if not required:
        return None
    (lookup,) = offered
    assert lookup.name == "check"
    return {k: v["const"] for k, v in lookup.parameters["properties"].items() if "const" in v}


def _names(eng: ToolEngine) -> set[str]:
    return {s.name for s in eng.heard_offer(eng.offered_specs(), FRIDAY)[0]}


async def test_a_turn_naming_the_slots_forces_the_lookup_with_the_heard_values() -> None:
    clock = SimClock()
    async with _engine(Probe(clock), clock) as eng:
        eng.note_user_turn(ASK)
        assert _forced(eng) == ASKED


async def test_a_greeting_a_name_or_a_yes_forces_nothing() -> None:
    clock = SimClock()
    async with _engine(Probe(clock), clock) as eng:
        assert _forced(eng) is None  # no turn yet
        for text in ("Hello, good evening.", "My name is Maria.", "Yes please.", "are you open tomorrow?"):
            eng.note_user_turn(text)
            assert _forced(eng) is None, text


async def test_once_the_lookup_answered_for_those_values_nothing_is_forced_again() -> None:
    clock = SimClock()
    async with _engine(Probe(clock), clock) as eng:
        ctx = Context()
        ctx.push_user(ASK)
        eng.note_user_turn(ASK)
        await deliver_round(eng, ctx, [call("t1.0", "check", **ASKED)], 1)
        assert _forced(eng) is None  # the round after the answer is free
        assert _names(eng) == set()  # the lookup is not offered again in this turn; book waits for a name
        eng.note_user_turn("Maria, for two people")  # the same party again: answered already
        assert _forced(eng) is None
        assert _names(eng) == {"check", "book"}


async def test_a_later_turn_that_changes_a_slot_forces_a_new_lookup_filled_from_the_turns_before() -> None:
    clock = SimClock()
    async with _engine(Probe(clock), clock) as eng:
        ctx = Context()
        eng.note_user_turn(ASK)
        await deliver_round(eng, ctx, [call("t1.0", "check", **ASKED)], 1)
        eng.note_user_turn("How about eight o'clock?")
        assert _forced(eng) == {**ASKED, "time": "20:00"}


async def test_slots_spread_over_turns_force_the_lookup_once_the_last_one_comes() -> None:
    clock = SimClock()
    async with _engine(Probe(clock), clock) as eng:
        eng.note_user_turn("A table tomorrow please.")
        assert _forced(eng) is None  # no time, no party yet
        assert "check" not in _names(eng)  # part of the slots: the model asks for the rest, it does not guess
        eng.note_user_turn("At seven, for two people.")
        assert _forced(eng) == ASKED


async def test_a_failed_lookup_is_not_forced_again_in_the_same_turn() -> None:
    clock = SimClock()
    async with _engine(Probe(clock), clock, fail=True) as eng:
        ctx = Context()
        eng.note_user_turn(ASK)
        ex = await deliver_round(eng, ctx, [call("t1.0", "check", **ASKED)], 1)
        assert ex.results[0].is_error
        assert _forced(eng) is None  # the model tells the caller; it is not made to call again
        eng.note_user_turn(ASK)  # the caller asks again: a new turn may try again
        assert _forced(eng) == ASKED


async def test_tentative_words_are_read_as_the_latest_turn() -> None:
    clock = SimClock()
    async with _engine(Probe(clock), clock) as eng:
        eng.note_user_turn("Hello.")
        assert _forced(eng, tentative=ASK) == ASKED


def test_the_registry_refuses_heard_slots_on_a_side_effect_tool_or_an_unknown_argument() -> None:
    reg = ToolRegistry()
    probe = Probe(SimClock())
    with pytest.raises(RegistryError, match="ReadOnly"):
        reg.register(spec("book", SE, params=BOOK, lookup_when_heard=HEARD), scripted(probe, "book"))
    with pytest.raises(RegistryError, match="hour"):
        reg.register(spec("check", RO, params=SLOT, lookup_when_heard={"hour": SlotKind.TIME}), scripted(probe, "c"))


def test_the_decorator_reads_slot_kinds_by_name_and_refuses_an_unknown_one() -> None:
    async def check(date: str, time: str) -> str:
        """Look a slot up."""
        return "free"

    made: ToolSpec = read_only(lookup_when_heard={"date": "date", "time": "time"})(check).spec
    assert dict(made.lookup_when_heard) == {"date": SlotKind.DATE, "time": SlotKind.TIME}
    with pytest.raises(ConfigError, match="'hour'"):
        read_only(lookup_when_heard={"date": "hour"})(check)
