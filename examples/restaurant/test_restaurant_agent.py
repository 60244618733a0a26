"""The demo restaurant's own tests, written with brisvox.testing: no key, virtual time."""

from __future__ import annotations

import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from restaurant_agent import Restaurant, build_agent  # noqa: E402

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
        [call("book_table", name="Ada", **SLOT)], "Just to confirm: two at seven on Friday for Ada?",
        [call("confirm_pending", call_id="t2.0")], "Booked. See you Friday!",
    ]
    async with AgentTest(build_agent(r), llm=llm) as test:
        first = await test.user_says("a table for two on friday at seven")
        first.expect.tool_call("check_availability", party_size=2)
        asked = await test.user_says("Ada")
        assert asked.expect.tool_call("book_table", name="Ada").outcome == "confirmation_required"
        assert r.bookings == {}  # nothing booked before the yes (the engine named the pending call t2.0)
        done = await test.user_says("yes")
        done.expect.said(contains="Booked")
    assert test.tool_runs("book_table") == 1 and [b.name for b in r.bookings.values()] == ["Ada"]


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
    assert content is not None and json.loads(content)["free"] is False and r.bookings == {}
