"""The note-taker's own tests, written with brisvox.testing (no key, virtual time)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from note_taker_agent import build_agent  # noqa: E402
from tools import NoteBook, NoteTaker  # noqa: E402

import brisvox  # noqa: E402
from brisvox.testing import AgentTest, call  # noqa: E402

NOON = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def test_the_python_agent_is_the_agent_file() -> None:
    taker = NoteTaker(NoteBook())
    from_file = brisvox.Agent.from_file(HERE / "agent.toml", tools=[taker.get_time, taker.save_note])
    assert build_agent(taker) == from_file


async def test_it_tells_the_time_in_the_zone_asked() -> None:
    agent = build_agent(NoteTaker(NoteBook(), now=lambda: NOON))
    llm = [[call("get_time", zone="Europe/Istanbul")], "It is three in the afternoon in Istanbul."]
    async with AgentTest(agent, llm=llm) as test:
        turn = await test.user_says("what time is it in Istanbul?")
    seen = turn.expect.tool_call("get_time", zone="Europe/Istanbul")
    assert seen.outcome == "ok" and seen.content is not None and "15:00" in seen.content
    turn.expect.said(contains="three in the afternoon")


async def test_a_note_is_saved_once_and_the_reply_confirms_it() -> None:
    book = NoteBook()
    llm = [[call("save_note", text="buy milk")], "Noted: buy milk."]
    async with AgentTest(build_agent(NoteTaker(book)), llm=llm) as test:
        turn = await test.user_says("note: buy milk")
    turn.expect.said(contains="Noted")
    assert list(book.notes.values()) == ["buy milk"] and test.tool_runs("save_note") == 1
    assert turn.expect.tool_call("save_note", text="buy milk").outcome == "ok"
