"""Speculation: ReadOnly runs, SideEffect is held until commit and never runs when discarded."""

from __future__ import annotations

from brisvox.agent.context import Context
from brisvox.agent.tools.cancel import CancelToken
from brisvox.agent.tools.registry import ToolRegistry
from brisvox.core.clock import SimClock

from ._helpers import RO, SE, Probe, call, engine, kind, scripted, spec


def _reg(probe: Probe) -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(spec("book", SE), scripted(probe, "book", 0.25, result="BK-1"))
    reg.register(spec("look", RO), scripted(probe, "look", 0.125, result="found"))
    return reg


async def test_a_speculation_runs_read_only_holds_side_effects_and_commit_keeps_issue_order() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    async with engine(_reg(probe), clock) as eng:
        calls = [call("t1.0", "book", slot="a"), call("t1.1", "look", q=1)]
        ctx.push_user("book it")
        ctx.push_assistant(tool_calls=calls)
        spec_ = await eng.speculate(calls, 1, CancelToken())
        assert probe.count("start", "look") == 1 and probe.count("start", "book") == 0
        assert [c.id for c in spec_.held_calls()] == ["t1.0"]
        assert [m.call_id for m in spec_.answered()] == ["t1.1"]
        assert not spec_.budget_exhausted and spec_.epoch == 1
        t0 = clock.now()
        ex = await eng.commit(spec_, CancelToken())
        assert clock.now() - t0 == 0.25
        assert [(m.call_id, m.content) for m in ex.results] == [("t1.0", "BK-1"), ("t1.1", "found")]
        ex.append_to(ctx)
        ctx.validate()
        assert probe.count("start", "book") == 1


async def test_a_discarded_speculation_runs_nothing_held_and_still_spends_its_round() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    async with engine(_reg(probe), clock) as eng:
        calls = [call("t1.0", "book"), call("t1.1", "nope")]
        ctx.push_assistant(tool_calls=calls)
        s = await eng.speculate(calls, 1, CancelToken())
        s.discard()
        ctx.interrupt_pending_tool_calls()
        ctx.push_user("next")
        ctx.validate()
        assert eng.invalid_rounds(1) == 1
        await clock.sleep(1.0)
        assert probe.count("start", "book") == 0


async def test_a_speculation_of_a_superseded_turn_runs_nothing_on_commit() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe), clock) as eng:
        s = await eng.speculate([call("t1.0", "book")], 1, CancelToken())
        newer = await eng.execute([call("t2.0", "look")], 2, CancelToken())
        newer.mark_delivered()
        ex = await eng.commit(s, CancelToken())
        ex.mark_delivered()
        assert kind(ex.results[0]) == "stale_turn"
        assert probe.count("start", "book") == 0


async def test_commit_spends_no_budget_and_answers_budget_exhausted_when_it_ran_out_since() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe), clock, max_invalid_rounds=1) as eng:
        s = await eng.speculate([call("t1.0", "book", n=1)], 1, CancelToken())
        for i in (1, 2):
            ex = await eng.execute([call(f"t1.{i}", "nope")], 1, CancelToken())
            ex.mark_delivered()
        assert eng.invalid_rounds(1) == 2
        ex = await eng.commit(s, CancelToken())
        ex.mark_delivered()
        assert kind(ex.results[0]) == "budget_exhausted" and ex.budget_exhausted
        assert eng.invalid_rounds(1) == 2
        assert probe.count("start") == 0
    async with engine(_reg(probe), clock, max_invalid_rounds=1) as eng:
        ex = await eng.execute([call("t1.0", "nope")], 1, CancelToken())
        ex.mark_delivered()
        s = await eng.speculate([call("t1.1", "book")], 1, CancelToken())
        ex = await eng.commit(s, CancelToken())
        ex.mark_delivered()
        assert eng.invalid_rounds(1) == 1  # the commit spent nothing
        assert kind(ex.results[0]) is None


async def test_a_speculation_under_an_exhausted_budget_holds_nothing() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe), clock, max_invalid_rounds=0) as eng:
        s = await eng.speculate([call("t1.0", "book"), call("t1.1", "nope")], 1, CancelToken())
        assert s.budget_exhausted and s.held_calls() == []
        ex = await eng.commit(s, CancelToken())
        ex.mark_delivered()
        assert [kind(m) for m in ex.results] == ["budget_exhausted", "budget_exhausted"]


async def test_commit_with_a_cancelled_token_answers_interrupted_without_running() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe), clock) as eng:
        s = await eng.speculate([call("t1.0", "book")], 1, CancelToken())
        token = CancelToken()
        token.cancel()
        ex = await eng.commit(s, token)
        ex.mark_delivered()
        assert kind(ex.results[0]) == "interrupted"
        assert probe.count("start") == 0


async def test_a_replay_of_a_committed_call_returns_the_recorded_result() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe), clock) as eng:
        s = await eng.speculate([call("t1.0", "book")], 1, CancelToken())
        (await eng.commit(s, CancelToken())).mark_delivered()
        ex = await eng.execute([call("t1.0", "book")], 1, CancelToken())
        ex.mark_delivered()
        assert ex.results[0].content == "BK-1"
        assert probe.count("start") == 1


async def test_a_speculation_can_be_committed_once() -> None:
    import pytest

    from brisvox.core.errors import BrisvoxError

    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe), clock) as eng:
        s = await eng.speculate([call("t1.0", "look")], 1, CancelToken())
        (await eng.commit(s, CancelToken())).mark_delivered()
        with pytest.raises(RuntimeError, match="speculation already delivered") as caught:
            await eng.commit(s, CancelToken())
        assert isinstance(caught.value, BrisvoxError)
