"""Regeneration after a barge-in (orphans) and the delivery guard of an execution."""

from __future__ import annotations

import asyncio
import gc
import json

from brisvox.agent.context import Context, SystemMessage, ToolCall
from brisvox.agent.tools.cancel import CancelToken
from brisvox.agent.tools.engine import ToolEngine
from brisvox.agent.tools.execution import Execution
from brisvox.agent.tools.registry import ToolRegistry
from brisvox.core.clock import SimClock

from ._helpers import RO, SE, Probe, call, engine, kind, scripted, spec


def _reg(probe: Probe, delay: float = 2.0) -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(spec("book", SE), scripted(probe, "book", delay, result={"booking": "BK-1"}))
    reg.register(spec("slow_look", RO), scripted(probe, "slow_look", 10.0))
    reg.register(spec("look", RO), scripted(probe, "look", 0.0))
    return reg


async def _interrupted_at(clock: SimClock, eng: ToolEngine, calls: list[ToolCall], epoch: int, at: float) -> Execution:
    token = CancelToken()

    async def barge() -> None:
        await clock.sleep(at)
        token.cancel()

    t = asyncio.get_running_loop().create_task(barge())
    ex = await eng.execute(calls, epoch, token)
    await t
    return ex


async def _finished_orphan(clock: SimClock, eng: ToolEngine, ctx: Context) -> None:
    """A booking interrupted at 0.5 s (answered interrupted, appended) that has finished since."""
    first = [call("t1.0", "book", slot="7pm")]
    _turn(ctx, first)
    (await _interrupted_at(clock, eng, first, 1, 0.5)).append_to(ctx)
    await clock.sleep(3.0)


def _turn(ctx: Context, calls: list[ToolCall], user: str = "hi") -> None:
    ctx.push_user(user)
    ctx.push_assistant(tool_calls=calls)


async def test_a_regenerated_call_after_the_orphan_finished_is_replayed_from_the_record_once() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    async with engine(_reg(probe), clock) as eng:
        first = [call("t1.0", "book", slot="7pm")]
        _turn(ctx, first)
        ex = await _interrupted_at(clock, eng, first, 1, 0.5)
        assert kind(ex.results[0]) == "interrupted"
        ex.append_to(ctx)
        await clock.sleep(3.0)  # the booking finished; its note waits in the mailbox
        regen = [call("t2.0", "book", slot="7pm")]
        _turn(ctx, regen, "again")
        ex2 = await eng.execute(regen, 2, CancelToken())
        assert not ex2.results[0].is_error
        assert json.loads(ex2.results[0].content) == {"booking": "BK-1"}
        assert ex2.late_notes == ()  # the original's note is held back: the model reads the result once
        ex2.append_to(ctx)
        ctx.validate()
        assert probe.count("start", "book") == 1
        assert eng.stats().orphan_replays == 1
        assert eng.take_late_notes() == []
        notes = [m for m in ctx if isinstance(m, SystemMessage)]
        assert notes == []


async def test_a_regenerated_call_while_the_orphan_runs_is_duplicate_call_and_the_note_comes_once() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    async with engine(_reg(probe), clock) as eng:
        first = [call("t1.0", "book", slot="7pm")]
        _turn(ctx, first)
        (await _interrupted_at(clock, eng, first, 1, 0.5)).append_to(ctx)
        regen = [call("t2.0", "book", slot="7pm")]
        _turn(ctx, regen)
        ex = await eng.execute(regen, 2, CancelToken())
        assert kind(ex.results[0]) == "duplicate_call"
        ex.append_to(ctx)
        assert eng.stats().orphan_in_flight == 1
        await clock.sleep(3.0)
        notes = eng.take_late_notes()
        assert [n.call_id for n in notes] == ["t1.0"]
        assert probe.count("start", "book") == 1


async def test_a_repeat_after_the_orphans_note_was_taken_is_already_reported() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    async with engine(_reg(probe), clock) as eng:
        await _finished_orphan(clock, eng, ctx)
        ctx.push_user("hello?")
        for n in eng.take_late_notes():
            ctx.push(n.message())
        regen = [call("t2.0", "book", slot="7pm")]
        ctx.push_assistant(tool_calls=regen)
        ex = await eng.execute(regen, 2, CancelToken())
        assert kind(ex.results[0]) == "already_reported"
        ex.append_to(ctx)
        assert eng.stats().orphan_reported == 1
        # later repeats within the window are answered the same way
        again = [call("t2.1", "book", slot="7pm")]
        ctx.push_assistant(tool_calls=again)
        ex = await eng.execute(again, 2, CancelToken())
        assert kind(ex.results[0]) == "already_reported"
        ex.append_to(ctx)
        ctx.validate()
        assert probe.count("start", "book") == 1


