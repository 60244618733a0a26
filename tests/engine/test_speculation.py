"""Speculative starts (EngineConfig.speculation): simulated calls on virtual time."""

from __future__ import annotations

import json

from brisvox.agent.context import ToolMessage
from brisvox.agent.tools import ToolKind, ToolSpec
from brisvox.agent.turn import FixedSilence
from brisvox.core.clock import SimClock
from brisvox.core.timeline import TurnEvent
from brisvox.engine import EngineConfig, LlmConfig, SpeculationMode
from brisvox.providers.llm import LlmRequest
from brisvox.sim import Call, Say, ScenarioBuilder, ScriptedLlm
from brisvox.sim.mock_llm import Step
from tests.engine.harness import OBJ, Counter, SimResult, registry, simulate

SPECULATE = EngineConfig(turn=FixedSilence(silence=1.0), speculation=SpeculationMode.AT_PAUSE)
BOOK = ToolSpec(name="book_table", description="Book a table.", parameters=OBJ, kind=ToolKind.SIDE_EFFECT)
LOOKUP = ToolSpec(name="check_availability", description="Free tables on a day.", parameters=OBJ)


def turn_ended(result: SimResult) -> float:
    ended = result.report.timeline[0].at(TurnEvent.USER_TURN_ENDED)
    assert ended is not None
    return ended


def one_request() -> ScenarioBuilder:
    return ScenarioBuilder().pause(0.5).say("book a table on friday").pause(5.0)


async def test_a_speculation_the_caller_talks_past_is_dropped_and_its_booking_never_runs() -> None:
    clock = SimClock()
    book = Counter(clock, answer={"booked": True})
    llm = ScriptedLlm(clock, [
        [Call(name="book_table", arguments={"day": "friday"})],  # speculative, at the first pause
        [Call(name="book_table", arguments={"day": "saturday"})],  # speculative, on all the words
        [Say("Saturday is booked.")],
    ])
    scenario = (ScenarioBuilder().pause(0.5).say("book a table on friday").pause(0.6).say("no make it saturday")
                .pause(5.0).build())
    result = await simulate(clock, scenario, llm, config=SPECULATE, tools=registry(book=(BOOK, book)))
    assert book.calls == [{"day": "saturday"}]  # the friday booking was held, then dropped
    assert result.report.speculations == 2 and result.report.speculations_committed == 1
    results = [m for m in result.report.context.messages if isinstance(m, ToolMessage)]
    assert len(results) == 1 and json.loads(results[0].content) == {"booked": True}
    assert book.started[0] >= scenario.utterances[1].end  # it ran only once the turn was final


async def test_a_committed_speculation_books_once_after_the_turn_ends_and_its_result_reaches_the_context_once() -> None:
    clock = SimClock()
    book = Counter(clock, answer={"booked": True})
    llm = ScriptedLlm(clock, [[Call(name="book_table", arguments={"day": "friday"})], [Say("Friday is booked.")]])
    scenario = one_request().build()
    result = await simulate(clock, scenario, llm, config=SPECULATE, tools=registry(book=(BOOK, book)))
    assert book.calls == [{"day": "friday"}]
    turn_end = turn_ended(result)
    assert book.started[0] >= turn_end  # held until the commit
    assert result.report.speculations_committed == 1
    results = [m for m in result.report.context.messages if isinstance(m, ToolMessage)]
    assert len(results) == 1
    assert len(llm.requests) == 2  # the speculative request was the turn's first round


async def test_a_read_only_lookup_runs_during_the_pause_and_its_result_is_reused_at_the_commit() -> None:
    clock = SimClock()
    lookup = Counter(clock, seconds=0.3)
    llm = ScriptedLlm(clock, [[Call(name="check_availability", arguments={"day": "friday"})], [Say("Friday is free.")]])
    scenario = one_request().build()
    result = await simulate(clock, scenario, llm, config=SPECULATE, tools=registry(lookup=(LOOKUP, lookup)))
    turn_end = turn_ended(result)
    assert len(lookup.calls) == 1 and lookup.started[0] < turn_end  # ran before the turn was final, once
    assert len(llm.requests) == 2
    texts = [getattr(m, "text", "") for m in result.report.context.messages]
    assert texts[-1] == "Friday is free."


async def test_speculation_is_off_by_default_and_the_model_is_asked_only_at_the_end_of_the_turn() -> None:
    clock = SimClock()
    lookup = Counter(clock, seconds=0.3)
    llm = ScriptedLlm(clock, [[Call(name="check_availability", arguments={"day": "friday"})], [Say("Friday is free.")]])
    scenario = one_request().build()
    assert EngineConfig().speculation is SpeculationMode.OFF
    config = EngineConfig(turn=FixedSilence(silence=1.0))
    result = await simulate(clock, scenario, llm, config=config, tools=registry(lookup=(LOOKUP, lookup)))
    turn_end = turn_ended(result)
    assert result.report.speculations == 0
    assert len(lookup.calls) == 1 and lookup.started[0] >= turn_end


async def test_a_speculative_answer_is_not_spoken_before_the_turn_ends() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [[Say("Sure, which time on Friday?")]])
    scenario = one_request().build()
    result = await simulate(clock, scenario, llm, config=SPECULATE)
    turn_end = turn_ended(result)
    audio = result.audio_at()
    assert audio and audio[0][0] >= turn_end
    assert result.report.speculations_committed == 1 and len(llm.requests) == 1


class PrefillingLlm(ScriptedLlm):
    """A scripted model with a prompt cache (``PrefixWarm``): it records what was prefilled, and when."""

    def __init__(self, clock: SimClock, script: list[list[Step]]) -> None:
        super().__init__(clock, script)
        self.prefilled: list[tuple[float, LlmRequest]] = []

    async def warm_prefix(self, request: LlmRequest) -> None:
        raise AssertionError("the engine never warms the prefix; the server does")

    async def prefill(self, request: LlmRequest) -> bool:
        self.prefilled.append((self._clock.now(), request))
        return True


async def test_with_speculation_off_a_prompt_caching_model_gets_the_callers_words_at_the_pause() -> None:
    # The local model evaluates the caller's words while the turn's end is decided, so the
    # turn's request evaluates only what changed (docs/DEMO.md, "The local LLM's time").
    clock = SimClock()
    llm = PrefillingLlm(clock, [[Say("Friday is free.")]])
    config = EngineConfig(turn=FixedSilence(silence=1.0), llm=LlmConfig(system_prompt="You book tables."))
    result = await simulate(clock, one_request().build(), llm, config=config)
    assert result.report.speculations == 0 and len(llm.requests) == 1
    assert len(llm.prefilled) == 1
    at, prefilled = llm.prefilled[0]
    assert at < turn_ended(result)
    # The very messages the turn's request then sends (the system prompt, the date, the words).
    assert prefilled.messages == llm.requests[0].messages
