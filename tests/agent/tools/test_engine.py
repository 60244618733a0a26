"""Rounds, validation, ReadOnly semantics, the retry budget and the call cap."""

from __future__ import annotations

from brisvox.agent.assemble import ResponseAssembler, ToolCallDelta
from brisvox.agent.context import Context
from brisvox.agent.tools.cancel import CancelToken
from brisvox.agent.tools.registry import ToolRegistry
from brisvox.core.clock import SimClock

from ._helpers import RO, SE, Probe, body, call, engine, kind, scripted, spec


def _registry(probe: Probe) -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(spec("a"), scripted(probe, "a", 0.1))
    reg.register(spec("b"), scripted(probe, "b", 0.1))
    reg.register(spec("slow"), scripted(probe, "slow", 0.3))
    reg.register(
        spec(
            "typed",
            params={
                "type": "object",
                "properties": {"n": {"type": "integer"}},
                "required": ["n"],
                "additionalProperties": False,
            },
        ),
        scripted(probe, "typed", 0.0),
    )
    return reg


async def test_independent_calls_run_in_parallel_100_ms_plus_100_ms_is_100_ms() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_registry(probe), clock) as eng:
        t0 = clock.now()
        ex = await eng.execute([call("t1.0", "a"), call("t1.1", "b")], 1, CancelToken())
        assert clock.now() - t0 == 0.1
        assert probe.times("start") == [t0, t0]
        ex.mark_delivered()


async def test_results_are_in_issue_order_when_completion_order_is_reversed() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_registry(probe), clock) as eng:
        ex = await eng.execute([call("t1.0", "slow"), call("t1.1", "a")], 1, CancelToken())
        assert [m.call_id for m in ex.results] == ["t1.0", "t1.1"]
        assert [e[1] for e in probe.events if e[0] == "end"] == ["a", "slow"]
        ctx = Context()
        ctx.push_assistant(tool_calls=[call("t1.0", "slow"), call("t1.1", "a")])
        ex.append_to(ctx)
        ctx.validate()
        assert ex.is_delivered


async def test_a_read_only_timeout_drops_the_call_at_exactly_its_timeout() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("hang", timeout=0.5), scripted(probe, "hang", 10.0))
    async with engine(reg, clock) as eng:
        ex = await eng.execute([call("t1.0", "hang")], 1, CancelToken())
        assert clock.now() == 0.5
        assert kind(ex.results[0]) == "timeout"
        assert probe.count("cancelled") == 1 and probe.count("end") == 0
        ex.mark_delivered()


async def test_a_failing_tool_is_answered_tool_failed_with_its_message() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("f"), scripted(probe, "f", 0.0, fail="no such order"))
    async with engine(reg, clock) as eng:
        ex = await eng.execute([call("t1.0", "f")], 1, CancelToken())
        assert kind(ex.results[0]) == "tool_failed"
        assert body(ex.results[0])["detail"] == "no such order"
        ex.mark_delivered()


async def test_a_crashing_read_only_tool_is_tool_failed_next_to_answered_siblings() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("ok"), scripted(probe, "ok", 0.1))
    reg.register(spec("boom"), scripted(probe, "boom", 0.05, crash=True))
    reg.register(spec("boom_at_call"), scripted(probe, "boom_at_call", crash_at_call=True))
    async with engine(reg, clock) as eng:
        ex = await eng.execute(
            [call("t1.0", "boom"), call("t1.1", "ok"), call("t1.2", "boom_at_call")], 1, CancelToken()
        )
        k = [kind(m) for m in ex.results]
        assert k == ["tool_failed", None, "tool_failed"]
        assert "crashed" in body(ex.results[0])["detail"]
        assert "+90" not in ex.results[0].content
        ex.mark_delivered()


async def test_unknown_tools_and_invalid_arguments_are_answered_with_their_error_kinds() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_registry(probe), clock) as eng:
        ex = await eng.execute(
            [
                call("t1.0", "nope"),
                call("t1.1", "typed", n="x", extra=1),
                call("t1.2", "typed"),
                call("t1.3", "typed", n=3),
            ],
            1,
            CancelToken(),
        )
        assert [kind(m) for m in ex.results] == ["unknown_tool", "invalid_arguments", "invalid_arguments", None]
        issues = body(ex.results[1])["issues"]
        assert {i["path"] for i in issues} == {"/n", "(root)"}
        assert body(ex.results[1])["truncated"] is False
        assert body(ex.results[2])["issues"][0]["path"] == "(root)"
        assert probe.count("start", "typed") == 1
        ex.mark_delivered()


async def test_an_invalid_call_from_the_assembler_is_answered_and_its_valid_sibling_runs() -> None:
    clock = SimClock()
    probe = Probe(clock)
    ctx = Context()
    asm = ResponseAssembler()
    asm.push(ToolCallDelta(index=0, name="a", arguments_fragment="{broken"))
    asm.push(ToolCallDelta(index=1, name="b", arguments_fragment="{}"))
    response = asm.finish(1, ctx)
    msg = response.assistant_message()
    assert msg is not None
    ctx.push(msg)
    async with engine(_registry(probe), clock) as eng:
        ex = await eng.execute(response.calls, 1, CancelToken())
        assert [kind(m) for m in ex.results] == ["invalid_tool_call", None]
        assert eng.invalid_rounds(1) == 1
        ex.append_to(ctx)
        ctx.validate()