async def test_a_repeat_after_a_delivered_execution_carried_the_note_is_already_reported() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    async with engine(_reg(probe), clock) as eng:
        await _finished_orphan(clock, eng, ctx)
        other = [call("t2.0", "look")]
        _turn(ctx, other)
        carrier = await eng.execute(other, 2, CancelToken())
        assert [n.call_id for n in carrier.late_notes] == ["t1.0"]
        carrier.append_to(ctx)
        regen = [call("t2.1", "book", slot="7pm")]
        ctx.push_assistant(tool_calls=regen)
        ex = await eng.execute(regen, 2, CancelToken())
        assert kind(ex.results[0]) == "already_reported"
        ex.append_to(ctx)
        ctx.validate()


async def test_a_repeat_after_a_discarded_execution_carried_the_note_is_replayed() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    async with engine(_reg(probe), clock) as eng:
        await _finished_orphan(clock, eng, ctx)
        carrier = await eng.execute([call("t2.0", "look")], 2, CancelToken())
        assert len(carrier.late_notes) == 1
        carrier.discard()  # never reached the model: the note goes back
        regen = [call("t3.0", "book", slot="7pm")]
        _turn(ctx, regen)
        ex = await eng.execute(regen, 3, CancelToken())
        assert json.loads(ex.results[0].content) == {"booking": "BK-1"}
        assert ex.late_notes == ()
        ex.append_to(ctx)
        ctx.validate()
        assert probe.count("start", "book") == 1


async def test_an_orphan_that_ended_without_a_result_answers_unknown_outcome() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("charge", SE), scripted(probe, "charge", 2.0, crash=True))
    ctx = Context()
    async with engine(reg, clock) as eng:
        first = [call("t1.0", "charge", amount=5)]
        _turn(ctx, first)
        (await _interrupted_at(clock, eng, first, 1, 0.5)).append_to(ctx)
        await clock.sleep(3.0)
        regen = [call("t2.0", "charge", amount=5)]
        _turn(ctx, regen)
        ex = await eng.execute(regen, 2, CancelToken())
        assert kind(ex.results[0]) == "unknown_outcome"
        ex.append_to(ctx)
        assert eng.stats().orphan_lost == 1
        assert probe.count("start") == 1


async def test_a_timeout_orphan_is_not_run_again_by_a_same_turn_retry() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("book", SE, timeout=1.0), scripted(probe, "book", 1.5, result="BK-7"))
    ctx = Context()
    async with engine(reg, clock) as eng:
        first = [call("t1.0", "book", slot="x")]
        _turn(ctx, first)
        ex = await eng.execute(first, 1, CancelToken())
        assert kind(ex.results[0]) == "timeout"
        ex.append_to(ctx)
        retry = [call("t1.1", "book", slot="x")]  # the model was told not to, but does
        ctx.push_assistant(tool_calls=retry)
        ex = await eng.execute(retry, 1, CancelToken())
        assert kind(ex.results[0]) == "duplicate_call"
        ex.append_to(ctx)
        await clock.sleep(1.0)
        retry2 = [call("t1.2", "book", slot="x")]
        ctx.push_assistant(tool_calls=retry2)
        ex = await eng.execute(retry2, 1, CancelToken())
        assert ex.results[0].content == "BK-7"
        ex.append_to(ctx)
        ctx.validate()
        assert probe.count("start") == 1


async def test_other_arguments_an_expired_window_a_disabled_window_and_a_delivered_result_are_not_suppressed() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=1.0), clock) as eng:
        (await _interrupted_at(clock, eng, [call("t1.0", "book", slot="a")], 1, 0.5)).mark_delivered()
        ex = await eng.execute([call("t2.0", "book", slot="b")], 2, CancelToken())  # other arguments
        ex.mark_delivered()
        assert kind(ex.results[0]) is None
        await clock.sleep(121.0)  # past the 120 s window
        eng.take_late_notes()
        ex = await eng.execute([call("t3.0", "book", slot="a")], 3, CancelToken())
        ex.mark_delivered()
        assert kind(ex.results[0]) is None
        # a delivered result is not an orphan: a later turn runs it again
        ex = await eng.execute([call("t4.0", "book", slot="a")], 4, CancelToken())
        ex.mark_delivered()
        assert kind(ex.results[0]) is None
        assert probe.count("start") == 4
    probe2 = Probe(clock)
    async with engine(_reg(probe2, delay=1.0), clock, orphan_window=0.0) as eng:
        (await _interrupted_at(clock, eng, [call("t1.0", "book", slot="a")], 1, 0.5)).mark_delivered()
        await clock.sleep(1.0)
        ex = await eng.execute([call("t2.0", "book", slot="a")], 2, CancelToken())
        ex.mark_delivered()
        assert kind(ex.results[0]) is None
        assert probe2.count("start") == 2


async def test_a_dropped_execute_makes_an_orphan_answered_from_the_record() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=1.0), clock) as eng:
        task = asyncio.get_running_loop().create_task(eng.execute([call("t1.0", "book", slot="a")], 1, CancelToken()))
        await clock.sleep(0.3)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await clock.sleep(1.0)
        ex = await eng.execute([call("t2.0", "book", slot="a")], 2, CancelToken())
        assert json.loads(ex.results[0].content) == {"booking": "BK-1"}
        ex.mark_delivered()
        assert probe.count("start") == 1
        assert eng.take_late_notes() == []


