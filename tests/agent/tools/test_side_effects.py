"""SideEffect calls: own tasks, timeouts, interruption, the backstop, the store, late notes, repeats."""

from __future__ import annotations

import asyncio
import json

from brisvox.agent.context import Context, SystemMessage
from brisvox.agent.tools.cancel import CancelToken
from brisvox.agent.tools.registry import ToolRegistry
from brisvox.agent.tools.results import TRUNCATION_MARKER
from brisvox.agent.tools.store import IdempotencyKey, fnv1a64
from brisvox.core.clock import SimClock
from brisvox.core.tasks import live_tasks

from ._helpers import RO, SE, Probe, body, call, engine, kind, scripted, spec


def _reg(probe: Probe, delay: float = 0.1, timeout: float = 5.0, **kw: object) -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(spec("book", SE, timeout=timeout, **kw), scripted(probe, "book", delay))
    reg.register(spec("look", RO), scripted(probe, "look", 0.05))
    return reg


def _ctx_with(calls: list) -> Context:  # type: ignore[type-arg]
    ctx = Context()
    ctx.push_user("hi")
    ctx.push_assistant(tool_calls=calls)
    return ctx


async def test_a_side_effect_call_runs_once_and_its_result_is_answered_in_its_slot() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe), clock) as eng:
        calls = [call("t1.0", "book", slot="7pm")]
        ctx = _ctx_with(calls)
        ex = await eng.execute(calls, 1, CancelToken())
        assert clock.now() == 0.1
        assert body(ex.results[0])["args"] == {"slot": "7pm"}
        ex.append_to(ctx)
        ctx.validate()
        assert eng.idempotency_usage().entries == 1


async def test_a_replay_of_the_same_call_id_returns_the_recorded_result_without_running() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe), clock) as eng:
        c = call("t1.0", "book", slot="7pm")
        first = await eng.execute([c], 1, CancelToken())
        first.mark_delivered()
        again = await eng.execute([c], 1, CancelToken())
        again.mark_delivered()
        assert again.results == first.results
        assert probe.count("start") == 1
        assert eng.stats().side_effect_replays == 1


async def test_the_same_call_id_twice_in_one_response_runs_once() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe), clock) as eng:
        c = call("t1.0", "book", slot="7pm")
        ex = await eng.execute([c, c], 1, CancelToken())
        assert [kind(m) for m in ex.results] == [None, "duplicate_call"]
        assert probe.count("start") == 1
        ex.mark_delivered()


async def test_a_side_effect_past_its_timeout_keeps_running_and_its_result_comes_as_a_late_note() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=5.1, timeout=5.0), clock) as eng:
        calls = [call("t1.0", "book", slot="7pm")]
        ctx = _ctx_with(calls)
        ex = await eng.execute(calls, 1, CancelToken())
        assert clock.now() == 5.0
        assert kind(ex.results[0]) == "timeout"
        assert "keeps running" in body(ex.results[0])["detail"]
        ex.append_to(ctx)
        await clock.sleep(0.2)
        assert probe.count("end") == 1 and probe.times("end") == [5.1]
        notes = eng.take_late_notes()
        assert [n.call_id for n in notes] == ["t1.0"]
        assert json.loads(notes[0].content)["args"] == {"slot": "7pm"}
        for n in notes:
            ctx.push(n.message())
        ctx.validate()
        # recorded: a replay of the call returns the result, and it did not run twice
        again = await eng.execute(calls, 1, CancelToken())
        again.mark_delivered()
        assert not again.results[0].is_error and probe.count("start") == 1
        assert eng.stats().side_effect_late_results == 1