async def test_the_argument_cap_runs_exactly_at_the_cap_and_refuses_one_byte_over() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("echo"), scripted(probe, "echo", 0.0, result="ok"))
    reg.register(
        spec("uniq", params={"type": "object", "properties": {"xs": {"type": "array", "uniqueItems": True}}}),
        scripted(probe, "uniq", 0.0, result="ok"),
    )
    cap = 100
    overhead = len('{"s":""}')
    async with engine(reg, clock, max_argument_bytes=cap) as eng:
        at = call("t1.0", "echo", s="x" * (cap - overhead))
        over = call("t1.1", "echo", s="x" * (cap - overhead + 1))
        multibyte_over = call("t1.2", "echo", s="é" * ((cap - overhead) // 2 + 1))
        ex = await eng.execute([at, over, multibyte_over], 1, CancelToken())
        assert [kind(m) for m in ex.results] == [None, "arguments_too_large", "arguments_too_large"]
        ex.mark_delivered()
    async with engine(reg, clock) as eng:
        big = call("t2.0", "uniq", xs=list(range(40_000)))  # about 200 KiB
        ex = await eng.execute([big], 2, CancelToken())
        assert kind(ex.results[0]) == "arguments_too_large"
        assert probe.count("start", "uniq") == 0
        ex.mark_delivered()


async def test_calls_past_the_cap_of_32_are_answered_too_many_calls() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_registry(probe), clock) as eng:
        calls = [call(f"t1.{i}", "a") for i in range(34)]
        ex = await eng.execute(calls, 1, CancelToken())
        kinds = [kind(m) for m in ex.results]
        assert kinds[:32] == [None] * 32 and kinds[32:] == ["too_many_calls"] * 2
        assert probe.count("start") == 32
        ex.mark_delivered()


async def test_the_retry_budget_is_exhausted_after_two_malformed_rounds_and_never_refunded() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_registry(probe), clock) as eng:
        ex = await eng.execute([call("t1.0", "typed", n="bad")], 1, CancelToken())
        assert eng.invalid_rounds(1) == 1 and not ex.budget_exhausted
        ex.mark_delivered()
        ex = await eng.execute([call("t1.1", "a")], 1, CancelToken())  # valid: no refund
        assert eng.invalid_rounds(1) == 1 and kind(ex.results[0]) is None
        ex.mark_delivered()
        ex = await eng.execute([call("t1.2", "nope")], 1, CancelToken())
        assert eng.invalid_rounds(1) == 2 and not ex.budget_exhausted
        ex.mark_delivered()
        ex = await eng.execute([call("t1.3", "a"), call("t1.4", "nope")], 1, CancelToken())
        assert ex.budget_exhausted
        assert [kind(m) for m in ex.results] == ["budget_exhausted", "budget_exhausted"]
        ex.mark_delivered()
        runs = probe.count("start")
        ex = await eng.execute([call("t1.5", "a")], 1, CancelToken())  # every later round too
        assert ex.budget_exhausted and kind(ex.results[0]) == "budget_exhausted"
        assert probe.count("start") == runs
        ex.mark_delivered()
        ex = await eng.execute([call("t2.0", "a")], 2, CancelToken())  # the next turn's own budget
        assert not ex.budget_exhausted and kind(ex.results[0]) is None
        assert eng.invalid_rounds(2) == 0
        ex.mark_delivered()


async def test_a_superseded_turn_is_stale_and_neither_resets_nor_spends_the_current_budget() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_registry(probe), clock) as eng:
        ex = await eng.execute([call("t2.0", "nope")], 2, CancelToken())
        ex.mark_delivered()
        assert eng.invalid_rounds(2) == 1
        ex = await eng.execute([call("t1.0", "a"), call("t1.1", "nope")], 1, CancelToken())
        assert [kind(m) for m in ex.results] == ["stale_turn", "stale_turn"]
        assert probe.count("start") == 0
        assert eng.invalid_rounds(2) == 1
        ex.mark_delivered()


async def test_a_turn_without_tool_calls_is_not_seen() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_registry(probe), clock) as eng:
        ex = await eng.execute([], 5, CancelToken())
        assert ex.results == ()
        ex.mark_delivered()
        ex = await eng.execute([call("t3.0", "a")], 3, CancelToken())
        assert kind(ex.results[0]) is None
        ex.mark_delivered()


