"""Offered now: the tools the state allows, bound arguments as constants, and from_caller arguments."""

from __future__ import annotations

from typing import Any

import pytest

from brisvox.agent.context import Context, ToolCall
from brisvox.agent.tools.engine import ToolEngine
from brisvox.agent.tools.offer import MAX_NAME_SPANS, Grounds, name_spans, words
from brisvox.agent.tools.registry import CONFIRM_PENDING, CallMeta, RegistryError, ToolRegistry
from brisvox.agent.tools.spec import Requirement
from brisvox.core.clock import SimClock

from ._helpers import RO, SE, Probe, body, call, deliver_round, kind, scripted, spec

SLOT = {"type": "object", "properties": {"day": {"type": "string"}, "party": {"type": "integer"}}}
BOOK = {"type": "object", "properties": {"name": {"type": "string"}, "day": {"type": "string"}, "party": {"type": "integer"}}}
NEEDS_FREE = Requirement("check", {"free": True}, bind=("day", "party"))


def _registry(probe: Probe, free: bool = True, confirm: bool = True) -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(spec("check", RO, params=SLOT), scripted(probe, "check", result={"free": free}))
    reg.register(spec("book", SE, params=BOOK, confirm=confirm, requires=NEEDS_FREE, from_caller=("name",)),
                 scripted(probe, "book", result="booked"))
    return reg


def _book(cid: str, **args: Any) -> ToolCall:
    return ToolCall(id=cid, name="book", arguments=args)


def _engine(reg: ToolRegistry, clock: SimClock) -> ToolEngine:
    return ToolEngine(reg, "s", clock, meta=CallMeta(call_id="s", agent="lokanta-deniz"))


def _offered(eng: ToolEngine) -> dict[str, dict[str, Any]]:
    return {s.name: dict(s.parameters.get("properties", {})) for s in eng.offered_specs()}


def test_words_ignore_case_accents_and_punctuation() -> None:
    assert words("It's Ayşe, AYSE!") == ("it", "s", "ayse", "ayse")


async def test_a_requiring_tool_is_offered_after_its_answer_with_the_bound_arguments_fixed() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with _engine(_registry(probe), clock) as eng:
        assert set(_offered(eng)) == {"check"}  # nothing checked, nothing pending: no book, no confirm_pending
        ctx = Context()
        ctx.push_user("Ada, two on friday")
        eng.note_user_turn("Ada, two on friday")
        await deliver_round(eng, ctx, [call("t1.0", "check", day="fri", party=2)], 1)
        offered = _offered(eng)
        assert set(offered) == {"check", "book"}
        assert offered["book"]["day"] == {"type": "string", "const": "fri"} and offered["book"]["party"]["const"] == 2
        assert offered["book"]["name"] == {"type": "string", "enum": ["Ada"]}  # the model picks only the name
        assert eng.registry.spec("book").parameters == BOOK  # type: ignore[union-attr]  # the registered schema is untouched


async def test_a_not_free_answer_offers_no_booking() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with _engine(_registry(probe, free=False), clock) as eng:
        await deliver_round(eng, Context(), [call("t1.0", "check", day="fri", party=2)], 1)
        assert set(_offered(eng)) == {"check"}


async def test_a_booking_before_its_check_or_off_the_checked_slot_is_refused_and_does_not_run() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with _engine(_registry(probe, confirm=False), clock) as eng:
        eng.note_user_turn("Ada, two on friday")
        ex = await deliver_round(eng, Context(), [_book("t1.0", name="Ada", day="fri", party=2)], 1)
        assert kind(ex.results[0]) == "invalid_arguments"
        assert "call check now" in body(ex.results[0])["detail"]
        await deliver_round(eng, Context(), [call("t2.0", "check", day="fri", party=2)], 2)
        ex = await deliver_round(eng, Context(), [_book("t2.1", name="Ada", day="sat", party=2)], 2)
        assert "day must be the ones check was asked about" in body(ex.results[0])["detail"]
        assert probe.count("start", "book") == 0
        ex = await deliver_round(eng, Context(), [_book("t3.0", name="Ada", day="fri", party=2)], 3)
        assert ex.results[0].content == "booked" and probe.count("start", "book") == 1
        # the answer is used: no second booking on it
        assert set(_offered(eng)) == {"check"}
        ex = await deliver_round(eng, Context(), [_book("t4.0", name="Ada", day="fri", party=2)], 4)
        assert kind(ex.results[0]) == "invalid_arguments" and probe.count("start", "book") == 1