async def test_a_side_effect_result_in_a_discarded_execution_is_noted_and_not_run_again() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    async with engine(_reg(probe, delay=0.2), clock) as eng:
        first = [call("t1.0", "book", slot="a")]
        _turn(ctx, first)
        ex = await eng.execute(first, 1, CancelToken())
        assert not ex.results[0].is_error
        ex.discard()  # the barge-in came right after execute returned
        ctx.interrupt_pending_tool_calls()
        regen = [call("t2.0", "book", slot="a")]
        _turn(ctx, regen)
        ex2 = await eng.execute(regen, 2, CancelToken())
        assert json.loads(ex2.results[0].content) == {"booking": "BK-1"}
        assert ex2.late_notes == ()
        ex2.append_to(ctx)
        ctx.validate()
        assert probe.count("start") == 1
        texts = [m for m in ctx if isinstance(m, SystemMessage)]
        assert texts == []  # the result is in the context once: the replay


async def test_a_replay_dropped_with_its_round_keeps_the_orphan_and_its_note() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=1.0), clock) as eng:
        (await _interrupted_at(clock, eng, [call("t1.0", "book", slot="a")], 1, 0.5)).mark_delivered()
        await clock.sleep(1.0)
        # the replay answers at once, but its round is dropped next to a slow sibling
        task = asyncio.get_running_loop().create_task(
            eng.execute([call("t2.0", "book", slot="a"), call("t2.1", "slow_look")], 2, CancelToken())
        )
        await clock.sleep(0.5)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        # and one in a discarded execution
        ex = await eng.execute([call("t3.0", "book", slot="a")], 3, CancelToken())
        assert json.loads(ex.results[0].content) == {"booking": "BK-1"}
        ex.discard()
        ex = await eng.execute([call("t4.0", "book", slot="a")], 4, CancelToken())
        assert json.loads(ex.results[0].content) == {"booking": "BK-1"}
        ex.mark_delivered()
        assert probe.count("start", "book") == 1
        assert eng.take_late_notes() == []


async def test_a_replayed_result_delivered_in_a_turn_makes_a_later_identical_call_of_that_turn_a_repeat() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=1.0), clock) as eng:
        (await _interrupted_at(clock, eng, [call("t1.0", "book", slot="a")], 1, 0.5)).mark_delivered()
        await clock.sleep(1.0)
        ex = await eng.execute([call("t2.0", "book", slot="a")], 2, CancelToken())
        ex.mark_delivered()
        ex = await eng.execute([call("t2.1", "book", slot="a")], 2, CancelToken())
        ex.mark_delivered()
        assert kind(ex.results[0]) == "already_done"
        assert probe.count("start") == 1


async def test_notes_taken_by_a_discarded_execution_go_back_to_the_mailbox() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=1.0), clock) as eng:
        (await _interrupted_at(clock, eng, [call("t1.0", "book", slot="a")], 1, 0.5)).mark_delivered()
        await clock.sleep(1.0)
        ex = await eng.execute([call("t2.0", "look")], 2, CancelToken())
        assert len(ex.late_notes) == 1
        ex.discard()
        assert [n.call_id for n in eng.take_late_notes()] == ["t1.0"]


async def test_an_execution_dropped_without_delivery_is_discarded_by_the_safety_net() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=0.1), clock) as eng:
        ex = await eng.execute([call("t1.0", "book", slot="a")], 1, CancelToken())
        del ex
        gc.collect()
        assert [n.call_id for n in eng.take_late_notes()] == ["t1.0"]


async def test_identical_calls_of_one_regenerated_response_do_not_share_one_orphan() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=1.0), clock) as eng:
        (await _interrupted_at(clock, eng, [call("t1.0", "book", slot="a")], 1, 0.5)).mark_delivered()
        await clock.sleep(1.0)
        ex = await eng.execute([call("t2.0", "book", slot="a"), call("t2.1", "book", slot="a")], 2, CancelToken())
        ex.mark_delivered()
        assert json.loads(ex.results[0].content) == {"booking": "BK-1"}
        assert kind(ex.results[1]) is None  # the second is a call of its own
        assert probe.count("start") == 2


async def test_a_replay_of_the_call_id_that_received_an_orphans_result_answers_the_same() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=1.0), clock) as eng:
        (await _interrupted_at(clock, eng, [call("t1.0", "book", slot="a")], 1, 0.5)).mark_delivered()
        await clock.sleep(1.0)
        regen = [call("t2.0", "book", slot="a")]
        first = await eng.execute(regen, 2, CancelToken())
        first.mark_delivered()
        again = await eng.execute(regen, 2, CancelToken())
        again.mark_delivered()
        assert again.results == first.results
        assert json.loads(again.results[0].content) == {"booking": "BK-1"}
        assert probe.count("start") == 1