async def test_a_cancelled_token_answers_not_started_calls_interrupted_for_both_kinds() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = _registry(probe)
    reg.register(spec("book", SE), scripted(probe, "book", 0.1))
    async with engine(reg, clock) as eng:
        token = CancelToken()
        token.cancel()
        ex = await eng.execute([call("t1.0", "a"), call("t1.1", "book")], 1, token)
        assert [kind(m) for m in ex.results] == ["interrupted", "interrupted"]
        assert probe.count("start") == 0
        assert eng.stats().not_started_cancelled == 2
        ex.mark_delivered()


async def test_a_read_only_call_is_dropped_when_the_token_fires_and_counted() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_registry(probe), clock) as eng:
        token = CancelToken()

        async def barge_in() -> None:
            await clock.sleep(0.05)
            token.cancel()

        import asyncio

        task = asyncio.get_running_loop().create_task(barge_in())
        ex = await eng.execute([call("t1.0", "slow")], 1, token)
        await task
        assert clock.now() == 0.05
        assert kind(ex.results[0]) == "interrupted"
        assert probe.count("cancelled") == 1
        assert eng.stats().read_only_cancelled == 1
        ex.mark_delivered()


async def test_a_dropped_execute_future_cancels_read_only_calls_and_counts_them() -> None:
    import asyncio

    clock = SimClock()
    probe = Probe(clock)
    async with engine(_registry(probe), clock) as eng:
        task = asyncio.get_running_loop().create_task(eng.execute([call("t1.0", "slow")], 1, CancelToken()))
        await clock.sleep(0.1)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        assert probe.count("cancelled") == 1
        assert eng.stats().read_only_cancelled == 1


async def test_tools_receive_session_epoch_call_and_the_turns_own_token() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_registry(probe), clock) as eng:
        token = CancelToken()
        ex = await eng.execute([call("t4.2", "a", q=1)], 4, token)
        ex.mark_delivered()
        (ctx,) = probe.contexts
        assert (ctx.session, ctx.epoch, ctx.call.id, ctx.call.arguments) == ("sess-1", 4, "t4.2", {"q": 1})
        assert ctx.cancel is token
        assert ctx.idempotency_key().call_id == "t4.2"


async def test_a_read_only_result_over_the_limit_is_result_too_large_and_exactly_at_it_passes() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("at"), scripted(probe, "at", result="é" * 5))  # 10 bytes
    reg.register(spec("over"), scripted(probe, "over", result="é" * 5 + "x"))
    reg.register(spec("json_at"), scripted(probe, "json_at", result={"k": "123"}))  # {"k":"123"} = 11 bytes
    async with engine(reg, clock, max_result_bytes=10) as eng:
        ex = await eng.execute([call("t1.0", "at"), call("t1.1", "over"), call("t1.2", "json_at")], 1, CancelToken())
        assert ex.results[0].content == "é" * 5 and not ex.results[0].is_error
        assert kind(ex.results[1]) == "result_too_large"
        assert kind(ex.results[2]) == "result_too_large"
        ex.mark_delivered()


async def test_engine_results_are_kind_error_messages_bounded_for_a_long_tool_name() -> None:
    clock = SimClock()
    probe = Probe(clock)
    async with engine(_registry(probe), clock) as eng:
        long_name = "n" * 300
        ex = await eng.execute([call("t1.0", long_name)], 1, CancelToken())
        b = body(ex.results[0])
        assert len(b["tool"].encode()) <= 64 and len(b["detail"].encode()) <= 512
        ex.mark_delivered()


_ = RO


async def test_arguments_that_are_not_an_object_are_invalid_arguments() -> None:
    from brisvox.agent.context import ToolCall

    clock = SimClock()
    probe = Probe(clock)
    async with engine(_registry(probe), clock) as eng:
        bad = ToolCall(id="t1.0", name="a", arguments=[1, 2])  # type: ignore[arg-type]
        ex = await eng.execute([bad], 1, CancelToken())
        assert kind(ex.results[0]) == "invalid_arguments" and probe.count("start") == 0
        ex.mark_delivered()


async def test_append_to_is_all_or_nothing_and_leaves_the_execution_pending_on_error() -> None:
    import pytest

    from brisvox.agent.context import ContextError

    clock = SimClock()
    probe = Probe(clock)
    async with engine(_registry(probe), clock) as eng:
        calls = [call("t1.0", "a"), call("t1.1", "b")]
        ex = await eng.execute(calls, 1, CancelToken())
        ctx = Context()
        ctx.push_assistant(tool_calls=calls[:1])  # the second call is missing from the context
        with pytest.raises(ContextError):
            ex.append_to(ctx)
        assert len(ctx) == 1 and not ex.is_delivered
        ex.discard()


async def test_a_tools_value_reaches_the_model_as_compact_json() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    value = {"free": True, "date": "2026-12-05", "alternatives": ["18:00", "21:00"], "note": "çok iyi"}
    reg.register(spec("look"), scripted(probe, "look", result=value))
    async with engine(reg, clock) as eng:
        ex = await eng.execute([call("t1.0", "look")], 1, CancelToken())
        assert ex.results[0].content == '{"free":true,"date":"2026-12-05","alternatives":["18:00","21:00"],"note":"çok iyi"}'
        ex.mark_delivered()