async def test_an_interrupted_side_effect_answers_at_once_completes_and_is_noted_once() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=2.0), clock) as eng:
        token = CancelToken()
        calls = [call("t1.0", "book", slot="7pm")]
        ctx = _ctx_with(calls)

        async def barge() -> None:
            await clock.sleep(0.5)
            token.cancel()

        t = asyncio.get_running_loop().create_task(barge())
        ex = await eng.execute(calls, 1, token)
        await t
        assert clock.now() == 0.5
        assert kind(ex.results[0]) == "interrupted"
        ex.append_to(ctx)
        assert eng.stats().side_effect_interrupted == 1
        await clock.sleep(2.0)
        assert probe.count("end") == 1 and probe.count("cancelled") == 0
        # the next execute carries the note after its own results
        nxt = [call("t2.0", "look")]
        ctx.push_user("and?")
        ctx.push_assistant(tool_calls=nxt)
        ex2 = await eng.execute(nxt, 2, CancelToken())
        assert [n.call_id for n in ex2.late_notes] == ["t1.0"]
        ex2.append_to(ctx)
        assert isinstance(ctx[-1], SystemMessage) and "t1.0" in ctx[-1].text
        ctx.validate()
        assert eng.take_late_notes() == []


async def test_a_dropped_execute_future_does_not_drop_the_side_effect_and_it_is_noted() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=1.0), clock) as eng:
        task = asyncio.get_running_loop().create_task(
            eng.execute([call("t1.0", "book", slot="x")], 1, CancelToken())
        )
        await clock.sleep(0.2)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await clock.sleep(1.0)
        assert probe.count("end") == 1
        assert [n.call_id for n in eng.take_late_notes()] == ["t1.0"]
        assert eng.idempotency_usage().entries == 1  # recorded, not stuck in flight
        again = await eng.execute([call("t1.0", "book", slot="x")], 1, CancelToken())
        again.mark_delivered()
        assert not again.results[0].is_error and probe.count("start") == 1


async def test_a_result_read_into_a_slot_of_a_dropped_round_comes_back_as_a_note() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = _reg(probe, delay=0.1)
    reg.register(spec("slow_look", RO), scripted(probe, "slow_look", 3.0))
    async with engine(reg, clock) as eng:
        task = asyncio.get_running_loop().create_task(
            eng.execute([call("t1.0", "book", slot="x"), call("t1.1", "slow_look")], 1, CancelToken())
        )
        await clock.sleep(1.0)  # the booking answered its slot; the lookup still runs
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        notes = eng.take_late_notes()
        assert [n.call_id for n in notes] == ["t1.0"]


async def test_a_result_sent_before_the_dropped_execute_read_it_is_noted() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=0.1), clock) as eng:
        task = asyncio.get_running_loop().create_task(
            eng.execute([call("t1.0", "book", slot="x")], 1, CancelToken())
        )
        await clock.sleep(0.05)
        waiter = eng._recent[-1].waiter
        assert waiter is not None
        # Drop the execute future in the same instant the result is sent, before the slot reads it.
        waiter.add_done_callback(lambda _: task.cancel())
        await asyncio.gather(task, return_exceptions=True)
        assert task.cancelled()
        assert [n.call_id for n in eng.take_late_notes()] == ["t1.0"]


async def test_a_hung_side_effect_is_dropped_at_the_backstop_recorded_lost_and_never_rerun() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=1000.0, timeout=1.0), clock) as eng:
        calls = [call("t1.0", "book", slot="x")]
        ex = await eng.execute(calls, 1, CancelToken())
        ex.mark_delivered()
        assert kind(ex.results[0]) == "timeout"
        await clock.sleep(200.0)
        assert probe.times("cancelled") == [120.0]
        (note,) = eng.take_late_notes()
        assert json.loads(note.content)["error"] == "unknown_outcome"
        assert eng.running_side_effects() == 0
        again = await eng.execute(calls, 1, CancelToken())
        again.mark_delivered()
        assert kind(again.results[0]) == "unknown_outcome" and probe.count("start") == 1


async def test_the_backstop_is_raised_to_a_tools_own_longer_timeout() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=150.0, timeout=200.0), clock, max_side_effect_runtime=10.0) as eng:
        ex = await eng.execute([call("t1.0", "book")], 1, CancelToken())
        ex.mark_delivered()
        assert clock.now() == 150.0 and not ex.results[0].is_error


