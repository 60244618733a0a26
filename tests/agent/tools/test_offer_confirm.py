"""Offered now, the caller's yes: a yes to a call waiting at the gate makes confirming it the round's only choice."""

from __future__ import annotations

import datetime

import pytest

from brisvox.agent.context import Context
from brisvox.agent.tools.engine import ToolEngine
from brisvox.agent.tools.registry import CONFIRM_PENDING, RegistryError, ToolRegistry
from brisvox.core.clock import SimClock

from ._helpers import RO, SE, Probe, call, deliver_round, scripted, spec

FRIDAY = datetime.date(2026, 12, 4)
YES = ("yes", "sure", "go ahead")
NO = ("no", "not", "cancel")
BOOK = {"type": "object", "properties": {"who": {"type": "string"}, "date": {"type": "string"}}}


def _engine(probe: Probe, clock: SimClock, *, confirmed_by: tuple[str, ...] = YES) -> ToolEngine:
    reg = ToolRegistry()
    reg.register(spec("transfer", SE, confirm=True, confirmed_by=confirmed_by, declined_by=NO),
                 scripted(probe, "transfer", result="done"))
    reg.register(spec("look", RO), scripted(probe, "look"))
    return ToolEngine(reg, "s", clock)


def _forced(eng: ToolEngine, tentative: str | None = None) -> list[str] | None:
    """The forced round's tools, or None when the model may also answer in words."""
    offered, required = eng.heard_offer(eng.offered_specs(), FRIDAY, tentative)
    return [s.name for s in offered] if required else None


async def _waiting(eng: ToolEngine) -> None:
    eng.note_user_turn("transfer me to billing")
    await deliver_round(eng, Context(), [call("t1.0", "transfer")], 1)  # held at the gate


async def test_a_yes_while_a_call_waits_makes_confirm_pending_the_only_choice() -> None:
    clock = SimClock()
    async with _engine(Probe(clock), clock) as eng:
        await _waiting(eng)
        assert _forced(eng) is None  # the question is not answered yet
        eng.note_user_turn("Yes. Please go ahead.")
        assert _forced(eng) == [CONFIRM_PENDING]


async def test_a_turn_without_the_yes_or_with_a_no_forces_nothing() -> None:
    clock = SimClock()
    async with _engine(Probe(clock), clock) as eng:
        await _waiting(eng)
        eng.note_user_turn("Which department is that?")
        assert _forced(eng) is None
        eng.note_user_turn("Yes, no, not that one.")  # a no wins: the call is dropped, nothing to confirm
        assert _forced(eng) is None and CONFIRM_PENDING not in {s.name for s in eng.offered_specs()}


async def test_a_yes_in_words_not_yet_a_turn_forces_nothing() -> None:
    # a speculative round guesses at the caller's words: a confirmation is never a guess
    clock = SimClock()
    async with _engine(Probe(clock), clock) as eng:
        await _waiting(eng)
        eng.note_user_turn("hmm")
        assert _forced(eng, tentative="yes sure") is None


async def test_once_the_waiting_call_is_confirmed_nothing_is_forced() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with _engine(probe, clock) as eng:
        await _waiting(eng)
        eng.note_user_turn("sure")
        assert _forced(eng) == [CONFIRM_PENDING]
        await deliver_round(eng, Context(), [call("t2.0", CONFIRM_PENDING, call_id="t1.0")], 2)
        assert probe.count("start", "transfer") == 1
        assert _forced(eng) is None  # done: the model tells the caller


async def test_a_tool_without_confirmed_by_is_not_confirmed_on_a_yes() -> None:
    clock = SimClock()
    async with _engine(Probe(clock), clock, confirmed_by=()) as eng:
        await _waiting(eng)
        eng.note_user_turn("yes")
        assert _forced(eng) is None
        assert CONFIRM_PENDING in {s.name for s in eng.offered_specs()}  # offered, the model's choice


def test_a_confirm_question_naming_an_argument_the_tool_lacks_is_refused_at_registration() -> None:
    reg = ToolRegistry()
    with pytest.raises(RegistryError, match="confirm_question name arguments it does not have: seats"):
        reg.register(spec("book", SE, params=BOOK, confirm=True, confirm_question="For {seats}?"), None)
    with pytest.raises(RegistryError, match="confirm_question"):
        reg.register(spec("book", SE, params=BOOK, confirm=True, confirm_question="For {who?"), None)


async def test_the_held_calls_question_is_the_tools_own_with_its_arguments_spoken() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("book", SE, params=BOOK, confirm=True, confirm_question="For {who} on {date}?"),
                 scripted(probe, "book", result="booked"))
    async with ToolEngine(reg, "s", clock) as eng:
        eng.note_user_turn("Ada, on the 6th")
        ex = await deliver_round(eng, Context(), [call("t1.0", "book", who="Ada", date="2026-12-06")], 1)
        assert eng.confirm_question(ex) == "For Ada on Sunday 6 December?"
        eng.note_user_turn("yes")
        done = await deliver_round(eng, Context(), [call("t2.0", CONFIRM_PENDING, call_id="t1.0")], 2)
        assert eng.confirm_question(done) is None and probe.count("start", "book") == 1
