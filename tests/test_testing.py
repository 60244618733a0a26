"""brisvox.testing: a user's agent tested without keys, on virtual time, in the real engine."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

import brisvox
from brisvox.agent.context import AssistantMessage
from brisvox.testing import AgentTest, call, virtual_time


class Booking(BaseModel):
    day: str
    party_size: int


def host(calls: list[Booking]) -> brisvox.Agent:
    @brisvox.tool.side_effect
    async def book_table(args: Booking) -> str:
        """Book a table."""
        calls.append(args)
        return "booked"

    @brisvox.tool.read_only
    async def opening_hours() -> str:
        """When the restaurant is open."""
        return "18:00 to 23:00"

    return brisvox.Agent(name="host", prompt="You book tables.", tools=[book_table, opening_hours])


async def test_a_scripted_turn_calls_the_tool_once_and_says_the_reply() -> None:
    booked: list[Booking] = []
    llm = [[call("book_table", day="fri", party_size=2)], "Booked for two on Friday."]
    async with AgentTest(host(booked), llm=llm) as test:
        turn = await test.user_says("a table for two on friday")
        seen = turn.expect.tool_call("book_table", party_size=2)
        turn.expect.said(contains="booked for two")
    assert seen.outcome == "ok" and seen.arguments == {"day": "fri", "party_size": 2}
    assert test.tool_runs("book_table") == 1 and test.tool_runs("opening_hours") == 0
    assert booked == [Booking(day="fri", party_size=2)]
    kinds = [type(m).__name__ for m in test.context.messages]
    assert kinds == ["SystemMessage", "UserMessage", "AssistantMessage", "ToolMessage", "AssistantMessage"]


async def test_expectations_fail_saying_what_happened_instead() -> None:
    async with AgentTest(host([]), llm=["We open at six."]) as test:
        turn = await test.user_says("when do you open?")
        turn.expect.no_tool_call()
        with pytest.raises(AssertionError, match=r"calls made: none"):
            turn.expect.tool_call("opening_hours")
        with pytest.raises(AssertionError, match=r"it said 'We open at six.'"):
            turn.expect.said(contains="midnight")


async def test_invalid_arguments_reach_the_model_and_the_tool_does_not_run() -> None:
    llm = [[call("book_table", day="fri", party_size="two")], "Sorry, how many people?"]
    async with AgentTest(host([]), llm=llm) as test:
        turn = await test.user_says("a table for two")
    assert turn.tool_calls[0].outcome == "invalid_arguments" and test.tool_runs("book_table") == 0


async def test_typing_over_the_reply_interrupts_it() -> None:
    long_reply = "Our menu today has " + ", ".join(f"dish number {i}" for i in range(40)) + "."
    async with AgentTest(host([]), llm=[long_reply, "Sure, stopping."]) as test:
        first = await test.user_says("what is on the menu?", wait=False)
        second = await test.barge_in(after=0.4, text="stop")
    assert first.interrupted and not second.interrupted
    second.expect.said(equals="Sure, stopping.")
    heard = next(m for m in test.context.messages if isinstance(m, AssistantMessage))
    assert 0 < len(heard.text) < len(long_reply)  # the context keeps only what was heard


@virtual_time
async def test_virtual_time_runs_a_hundred_turns_of_call_time_deterministically() -> None:
    llm = [f"Reply number {i}." for i in range(100)]
    async with AgentTest(host([]), llm=llm) as test:
        for i in range(100):
            (await test.user_says(f"message {i}")).expect.said(equals=f"Reply number {i}.")
        ended = test.clock.now()
    assert len(test.turns) == 100 and ended > 20.0  # call time passed; bench/agent_test_turns.py times it