@pytest.mark.parametrize(("name", "said", "why"), [
    ("John Doe", "a table for two please", "ask the caller for their name"),
    ("Lokanta Deniz", "is this lokanta deniz", "agent's own name"),
])
async def test_a_name_the_caller_did_not_say_is_refused_with_what_to_do(name: str, said: str, why: str) -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with _engine(_registry(probe, confirm=False), clock) as eng:
        eng.note_user_turn(said)
        await deliver_round(eng, Context(), [call("t1.0", "check", day="fri", party=2)], 1)
        ex = await deliver_round(eng, Context(), [_book("t1.1", name=name, day="fri", party=2)], 1)
        assert kind(ex.results[0]) == "invalid_arguments" and why in body(ex.results[0])["detail"]
        assert name not in ex.results[0].content  # the refusal never quotes the argument
        assert probe.count("start", "book") == 0
        eng.note_user_turn("It's Ayşe.")
        ex = await deliver_round(eng, Context(), [_book("t2.0", name="Ayse", day="fri", party=2)], 2)
        assert ex.results[0].content == "booked"


async def test_while_a_call_waits_for_the_yes_only_confirm_pending_is_offered_for_it() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("transfer", SE, confirm=True), scripted(probe, "transfer", result="done"))
    reg.register(spec("look", RO), scripted(probe, "look"))
    async with _engine(reg, clock) as eng:
        assert set(_offered(eng)) == {"transfer", "look"}  # nothing waits: no confirm_pending
        eng.note_user_turn("transfer me")
        await deliver_round(eng, Context(), [call("t1.0", "transfer")], 1)
        eng.note_user_turn("yes")
        offered = _offered(eng)
        assert set(offered) == {"look", CONFIRM_PENDING}
        assert offered[CONFIRM_PENDING]["call_id"] == {"enum": ["t1.0"]}
        await deliver_round(eng, Context(), [call("t2.0", CONFIRM_PENDING, call_id="t1.0")], 2)
        assert probe.count("start", "transfer") == 1
        assert set(_offered(eng)) == {"transfer", "look"}


async def test_a_flow_nodes_tools_get_the_same_offer() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = _registry(probe)
    async with _engine(reg, clock) as eng:
        node_tools = [reg.spec("book")]
        assert eng.offered_specs([s for s in node_tools if s is not None]) == []


def test_a_requirement_or_from_caller_naming_a_missing_argument_is_refused_at_registration() -> None:
    reg = ToolRegistry()
    with pytest.raises(RegistryError, match="nick"):
        reg.register(spec("book", SE, params=BOOK, from_caller=("nick",)), scripted(Probe(SimClock()), "book"))
    with pytest.raises(RegistryError, match="when"):
        reg.register(spec("book", SE, params=BOOK, requires=Requirement("check", bind=("when",))),
                     scripted(Probe(SimClock()), "book"))


def test_the_callers_words_are_not_checked_where_they_come_after_the_call() -> None:
    grounds = Grounds("agent")
    grounds.check_words = False
    assert grounds.refusal(spec("book", SE, params=BOOK, from_caller=("name",)), {"name": "John Doe"}) is None


@pytest.mark.parametrize(("said", "declined"), [
    ("No, cancel it.", True), ("I don't want it", True), ("yes please", False), ("a donut, yes", False),
])
def test_declines_match_whole_words_and_phrases(said: str, declined: bool) -> None:
    assert Grounds.declines(said, ("no", "don't", "cancel")) is declined


async def test_a_no_in_the_callers_turn_drops_the_call_waiting_for_the_yes() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("transfer", SE, confirm=True, declined_by=("no",)), scripted(probe, "transfer", result="done"))
    async with _engine(reg, clock) as eng:
        eng.note_user_turn("transfer me")
        await deliver_round(eng, Context(), [call("t1.0", "transfer")], 1)
        eng.note_user_turn("No!")
        assert len(eng.confirmations) == 0 and CONFIRM_PENDING not in _offered(eng)
        ex = await deliver_round(eng, Context(), [call("t2.0", CONFIRM_PENDING, call_id="t1.0")], 2)
        assert kind(ex.results[0]) == "confirmation_refused" and probe.count("start", "transfer") == 0


async def test_confirm_pending_is_offered_only_once_the_caller_spoke_after_the_question() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("transfer", SE, confirm=True), scripted(probe, "transfer", result="done"))
    async with _engine(reg, clock) as eng:
        eng.note_user_turn("transfer me")
        await deliver_round(eng, Context(), [call("t1.0", "transfer")], 1)
        assert set(_offered(eng)) == set()  # the same turn: the gate would refuse a confirmation; ask
        eng.note_user_turn("yes")
        assert _offered(eng)[CONFIRM_PENDING]["call_id"] == {"enum": ["t1.0"]}


