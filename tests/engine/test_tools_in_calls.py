"""Tool scenarios through the production stages (simulated calls on virtual time)."""

from __future__ import annotations

import json

import pytest

from brisvox.agent.context import AssistantMessage, ToolMessage
from brisvox.agent.tools import ToolKind, ToolSpec
from brisvox.core.clock import SimClock
from brisvox.core.tasks import live_tasks, wait_for_task_baseline
from brisvox.sim import Call, Interleave, Say, ScenarioBuilder, ScriptedLlm
from tests.engine.harness import OBJ, SEEDS, Counter, llm_latency, registry, simulate, tts_config


@pytest.mark.parametrize("seed", SEEDS)
async def test_three_parallel_lookups_run_and_their_results_follow_the_call_order(seed: int) -> None:
    clock = SimClock()
    baseline = live_tasks()
    lookup = Counter(clock, seconds=0.2)
    reg = registry(lookup=(ToolSpec(name="check_availability", description="Free tables on a day.", parameters=OBJ), lookup))
    days = ["friday", "saturday", "sunday"]
    script = [
        [Say("Let me look. "), Interleave(tuple(Call(name="check_availability", arguments={"day": d}) for d in days))],
        [Say("All three days are free.")],
    ]
    llm = ScriptedLlm(clock, script, latency=llm_latency(seed))
    scenario = ScenarioBuilder().pause(0.5).say("any table this weekend").pause(4.0).build()
    result = await simulate(clock, scenario, llm, tools=reg, tts=tts_config(seed))
    msgs = result.report.context.messages
    kinds = [type(m).__name__ for m in msgs[1:]]
    assert kinds == ["UserMessage", "AssistantMessage", "ToolMessage", "ToolMessage", "ToolMessage", "AssistantMessage"]
    call_msg = msgs[2]
    assert isinstance(call_msg, AssistantMessage)
    ids = [c.id for c in call_msg.tool_calls]
    assert ids == ["t0.0", "t0.1", "t0.2"]
    results = [m for m in msgs if isinstance(m, ToolMessage)]
    assert [m.call_id for m in results] == ids
    assert [json.loads(m.content)["day"] for m in results] == days
    assert sorted(c["day"] for c in lookup.calls) == sorted(days)
    # The second request carried the three results in call order.
    second = llm.requests[1].messages
    assert [m.call_id for m in second if isinstance(m, ToolMessage)] == ids
    await wait_for_task_baseline(clock, baseline)


@pytest.mark.parametrize("seed", SEEDS)
async def test_a_booking_repeated_in_a_later_response_of_the_same_turn_runs_once(seed: int) -> None:
    clock = SimClock()
    book = Counter(clock, answer={"booked": True})
    spec = ToolSpec(name="book_table", description="Book a table.", parameters=OBJ, kind=ToolKind.SIDE_EFFECT)
    reg = registry(book=(spec, book))
    call = Call(name="book_table", arguments={"day": "friday"})
    llm = ScriptedLlm(clock, [[call], [call], [Say("You are booked for Friday.")]], latency=llm_latency(seed))
    scenario = ScenarioBuilder().pause(0.5).say("book friday").pause(4.0).build()
    result = await simulate(clock, scenario, llm, tools=reg, tts=tts_config(seed))
    assert len(book.calls) == 1
    results = [m for m in result.report.context.messages if isinstance(m, ToolMessage)]
    assert len(results) == 2
    assert "already_done" in results[1].content
    assert not results[0].is_error


@pytest.mark.parametrize("seed", SEEDS)
async def test_a_barge_in_during_a_slow_booking_never_books_twice_and_its_result_arrives_once(seed: int) -> None:
    clock = SimClock()
    baseline = live_tasks()
    book = Counter(clock, seconds=5.0, answer={"booked": True, "table": 7})
    spec = ToolSpec(name="book_table", description="Book a table.", parameters=OBJ, kind=ToolKind.SIDE_EFFECT, timeout=10.0)
    reg = registry(book=(spec, book))
    call = Call(name="book_table", arguments={"day": "friday"})
    script = [
        [Say("Booking it now, this takes a moment. "), call],
        [call],  # the regenerated response after the barge-in repeats the identical call
        [Say("Done, table seven.")],
        [Say("Anything else?")],
    ]
    llm = ScriptedLlm(clock, script, latency=llm_latency(seed))
    scenario = (
        ScenarioBuilder().pause(0.5).say("book friday").pause(2.5).say("are you still there").pause(8.0).build()
    )
    result = await simulate(clock, scenario, llm, tools=reg, tts=tts_config(seed))
    assert len(book.calls) == 1, "the booking ran twice"
    msgs = result.report.context.messages
    result.report.context.validate()

    def body(m: object) -> str:
        return (getattr(m, "content", "") or getattr(m, "text", "") or "").replace(" ", "")

    # The booking's result reaches the context exactly once (as the late note).
    assert sum('"table":7' in body(m) for m in msgs) == 1
    regenerated = [m for m in msgs if isinstance(m, ToolMessage) and "duplicate_call" in m.content]
    assert len(regenerated) == 1
    assert result.report.interrupts == 1
    await wait_for_task_baseline(clock, baseline)