async def test_closing_the_engine_aborts_running_side_effects_and_records_them_lost() -> None:
    clock = SimClock()
    probe = Probe(clock)
    baseline = live_tasks()
    eng = engine(_reg(probe, delay=50.0, timeout=1.0), clock)
    ex = await eng.execute([call("t1.0", "book")], 1, CancelToken())
    ex.mark_delivered()
    assert eng.running_side_effects() == 1
    await eng.aclose()
    assert probe.count("cancelled") == 1
    assert live_tasks() == baseline
    key = IdempotencyKey("sess-1", 1, "t1.0")
    entry = eng._store.get(key)
    assert entry is not None and entry.state.value == "lost"


async def test_a_crashing_side_effect_is_lost_and_never_run_again() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("charge", SE), scripted(probe, "charge", 0.1, crash=True))
    async with engine(reg, clock) as eng:
        c = call("t1.0", "charge", amount=5)
        ex = await eng.execute([c], 1, CancelToken())
        ex.mark_delivered()
        assert kind(ex.results[0]) == "unknown_outcome"
        again = await eng.execute([c], 1, CancelToken())
        again.mark_delivered()
        assert kind(again.results[0]) == "unknown_outcome" and probe.count("start") == 1


async def test_a_failing_side_effect_is_recorded_like_a_success_and_not_retried_for_that_call() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("charge", SE), scripted(probe, "charge", 0.1, fail="card declined"))
    async with engine(reg, clock) as eng:
        c = call("t1.0", "charge", amount=5)
        ex = await eng.execute([c], 1, CancelToken())
        ex.mark_delivered()
        again = await eng.execute([c], 1, CancelToken())
        again.mark_delivered()
        assert kind(again.results[0]) == "tool_failed"
        assert body(again.results[0])["detail"] == "card declined"
        assert probe.count("start") == 1


async def test_a_side_effect_result_over_the_limit_is_cut_with_the_marker_and_recorded() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("book", SE), scripted(probe, "book", 0.0, result="ab" + "é" * 10))  # 22 bytes
    reg.register(spec("exact", SE), scripted(probe, "exact", 0.0, result="x" * 20))
    async with engine(reg, clock, max_result_bytes=20) as eng:
        ex = await eng.execute([call("t1.0", "book"), call("t1.1", "exact")], 1, CancelToken())
        ex.mark_delivered()
        cut = ex.results[0].content
        assert cut.endswith(TRUNCATION_MARKER) and not ex.results[0].is_error
        assert len(cut.encode()) <= 20
        assert cut == "ab" + "é" * 2 + TRUNCATION_MARKER  # 2 + 4 + 14 = 20 bytes, no split character
        assert ex.results[1].content == "x" * 20
        again = await eng.execute([call("t1.0", "book")], 1, CancelToken())
        again.mark_delivered()
        assert again.results[0].content == cut


async def test_store_evicts_the_oldest_settled_entry_by_count() -> None:
    clock = SimClock()
    probe = Probe(clock)
    # repeatable: the retry below would otherwise be refused as a repeat within the turn
    async with engine(_reg(probe, delay=0.0, repeatable=True), clock, idempotency_capacity=2) as eng:
        for i in range(3):
            ex = await eng.execute([call(f"t1.{i}", "book", n=i)], 1, CancelToken())
            ex.mark_delivered()
        assert eng.idempotency_usage().entries == 2
        # the evicted first key runs again (a retry of an old response)
        ex = await eng.execute([call("t1.0", "book", n=0)], 1, CancelToken())
        ex.mark_delivered()
        assert probe.count("start") == 4


async def test_store_evicts_by_bytes_and_raises_the_byte_budget_to_one_result() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("book", SE), scripted(probe, "book", 0.0, result="y" * 10))
    async with engine(reg, clock, idempotency_max_bytes=1, max_result_bytes=10) as eng:
        for i in range(3):
            ex = await eng.execute([call(f"t1.{i}", "book", n=i)], 1, CancelToken())
            ex.mark_delivered()
        assert eng.idempotency_usage() == type(eng.idempotency_usage())(entries=1, bytes=10)
    async with engine(reg, clock, idempotency_max_bytes=25, max_result_bytes=10) as eng:
        for i in range(3):
            ex = await eng.execute([call(f"t2.{i}", "book", n=i)], 2, CancelToken())
            ex.mark_delivered()
        assert eng.idempotency_usage().entries == 2 and eng.idempotency_usage().bytes == 20


