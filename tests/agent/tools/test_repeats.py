"""Repeats within a turn: an identical SideEffect call of a later response is already_done.

Mutation-checked: removing the repeat check, its epoch condition, or its "not an error"
condition makes a test here fail.
"""

from __future__ import annotations

from brisvox.agent.context import Context, ToolCall
from brisvox.agent.tools.registry import ToolRegistry
from brisvox.core.clock import SimClock

from ._helpers import RO, SE, Probe, body, call, deliver_round, engine, kind, scripted, spec


def _reg(probe: Probe) -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(spec("book_table", SE), scripted(probe, "book_table", 0.1, result={"booking": "BK-1001"}))
    reg.register(spec("press", SE, repeatable=True), scripted(probe, "press", 0.0, result="pressed"))
    reg.register(spec("look", RO), scripted(probe, "look", 0.0))
    reg.register(spec("charge", SE), scripted(probe, "charge", 0.0, fail="declined"))
    return reg


async def test_an_identical_side_effect_call_of_a_later_response_of_the_same_turn_is_refused() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context([])
    ctx.push_user("book a table for Kaya at 7")
    async with engine(_reg(probe), clock) as eng:
        await deliver_round(eng, ctx, [call("t1.0", "book_table", who="Kaya", at="19:00")], 1)
        # key order differs: the arguments compare as JSON values
        ex = await deliver_round(eng, ctx, [ToolCall(id="t1.1", name="book_table", arguments={"at": "19:00", "who": "Kaya"})], 1)
        assert kind(ex.results[0]) == "already_done"
        assert "do not repeat" in body(ex.results[0])["detail"].lower()
        assert probe.count("start", "book_table") == 1
        assert eng.stats().side_effect_repeats == 1
        ctx.push_assistant("Your table is booked.")
        ctx.validate()


async def test_other_arguments_run() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    async with engine(_reg(probe), clock) as eng:
        await deliver_round(eng, ctx, [call("t1.0", "book_table", who="Kaya")], 1)
        ex = await deliver_round(eng, ctx, [call("t1.1", "book_table", who="Ali")], 1)
        assert kind(ex.results[0]) is None and probe.count("start", "book_table") == 2


async def test_the_next_turn_may_ask_again() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    async with engine(_reg(probe), clock) as eng:
        await deliver_round(eng, ctx, [call("t1.0", "book_table", who="Kaya")], 1)
        ctx.push_user("book it again")
        ex = await deliver_round(eng, ctx, [call("t2.0", "book_table", who="Kaya")], 2)
        assert kind(ex.results[0]) is None and probe.count("start", "book_table") == 2


async def test_two_identical_calls_of_one_response_both_run() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    async with engine(_reg(probe), clock) as eng:
        ex = await deliver_round(eng, ctx, [call("t1.0", "book_table", who="Kaya"), call("t1.1", "book_table", who="Kaya")], 1)
        assert [kind(m) for m in ex.results] == [None, None]
        assert probe.count("start", "book_table") == 2


async def test_a_repeatable_tool_and_a_read_only_tool_repeat() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    async with engine(_reg(probe), clock) as eng:
        await deliver_round(eng, ctx, [call("t1.0", "press", digit=1), call("t1.1", "look", q=1)], 1)
        ex = await deliver_round(eng, ctx, [call("t1.2", "press", digit=1), call("t1.3", "look", q=1)], 1)
        assert [kind(m) for m in ex.results] == [None, None]
        assert probe.count("start", "press") == 2 and probe.count("start", "look") == 2


async def test_a_failed_side_effect_may_be_retried_by_a_later_response() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    async with engine(_reg(probe), clock) as eng:
        await deliver_round(eng, ctx, [call("t1.0", "charge", amount=5)], 1)
        ex = await deliver_round(eng, ctx, [call("t1.1", "charge", amount=5)], 1)
        assert kind(ex.results[0]) == "tool_failed"
        assert probe.count("start", "charge") == 2