async def test_a_refused_call_is_not_offered_again_until_the_caller_speaks() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with _engine(_registry(probe, confirm=False), clock) as eng:
        eng.note_user_turn("Ada here, a table for two on friday")
        await deliver_round(eng, Context(), [call("t1.0", "check", day="fri", party=2)], 1)
        assert "book" in _offered(eng)
        ex = await deliver_round(eng, Context(), [_book("t1.1", name="Lokanta Deniz", day="fri", party=2)], 1)
        assert kind(ex.results[0]) == "invalid_arguments"
        assert set(_offered(eng)) == {"check"}  # the model asks for the name instead of writing the call again
        eng.note_user_turn("It's Ada.")
        assert "book" in _offered(eng)


@pytest.mark.parametrize(("said", "spans"), [
    ("It's Ada Lovelace.", ["Ada", "Lovelace", "Ada Lovelace"]),
    ("The name is Kaya, K A Y A.", ["Kaya"]),  # spelled letters are not names
    ("Mary-Jane O'Brien, a table for 2 at 7 tomorrow please", ["Mary-Jane", "O'Brien", "Mary-Jane O'Brien"]),
    ("Hello, is this Lokanta Deniz? Two people on Friday at 19:00.", []),  # the agent's name, days, numbers
    ("Ayse, yes. Brown", ["Ayse", "Brown"]),  # no pair across a clause
    ("I'm Deniz, calling Lokanta-Deniz", ["Deniz"]),  # the agent's name said whole is not the caller's
])
def test_name_spans_are_the_callers_one_and_two_word_name_like_spans_as_transcribed(said: str, spans: list[str]) -> None:
    assert name_spans(said, words("lokanta-deniz")) == spans


async def test_a_from_caller_argument_is_offered_as_the_callers_recent_spans_and_follows_what_they_say() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with _engine(_registry(probe, confirm=False), clock) as eng:
        eng.note_user_turn("Hello, is this Lokanta Deniz? A table for two on Friday.")
        await deliver_round(eng, Context(), [call("t1.0", "check", day="fri", party=2)], 1)
        assert set(_offered(eng)) == {"check"}  # free, but no name heard yet: the model must ask
        eng.note_user_turn("It's Ada Lovelace.")
        assert _offered(eng)["book"]["name"] == {"type": "string", "enum": ["Ada", "Lovelace", "Ada Lovelace"]}
        eng.note_user_turn("Sorry: Ayşe Kaya, and ada again")
        assert _offered(eng)["book"]["name"]["enum"] == ["Lovelace", "Ada Lovelace", "Ayşe", "Kaya", "Ayşe Kaya", "ada"]
        for n in range(MAX_NAME_SPANS):
            eng.note_user_turn(f"Guest{'x' * n}")
        assert _offered(eng)["book"]["name"]["enum"] == [f"Guest{'x' * n}" for n in range(MAX_NAME_SPANS)]


async def test_spans_outside_the_arguments_length_bounds_are_not_offered() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    name = {"type": "string", "minLength": 3, "maxLength": 7}
    reg.register(spec("book", SE, params={"type": "object", "properties": {"name": name}}, from_caller=("name",)),
                 scripted(probe, "book"))
    async with _engine(reg, clock) as eng:
        eng.note_user_turn("Oz")
        assert _offered(eng) == {}  # the only span is too short: not a name this tool takes
        eng.note_user_turn("Ada Lovelace")
        assert _offered(eng)["book"]["name"] == {**name, "enum": ["Ada"]}  # "Lovelace" is too long


async def test_a_cloud_models_call_off_the_enum_is_still_refused_and_a_heard_name_still_runs() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with _engine(_registry(probe, confirm=False), clock) as eng:
        eng.note_user_turn("Two on friday, the name is Ada")
        await deliver_round(eng, Context(), [call("t1.0", "check", day="fri", party=2)], 1)
        assert _offered(eng)["book"]["name"]["enum"] == ["Ada"]
        ex = await deliver_round(eng, Context(), [_book("t1.1", name="John Doe", day="fri", party=2)], 1)
        assert "ask the caller for their name" in body(ex.results[0])["detail"] and probe.count("start", "book") == 0


def test_where_the_callers_words_come_after_the_call_the_argument_is_not_narrowed() -> None:
    grounds = Grounds("agent")
    grounds.check_words = False
    book = spec("book", SE, params=BOOK, from_caller=("name",))
    assert grounds.offer([book], {}) == [book]
