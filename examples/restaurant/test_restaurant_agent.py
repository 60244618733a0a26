"""The demo restaurant's own tests, written with brisvox.testing: no key, virtual time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from restaurant_agent import Restaurant, build_agent  # noqa: E402

from brisvox.core.clock import SimClock  # noqa: E402
from brisvox.providers.llm import LlmRequest, ToolChoice  # noqa: E402
from brisvox.sim.mock_llm import Call, Say, ScriptedLlm  # noqa: E402
from brisvox.testing import AgentTest, call  # noqa: E402

SLOT = {"date": "2026-12-04", "time": "19:00", "party_size": 2}


def test_the_agent_offers_its_two_tools_and_book_table_waits_for_a_confirmation() -> None:
    agent = build_agent()
    assert [t.name for t in agent.tools] == ["check_availability", "book_table"]
    assert agent.confirm_tools == ("book_table",)


async def test_a_booking_waits_for_the_yes_then_books_once() -> None:
    r = Restaurant()
    llm = [
        [call("check_availability", **SLOT)], "Seven on Friday is free. What name should I put it under?",
        [call("book_table", name="Ada", **SLOT)],  # the agent asks its own question (confirm_question)
        [call("confirm_pending", call_id="t2.0")], "Booked. See you Friday!",
    ]
    async with AgentTest(build_agent(r), llm=llm) as test:
        first = await test.user_says("a table for two on friday at seven")
        first.expect.tool_call("check_availability", party_size=2)
        asked = await test.user_says("Ada")
        assert asked.expect.tool_call("book_table", name="Ada").outcome == "confirmation_required"
        asked.expect.said(contains="A table for 2 on Friday 4 December at 19:00, under the name Ada. Shall I book it?")
        assert r.bookings == []  # nothing booked before the yes (the engine named the pending call t2.0)
        done = await test.user_says("yes")
        done.expect.said(contains="Booked")
    assert test.tool_runs("book_table") == 1 and [b.name for b in r.bookings] == ["Ada"]


async def test_eight_is_always_full_and_the_free_hours_are_offered() -> None:
    llm = [[call("check_availability", **{**SLOT, "time": "20:00"})], "Eight is taken; seven or nine?"]
    async with AgentTest(build_agent(), llm=llm) as test:
        turn = await test.user_says("a table for two at eight")
    seen = turn.expect.tool_call("check_availability", time="20:00")
    assert seen.content is not None and json.loads(seen.content) == {"free": False, "date": SLOT["date"], "time": "20:00",
                           "alternatives": ["18:00", "19:00", "21:00"]}


async def test_a_party_too_large_is_not_free_and_not_booked() -> None:
    r = Restaurant()
    big = {**SLOT, "party_size": 12}
    llm = [[call("check_availability", **big)], "Sorry, at most eight."]
    async with AgentTest(build_agent(r), llm=llm) as test:
        turn = await test.user_says("a table for twelve at seven")
    content = turn.expect.tool_call("check_availability").content
    assert content is not None and json.loads(content)["free"] is False and r.bookings == []


def _offered(request: LlmRequest) -> dict[str, dict[str, object]]:
    """The tools a request offers, each with its argument schemas."""
    return {t.name: dict(t.parameters.get("properties", {})) for t in request.tools}


async def test_book_table_is_offered_only_after_a_free_check_with_its_slot_fixed() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [
        [Call(name="book_table", arguments={"name": "Ada", **SLOT})], [Say("Let me check first.")],
        [Call(name="check_availability", arguments=SLOT)], [Say("Seven is free. Your name?")],
    ])
    r = Restaurant()
    async with AgentTest(build_agent(r), llm=llm, clock=clock) as test:
        first = await test.user_says("Ada here, a table for two on friday at seven")
        second = await test.user_says("please check")
    # Before any check: only the lookup is offered, and a booking the model writes anyway is refused.
    assert set(_offered(llm.requests[0])) == {"check_availability"}
    refused = first.expect.tool_call("book_table")
    assert refused.outcome == "invalid_arguments" and refused.content is not None
    assert "call check_availability" in refused.content and test.tool_runs("book_table") == 0
    second.expect.tool_call("check_availability")
    # After the free check: book_table with the checked date, time and party as constants (the
    # look-up itself, made in this turn, is offered again only after the caller's next words).
    after = _offered(llm.requests[-1])
    assert set(after) == {"book_table"}
    assert {k: after["book_table"][k].get("const") for k in SLOT} == SLOT  # type: ignore[attr-defined]
    assert r.bookings == []


async def test_a_name_the_caller_did_not_say_or_the_restaurants_own_is_refused() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [
        [Call(name="check_availability", arguments=SLOT)], [Say("Free. Your name?")],
        [Call(name="book_table", arguments={"name": "John Doe", **SLOT})], [Say("Sorry, your name?")],
        [Call(name="book_table", arguments={"name": "Lokanta Deniz", **SLOT})], [Say("Sorry, your name?")],
    ])
    r = Restaurant()
    async with AgentTest(build_agent(r), llm=llm, clock=clock) as test:
        await test.user_says("is lokanta deniz free for two on friday at seven")
        invented = await test.user_says("yes please")
        ours = await test.user_says("book it")
    for turn in (invented, ours):
        seen = turn.expect.tool_call("book_table")
        assert seen.outcome == "invalid_arguments" and seen.content is not None
        assert "ask the caller for their name" in seen.content
    assert "agent's own name" in (ours.expect.tool_call("book_table").content or "")
    assert test.tool_runs("book_table") == 0 and r.bookings == []


async def test_while_a_booking_waits_it_is_not_offered_again_and_a_no_drops_it() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [
        [Call(name="check_availability", arguments=SLOT)], [Say("Free. Your name?")],
        [Call(name="book_table", arguments={"name": "Ada", **SLOT})],  # the agent's own question ends the turn
        # the caller says no; a small model books again instead of listening
        [Call(name="book_table", arguments={"name": "Ada", **SLOT})], [Say("All right, nothing is booked.")],
    ])
    r = Restaurant()
    async with AgentTest(build_agent(r), llm=llm, clock=clock) as test:
        await test.user_says("a table for two on friday at seven")
        await test.user_says("Ada")
        no = await test.user_says("no, cancel that")
    # the held booking's turn ends on the agent's own question (no model round asks for the yes)
    assert len(llm.requests) == 5 and "Shall I book it?" in (llm.requests[3].messages[-2].text or "")
    assert set(_offered(llm.requests[3])) == {"check_availability"}  # the no dropped the waiting booking
    again = no.expect.tool_call("book_table")
    assert again.outcome == "invalid_arguments" and "check_availability" in (again.content or "")
    assert test.tool_runs("book_table") == 0 and r.bookings == []


async def test_a_confirmation_after_the_callers_no_finds_nothing_to_confirm() -> None:
    r = Restaurant()
    llm = [
        [call("check_availability", **SLOT)], "Free. Your name?",
        [call("book_table", name="Ada", **SLOT)],  # the agent's own question ends the turn
        [call("confirm_pending", call_id="t2.0")], "Sorry, I could not book it.",  # a small model confirms on a no
    ]
    async with AgentTest(build_agent(r), llm=llm) as test:
        await test.user_says("a table for two on friday at seven")
        await test.user_says("Ada")
        no = await test.user_says("no, don't book it")
    assert no.expect.tool_call("confirm_pending").outcome == "confirmation_refused"
    assert test.tool_runs("book_table") == 0 and r.bookings == []


async def test_book_table_waits_for_a_name_the_caller_said_and_offers_only_their_words() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [
        [Call(name="check_availability", arguments=SLOT)], [Say("Seven is free. What name, please?")],
        [Say("Thank you.")],
    ])
    async with AgentTest(build_agent(Restaurant()), llm=llm, clock=clock) as test:
        await test.user_says("Is this Lokanta Deniz? A table for two on friday at seven")
        await test.user_says("It's Ada Lovelace.")
    # Free, but no name heard yet: book_table is not offered (nor the look-up just made), the model can only ask.
    assert set(_offered(llm.requests[1])) == set()
    name = _offered(llm.requests[2])["book_table"]["name"]
    assert name["enum"] == ["Ada", "Lovelace", "Ada Lovelace"]  # type: ignore[index]


async def test_the_callers_yes_to_a_waiting_booking_leaves_only_the_confirmation_and_books_once() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [
        [Call(name="check_availability", arguments=SLOT)], [Say("Free. Your name?")],
        [Call(name="book_table", arguments={"name": "Ada", **SLOT})],  # the agent's own question ends the turn
        [Call(name="confirm_pending", arguments={"call_id": "t2.0"})], [Say("Booked.")],
    ])
    r = Restaurant()
    async with AgentTest(build_agent(r), llm=llm, clock=clock) as test:
        await test.user_says("a table for two on friday at seven")
        await test.user_says("Ada")
        yes = await test.user_says("Yes, please.")
    # the yes round: confirming is the only choice, a call required (the 0.5B model looked up again)
    assert set(_offered(llm.requests[3])) == {"confirm_pending"}
    assert llm.requests[3].tool_choice == ToolChoice.REQUIRED
    assert yes.expect.tool_call("confirm_pending").outcome == "ok"
    assert test.tool_runs("book_table") == 1 and len(r.bookings) == 1
