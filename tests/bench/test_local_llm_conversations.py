"""The conversation bench's own checks (bench/local_llm_conversations.py): a conversation
passes on what the engine's events and the restaurant's bookings say, and fails on a
booking made twice, before the caller's yes, under another name, or never."""

from __future__ import annotations

import datetime

from bench.local_llm_conversations import (
    Seen,
    ToolUse,
    TurnSeen,
    booked,
    conversations,
    converse,
    declined,
    talk_only,
)

from brisvox.agent import ToolMessage, UserMessage
from brisvox.core.clock import SimClock
from brisvox.providers.llm import LlmRequest
from brisvox.server.demo_llm import scripted_demo_llm
from brisvox.sim.mock_llm import Call, Say
from brisvox.sim.mock_llm import ScriptedLlm as Fake
from brisvox.testing import call, virtual_time

SLOT = {"date": "2026-12-05", "time": "19:00", "party_size": 2}
BOOKING = ("A table for two tomorrow at 19:00, please.", "The name is Brown.", "Yes, please book it.")


def _seen(bookings_after: tuple[int, int, int], bookings: list[tuple[str, str, str, int]]) -> Seen:
    looked = ToolUse("check_availability", SLOT, "ok")
    held = ToolUse("book_table", {"name": "Brown", **SLOT}, "confirmation_required")
    turns = [TurnSeen(BOOKING[0], [looked], bookings_after[0], answered=True),
             TurnSeen(BOOKING[1], [held], bookings_after[1], answered=True),
             TurnSeen(BOOKING[2], [ToolUse("confirm_pending", {"call_id": "t2.0"}, "ok")], bookings_after[2])]
    return Seen(turns, bookings)


def test_a_booking_made_once_after_the_yes_under_the_callers_name_passes() -> None:
    assert booked("Brown", SLOT)(_seen((0, 0, 1), [("Brown", "2026-12-05", "19:00", 2)])) is None


def test_a_booking_made_before_the_yes_fails() -> None:
    miss = booked("Brown", SLOT)(_seen((0, 1, 1), [("Brown", "2026-12-05", "19:00", 2)]))
    assert miss is not None and "before the yes" in miss


def test_a_booking_made_twice_fails() -> None:
    twice = [("Brown", "2026-12-05", "19:00", 2), ("Brown", "2026-12-05", "19:00", 2)]
    miss = booked("Brown", SLOT)(_seen((0, 0, 2), twice))
    assert miss is not None and "2 bookings" in miss


def test_a_booking_under_another_name_fails() -> None:
    miss = booked("Brown", SLOT)(_seen((0, 0, 1), [("Lokanta Deniz", "2026-12-05", "19:00", 2)]))
    assert miss is not None and "Lokanta Deniz" in miss


def test_a_decline_passes_only_when_the_gate_was_reached_and_nothing_booked() -> None:
    assert declined(SLOT)(_seen((0, 0, 0), [])) is None
    assert declined(SLOT)(_seen((0, 0, 1), [("Brown", "2026-12-05", "19:00", 2)])) is not None
    never_held = _seen((0, 0, 0), [])
    never_held.turns[1].tools.clear()
    miss = declined(SLOT)(never_held)
    assert miss is not None and "gate" in miss


def test_talk_only_fails_a_turn_with_a_tool_call_or_the_fallback_line() -> None:
    assert talk_only(Seen([TurnSeen("Hello?", answered=True)])) is None
    miss = talk_only(Seen([TurnSeen("Hello?", [ToolUse("book_table", {"name": "x"}, "confirmation_required")],
                                    answered=True)]))
    assert miss is not None and "book_table" in miss
    assert talk_only(Seen([TurnSeen("Hello?", failed=True)])) == "fallback line in turn 1"


def test_every_scenario_has_at_least_three_phrasings_and_the_set_forty_conversations() -> None:
    every = conversations(datetime.date(2026, 12, 4))
    assert len(every) >= 40
    counts: dict[str, set[tuple[str, ...]]] = {}
    for c in every:
        counts.setdefault(c.scenario, set()).add(c.turns)
    assert len(counts) == 11 and min(len(v) for v in counts.values()) >= 3


@virtual_time
async def test_an_llm_that_confirms_on_the_yes_passes_the_booking_conversation_through_the_engine() -> None:
    clock = SimClock()
    today = clock.wall().date()
    booking = next(c for c in conversations(today) if c.scenario == "booking")
    seen = await converse(booking, scripted_demo_llm(clock), clock, [])
    assert booking.check(seen) is None
    assert [t.bookings_after for t in seen.turns] == [0, 0, 1]


@virtual_time
async def test_an_llm_that_only_says_it_booked_fails_the_booking_conversation() -> None:
    clock = SimClock()
    today = clock.wall().date()
    booking = next(c for c in conversations(today) if c.scenario == "booking")
    slot = {"date": (today + datetime.timedelta(days=1)).isoformat(), "time": "19:00", "party_size": 2}

    def liar(request: LlmRequest) -> list[Say | Call]:
        last = request.messages[-1]
        if isinstance(last, ToolMessage):
            return [Say("It is free. Your name?")]
        assert isinstance(last, UserMessage)
        if "table" in last.text:
            return [call("check_availability", **slot)]
        return [Say("Done, it is booked.")]

    seen = await converse(booking, Fake(clock, liar), clock, [])
    miss = booking.check(seen)
    assert miss is not None and "0 bookings" in miss
