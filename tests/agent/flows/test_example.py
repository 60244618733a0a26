"""The restaurant example: its store and its flow definition (the engine-driven runs are in test_flows.py)."""

from __future__ import annotations

import pytest

from brisvox.agent.context import Context
from brisvox.agent.flows import FlowManager, Reset, ResetWithSummary
from brisvox.agent.flows.example import Language, Restaurant, restaurant_flow, restaurant_tools
from brisvox.core.clock import SimClock

from ._support import Specs


def _catalog(restaurant: Restaurant) -> Specs:
    return Specs(*(spec for spec, _ in restaurant_tools(restaurant)))


def test_the_restaurant_has_one_table_per_slot_and_always_full_times() -> None:
    r = Restaurant()
    assert r.check("2026-12-24", "19:00", 4)["free"] is True
    assert r.check("2026-12-24", "20:00", 2) == {
        "free": False,
        "date": "2026-12-24",
        "time": "20:00",
        "alternatives": ["18:00", "19:00", "21:00"],
    }
    assert r.book("Ada", "2026-12-24", "19:00", 4) == {"status": "confirmed", "reservation_id": "R001"}
    assert r.book("Bob", "2026-12-24", "19:00", 2) == {
        "status": "unavailable",
        "date": "2026-12-24",
        "time": "19:00",
    }
    assert r.check("2026-12-24", "19:00", 2)["free"] is False
    assert len(r.bookings) == 1


def test_a_booking_replayed_with_its_key_books_nothing_new() -> None:
    # The demo agent's book_table passes the call's idempotency key (examples/restaurant/).
    r = Restaurant()
    first = r.book("Ada", "2026-12-24", "19:00", 4, key="k1")
    assert r.book("Ada", "2026-12-24", "19:00", 4, key="k1") == first == {"status": "confirmed", "reservation_id": "R001"}
    assert r.book("Bob", "2026-12-24", "18:00", 2, key="k2")["reservation_id"] == "R002"
    assert [b.name for b in r.bookings] == ["Ada", "Bob"]


@pytest.mark.parametrize("language", list(Language))
def test_the_flow_builds_in_both_languages_with_the_documented_shape(language: Language) -> None:
    r = Restaurant()
    flow = restaurant_flow(language, _catalog(r))
    assert flow.initial == "greeting"
    assert sorted(flow.nodes) == ["alternatives", "confirm", "done", "farewell", "greeting"]
    assert isinstance(flow.node("confirm").strategy, ResetWithSummary)
    assert isinstance(flow.node("done").strategy, Reset)
    assert flow.node("confirm").keep_last_user and flow.node("done").keep_last_user
    assert sorted(flow.tool_uses("greeting")) == ["check_availability", "end_call"]
    manager = FlowManager(flow, SimClock())
    ctx = Context()
    manager.start(ctx)
    assert [s.name for s in manager.tool_specs()] == ["check_availability", "end_call"]
