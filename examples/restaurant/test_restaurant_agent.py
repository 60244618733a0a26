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


async def test_a_booking_waits_for_the_yes_then_books_once_and_the_agent_says_each_answer_itself() -> None:
    clock = SimClock()
    r = Restaurant()
    llm = ScriptedLlm(clock, [
        [Call(name="check_availability", arguments=SLOT)],  # answered in the restaurant's words (result_line)
        [Call(name="book_table", arguments={"name": "Ada", **SLOT})],  # the agent asks its own question
        [Call(name="confirm_pending", arguments={"call_id": "t2.0"})],  # the booked line ends the turn
        [Say("The model's words after a result, never asked for.")],
    ])
    async with AgentTest(build_agent(r), llm=llm, clock=clock) as test:
        first = await test.user_says("a table for two on friday at seven")
        first.expect.tool_call("check_availability", party_size=2)
        first.expect.said(contains="Friday 4 December at 19:00 is free for 2. What name shall I book it under?")
        asked = await test.user_says("Ada")
        assert asked.expect.tool_call("book_table", name="Ada").outcome == "confirmation_required"
        asked.expect.said(contains="A table for 2 on Friday 4 December at 19:00, under the name Ada. Shall I book it?")
        assert r.bookings == []  # nothing booked before the yes (the engine named the pending call t2.0)
        done = await test.user_says("yes")
        done.expect.said(contains="Booked, a table for 2 on Friday 4 December at 19:00 under Ada. "
                                  "Your reference is R001.")
    assert len(llm.requests) == 3  # one request a turn: no model round after any result
    assert test.tool_runs("book_table") == 1 and [b.name for b in r.bookings] == ["Ada"]


async def test_eight_is_always_full_and_the_free_hours_are_offered() -> None:
    llm = [[call("check_availability", **{**SLOT, "time": "20:00"})]]
    async with AgentTest(build_agent(), llm=llm) as test:
        turn = await test.user_says("a table for two at eight")
    turn.expect.said(contains="Sorry, Friday 4 December at 20:00 is taken. I have 18:00, 19:00 or 21:00. "
                              "Which would you like?")
    seen = turn.expect.tool_call("check_availability", time="20:00")
    assert seen.content is not None and json.loads(seen.content) == {"free": False, "date": SLOT["date"], "time": "20:00",
                           "alternatives": ["18:00", "19:00", "21:00"]}


async def test_a_party_too_large_is_not_free_and_not_booked() -> None:
    r = Restaurant()
    big = {**SLOT, "party_size": 12}
    llm = [[call("check_availability", **big)]]
    async with AgentTest(build_agent(r), llm=llm) as test:
        turn = await test.user_says("a table for twelve at seven")
    turn.expect.said(contains="Sorry, we seat at most 8 at one table.")
    content = turn.expect.tool_call("check_availability").content
    assert content is not None and json.loads(content)["free"] is False and r.bookings == []


def _offered(request: LlmRequest) -> dict[str, dict[str, object]]:
    """The tools a request offers, each with its argument schemas."""
    return {t.name: dict(t.parameters.get("properties", {})) for t in request.tools}


async def test_book_table_is_offered_only_after_a_free_check_with_its_slot_fixed() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [
        [Call(name="book_table", arguments={"name": "Ada", **SLOT})], [Say("Let me check first.")],
        [Call(name="check_availability", arguments=SLOT)],  # its line ends the turn
        [Say("Under Ada, then?")],
    ])
    r = Restaurant()
    async with AgentTest(build_agent(r), llm=llm, clock=clock) as test:
        first = await test.user_says("Ada here, a table for two on friday at seven")
        second = await test.user_says("please check")
        await test.user_says("hmm")
    # Before any check: only the lookup is offered, and a booking the model writes anyway is refused.
    assert set(_offered(llm.requests[0])) == {"check_availability"}
    refused = first.expect.tool_call("book_table")
    assert refused.outcome == "invalid_arguments" and refused.content is not None
    assert "call check_availability" in refused.content and test.tool_runs("book_table") == 0
    second.expect.tool_call("check_availability")
    # After the free check: book_table with the checked date, time and party as constants.
    after = _offered(llm.requests[-1])
    assert "book_table" in after
    assert {k: after["book_table"][k].get("const") for k in SLOT} == SLOT  # type: ignore[attr-defined]
    assert r.bookings == []