async def test_in_flight_entries_are_never_evicted_and_a_full_store_answers_store_full() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=10.0, timeout=0.1), clock, idempotency_capacity=0) as eng:
        ex = await eng.execute([call("t1.0", "book", n=0)], 1, CancelToken())
        ex.mark_delivered()
        ex = await eng.execute([call("t1.1", "book", n=1)], 1, CancelToken())
        ex.mark_delivered()
        assert kind(ex.results[0]) == "store_full"
        assert probe.count("start") == 1
        await clock.sleep(10.0)
        eng.take_late_notes()
        ex = await eng.execute([call("t1.2", "book", n=2)], 1, CancelToken())
        ex.mark_delivered()
        assert kind(ex.results[0]) == "timeout"  # it started: the settled entry made room
        assert probe.count("start") == 2


async def test_the_idempotency_digest_is_pinned_and_depends_on_every_part() -> None:
    key = IdempotencyKey("sess-1", 3, "t3.0")
    assert key.digest() == IdempotencyKey("sess-1", 3, "t3.0").digest()
    assert key.hex() == f"{key.digest():016x}"
    assert key.digest() == 0x5D1D2A08858D89BB  # FNV-1a 64 of "sess-1\0" "3\0" "t3.0"
    assert fnv1a64(b"a") == 0xAF63DC4C8601EC8C  # the published FNV-1a test vector
    others = {IdempotencyKey("sess-2", 3, "t3.0"), IdempotencyKey("sess-1", 4, "t3.0"), IdempotencyKey("sess-1", 3, "t3.1")}
    assert all(o.digest() != key.digest() for o in others)


async def test_late_notes_keep_64_in_the_mailbox_and_count_the_65th() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_reg(probe, delay=1.0, timeout=0.5), clock) as eng:
        batches = [range(0, 32), range(32, 64), range(64, 65)]
        executions = await asyncio.gather(
            *(eng.execute([call(f"t1.{i}", "book", n=i) for i in b], 1, CancelToken()) for b in batches)
        )
        for ex in executions:
            assert ex.late_notes == ()
            ex.mark_delivered()
        await clock.sleep(2.0)
        assert eng.late_notes_dropped() == 1
        assert len(eng.take_late_notes()) == 64


async def test_every_result_is_answered_or_noted_exactly_once_when_tools_finish_at_their_timeout() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    for i in range(8):
        reg.register(spec(f"s{i}", SE, timeout=1.0), scripted(probe, f"s{i}", 1.0))
    async with engine(reg, clock) as eng:
        calls = [call(f"t1.{i}", f"s{i}") for i in range(8)]
        ex = await eng.execute(calls, 1, CancelToken())
        ex.mark_delivered()
        await clock.sleep(0.5)
        later = [n.call_id for n in ex.late_notes] + [n.call_id for n in eng.take_late_notes()]
        noted = set(later)
        assert len(later) == len(noted)
        answered = {m.call_id for m in ex.results if not m.is_error}
        assert answered | noted == {c.id for c in calls}
        assert not (answered & noted)


_ = RO


async def test_json_results_exactly_at_the_limit_pass_for_both_kinds_and_a_json_side_effect_is_cut() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    value = {"k": "é" * 4}  # {"k": "éééé"}: 9 ASCII bytes + 8 = 17 bytes
    limit = len(json.dumps(value, ensure_ascii=False).encode())
    reg.register(spec("ro_at", RO), scripted(probe, "ro_at", result=value))
    reg.register(spec("se_at", SE), scripted(probe, "se_at", result=value))
    reg.register(spec("se_over", SE), scripted(probe, "se_over", result={"k": "é" * 5}))
    async with engine(reg, clock, max_result_bytes=limit) as eng:
        ex = await eng.execute([call("t1.0", "ro_at"), call("t1.1", "se_at"), call("t1.2", "se_over")], 1, CancelToken())
        ex.mark_delivered()
        assert [json.loads(m.content) for m in ex.results[:2]] == [value, value]
        cut = ex.results[2].content
        assert not ex.results[2].is_error and cut.endswith(TRUNCATION_MARKER)
        assert cut == '{"k' + TRUNCATION_MARKER and len(cut.encode()) == limit
