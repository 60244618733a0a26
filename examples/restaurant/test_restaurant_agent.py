"""The restaurant host's own tests, written with brisvox.testing: no key, virtual time."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from restaurant_agent import Restaurant, build_agent, redact_cards  # noqa: E402

import brisvox  # noqa: E402
from brisvox import Hook, HookPoint  # noqa: E402
from brisvox.testing import AgentTest, call  # noqa: E402

SLOT = {"day": "2026-12-04", "time": "19:00", "party_size": 2}


def test_the_python_agent_is_the_agent_file_plus_its_hook() -> None:
    r = Restaurant()
    from_file = brisvox.Agent.from_file(HERE / "agent.toml", tools=[r.check_availability, r.book_table],
                                        hooks=[Hook(HookPoint.BEFORE_LLM, redact_cards)])
    assert build_agent(r) == from_file


async def test_a_booking_waits_for_the_yes_then_books_once() -> None:
    r = Restaurant()
    llm = [
        [call("check_availability", **SLOT)], "Friday at seven is free. Shall I book it for Ada?",
        [call("book_table", name="Ada", **SLOT)], "Just to confirm: two at seven on Friday for Ada?",
        [call("confirm_pending", call_id="t2.0")], "Booked. See you Friday!",
    ]
    async with AgentTest(build_agent(r), llm=llm) as test:
        first = await test.user_says("a table for two on friday at seven")
        first.expect.tool_call("check_availability", party_size=2)
        asked = await test.user_says("yes, for Ada")
        assert asked.expect.tool_call("book_table", name="Ada").outcome == "confirmation_required"
        assert r.bookings == {}  # nothing booked before the yes (the engine named the pending call t2.0)
        done = await test.user_says("yes")
        done.expect.said(contains="Booked")
    assert test.tool_runs("book_table") == 1 and [b.name for b in r.bookings.values()] == ["Ada"]


async def test_card_numbers_never_reach_the_model() -> None:
    async with AgentTest(build_agent(Restaurant()), llm=["I cannot take payments on the phone."]) as test:
        await test.user_says("my card is 4111 1111 1111 1111")
    said = [m.text for m in test.context.messages if type(m).__name__ == "UserMessage"]
    assert said == ["my card is [card number]"]