async def test_a_name_the_caller_did_not_say_or_the_restaurants_own_is_refused() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [
        [Call(name="check_availability", arguments=SLOT)],
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


async def test_the_callers_no_drops_the_waiting_booking_and_is_answered_in_the_restaurants_words() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [
        [Call(name="check_availability", arguments=SLOT)],
        [Call(name="book_table", arguments={"name": "Ada", **SLOT})],  # the agent's own question ends the turn
        # never asked: a small model looked the table up again on the no and asked "Shall I book it?"
        [Call(name="check_availability", arguments=SLOT)], [Say("Shall I book it?")],
    ])
    r = Restaurant()
    async with AgentTest(build_agent(r), llm=llm, clock=clock) as test:
        await test.user_says("a table for two on friday at seven")
        await test.user_says("Ada")
        no = await test.user_says("No. Cancel now.")
    no.expect.said(contains="All right, I have not booked it. Is there anything else?")
    assert no.tool_calls == [] and len(llm.requests) == 2  # the no asked the model nothing
    assert test.tool_runs("check_availability") == 1 and test.tool_runs("book_table") == 0 and r.bookings == []


async def test_a_confirmation_after_the_callers_no_finds_nothing_to_confirm() -> None:
    r = Restaurant()
    llm = [
        [call("check_availability", **SLOT)],
        [call("book_table", name="Ada", **SLOT)],  # the agent's own question ends the turn
        # the no is answered with the declined line; a small model then confirms the dropped booking
        [call("confirm_pending", call_id="t2.0")], "Sorry, I could not book it.",
    ]
    async with AgentTest(build_agent(r), llm=llm) as test:
        await test.user_says("a table for two on friday at seven")
        await test.user_says("Ada")
        await test.user_says("no, don't book it")
        later = await test.user_says("hmm, well")
    assert later.expect.tool_call("confirm_pending").outcome == "confirmation_refused"
    assert test.tool_runs("book_table") == 0 and r.bookings == []


async def test_book_table_waits_for_a_name_the_caller_said_and_offers_only_their_words() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [
        [Call(name="check_availability", arguments=SLOT)],  # "... What name shall I book it under?"
        [Say("Take your time.")], [Say("Thank you.")],
    ])
    async with AgentTest(build_agent(Restaurant()), llm=llm, clock=clock) as test:
        await test.user_says("Is this Lokanta Deniz? A table for two on friday at seven")
        await test.user_says("Yes.")
        await test.user_says("It's Ada Lovelace.")
    # Free, but no name heard yet: book_table is not offered, the model can only ask.
    assert "book_table" not in _offered(llm.requests[1])
    name = _offered(llm.requests[2])["book_table"]["name"]
    assert name["enum"] == ["Ada", "Lovelace", "Ada Lovelace"]  # type: ignore[index]


async def test_the_callers_yes_to_a_waiting_booking_leaves_only_the_confirmation_and_books_once() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [
        [Call(name="check_availability", arguments=SLOT)],
        [Call(name="book_table", arguments={"name": "Ada", **SLOT})],  # the agent's own question ends the turn
        [Call(name="confirm_pending", arguments={"call_id": "t2.0"})],
    ])
    r = Restaurant()
    async with AgentTest(build_agent(r), llm=llm, clock=clock) as test:
        await test.user_says("a table for two on friday at seven")
        await test.user_says("Ada")
        yes = await test.user_says("Yes, please.")
    # the yes round: confirming is the only choice, a call required (the 0.5B model looked up again)
    assert set(_offered(llm.requests[2])) == {"confirm_pending"}
    assert llm.requests[2].tool_choice == ToolChoice.REQUIRED
    assert yes.expect.tool_call("confirm_pending").outcome == "ok"
    assert test.tool_runs("book_table") == 1 and len(r.bookings) == 1