@pytest.mark.parametrize("seed", SEEDS)
async def test_a_chain_of_two_rounds_feeds_the_first_result_into_the_second_call(seed: int) -> None:
    clock = SimClock()
    lookup = Counter(clock, answer={"free": ["19:00", "20:00"]})
    book = Counter(clock, answer={"booked": "19:00"})
    reg = registry(
        lookup=(ToolSpec(name="check_availability", description="Free times.", parameters=OBJ), lookup),
        book=(
            ToolSpec(name="book_table", description="Book.", parameters=OBJ, kind=ToolKind.SIDE_EFFECT),
            book,
        ),
    )
    script = [
        [Call(name="check_availability", arguments={"day": "friday"})],
        [Call(name="book_table", arguments={"day": "friday"})],
        [Say("Booked at seven.")],
    ]
    llm = ScriptedLlm(clock, script, latency=llm_latency(seed))
    scenario = ScenarioBuilder().pause(0.5).say("book the first free time friday").pause(4.0).build()
    result = await simulate(clock, scenario, llm, tools=reg, tts=tts_config(seed))
    assert (len(lookup.calls), len(book.calls)) == (1, 1)
    assert len(llm.requests) == 3
    assert any(isinstance(m, ToolMessage) and "19:00" in m.content for m in llm.requests[1].messages)
    last = result.report.context.messages[-1]
    assert isinstance(last, AssistantMessage) and last.text == "Booked at seven."


@pytest.mark.parametrize("seed", SEEDS)
async def test_an_invalid_argument_is_answered_with_a_structured_error_and_the_model_retries(seed: int) -> None:
    clock = SimClock()
    lookup = Counter(clock)
    reg = registry(lookup=(ToolSpec(name="check_availability", description="Free times.", parameters=OBJ), lookup))
    script = [
        [Call(name="check_availability", arguments={"date": "friday"})],  # "day" is required
        [Call(name="check_availability", arguments={"day": "friday"})],
        [Say("Friday is free.")],
    ]
    llm = ScriptedLlm(clock, script, latency=llm_latency(seed))
    scenario = ScenarioBuilder().pause(0.5).say("is friday free").pause(4.0).build()
    result = await simulate(clock, scenario, llm, tools=reg, tts=tts_config(seed))
    results = [m for m in result.report.context.messages if isinstance(m, ToolMessage)]
    assert results[0].is_error and json.loads(results[0].content)["error"] == "invalid_arguments"
    assert not results[1].is_error
    assert len(lookup.calls) == 1


async def test_a_model_that_keeps_calling_tools_is_stopped_after_six_rounds_with_the_fallback_line() -> None:
    clock = SimClock()
    lookup = Counter(clock)
    reg = registry(lookup=(ToolSpec(name="check_availability", description="Free times.", parameters=OBJ), lookup))
    llm = ScriptedLlm(clock, lambda request: [Call(name="check_availability", arguments={"day": "friday"})])
    scenario = ScenarioBuilder().pause(0.5).say("is friday free").pause(4.0).build()
    result = await simulate(clock, scenario, llm, tools=reg)
    assert len(llm.requests) == 6
    last = result.report.context.messages[-1]
    assert isinstance(last, AssistantMessage) and "trouble" in last.text
    result.report.context.validate()


@pytest.mark.parametrize("seed", SEEDS)
async def test_a_slow_lookup_gets_a_filler_after_exactly_its_delay_then_the_answer(seed: int) -> None:
    from brisvox.agent.tools import DEFAULT_FILLER_TEXT
    from brisvox.core.timeline import TurnEvent

    clock = SimClock()
    lookup = Counter(clock, seconds=3.0, answer={"sky": "sunny"})
    reg = registry(lookup=(ToolSpec(name="get_weather", description="Weather.", parameters=OBJ, timeout=10.0), lookup))
    script = [[Call(name="get_weather", arguments={"day": "izmir"})], [Say("It is sunny in Izmir.")]]
    llm = ScriptedLlm(clock, script, latency=llm_latency(seed))
    scenario = ScenarioBuilder().pause(0.5).say("weather in izmir").pause(7.0).build()
    result = await simulate(clock, scenario, llm, tools=reg, tts=tts_config(seed))
    record = result.report.timeline[0]
    at = record.at(TurnEvent.FILLER_STARTED)
    assert at is not None and at - lookup.started[0] == pytest.approx(1.2, abs=1e-9)
    texts = [m.text for m in result.report.context.messages if isinstance(m, AssistantMessage) and m.text]
    assert texts == [DEFAULT_FILLER_TEXT, "It is sunny in Izmir."]
    result.report.context.validate()
