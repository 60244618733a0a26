"""Fillers in a call: the tool round raced against the filler timer (virtual time, exact times)."""

from __future__ import annotations

import pytest

from brisvox.agent.context import AssistantMessage, ToolMessage
from brisvox.agent.played import CUT_MARKER
from brisvox.agent.tools import DEFAULT_FILLER_TEXT, FillerConfig, FillerPolicy, ToolKind, ToolSpec
from brisvox.agent.tools.filler import DEFAULT_MODEL_FILLER_DELAY
from brisvox.agent.turn import FixedSilence
from brisvox.core.clock import SimClock
from brisvox.core.tasks import live_tasks, wait_for_task_baseline
from brisvox.core.timeline import TurnEvent
from brisvox.engine import EngineConfig, LlmConfig
from brisvox.sim import Call, LatencyProfile, MockTtsConfig, Say, ScenarioBuilder, ScriptedLlm
from tests.engine.harness import OBJ, Counter, SimResult, registry, simulate

WEATHER = ToolSpec(name="get_weather", description="The weather on a day.", parameters=OBJ, timeout=10.0)
ANSWER = "It will be sunny."


def filler_at(result: SimResult, epoch: int = 0) -> float | None:
    record = next(r for r in result.report.timeline if r.epoch == epoch)
    return record.at(TurnEvent.FILLER_STARTED)


def assistant_texts(result: SimResult) -> list[str]:
    return [m.text for m in result.report.context.messages if isinstance(m, AssistantMessage) and m.text]


async def weather_call(
    seconds: float,
    *,
    spec: ToolSpec = WEATHER,
    config: EngineConfig | None = None,
    pause: float = 6.0,
    then: tuple[str, float] | None = None,
    tts: MockTtsConfig | None = None,
    filler: FillerPolicy | None = None,
    answers: int = 1,
) -> tuple[SimResult, Counter, ScriptedLlm]:
    clock = SimClock()
    tool = Counter(clock, seconds=seconds, answer={"sky": "sunny"})
    script = [[Call(name="get_weather", arguments={"day": "friday"})], [Say(ANSWER)]]
    script += [[Say("You are welcome.")] for _ in range(answers)]
    llm = ScriptedLlm(clock, script)
    builder = ScenarioBuilder().pause(0.5).say("what is the weather on friday").pause(pause)
    if then is not None:
        builder = builder.say(then[0]).pause(then[1])
    result = await simulate(
        clock, builder.build(), llm, tools=registry(w=(spec, tool)), config=config, tts=tts, filler=filler
    )
    return result, tool, llm


async def test_a_slow_tool_gets_the_filler_at_exactly_the_default_delay_and_not_before() -> None:
    baseline = live_tasks()
    result, tool, _ = await weather_call(3.0)
    assert result.report.fillers == 1
    at = filler_at(result)
    assert at is not None
    assert at - tool.started[0] == pytest.approx(1.2, abs=1e-9)
    # Nothing reached the caller between the tool's start and the filler (the call had no text).
    audio = [t for t, _ in result.audio_at()]
    assert min(audio) >= at
    assert DEFAULT_FILLER_TEXT in assistant_texts(result)
    result.report.context.validate()
    await wait_for_task_baseline(SimClock(), baseline)


async def test_a_tool_that_answers_before_the_delay_gets_no_filler() -> None:
    result, _, _ = await weather_call(1.1)
    assert result.report.fillers == 0
    assert filler_at(result) is None
    assert assistant_texts(result) == [ANSWER]


async def test_fillers_rotate_their_phrases_one_per_slow_round() -> None:
    clock = SimClock()
    tool = Counter(clock, seconds=2.0, answer={"sky": "sunny"})
    call = Call(name="get_weather", arguments={"day": "friday"})
    llm = ScriptedLlm(clock, [[call], [Say("Sunny.")], [call], [Say("Still sunny.")]])
    scenario = (
        ScenarioBuilder().pause(0.5).say("weather on friday").pause(6.0).say("and again").pause(6.0).build()
    )
    policy = FillerPolicy().with_phrases(["One moment.", "Just a second."])
    result = await simulate(clock, scenario, llm, tools=registry(w=(WEATHER, tool)), filler=policy)
    assert result.report.fillers == 2
    assert assistant_texts(result) == ["One moment.", "Sunny.", "Just a second.", "Still sunny."]


async def test_a_disabled_filler_config_speaks_no_filler_and_per_tool_uses_the_tools_delay() -> None:
    off = EngineConfig(turn=FixedSilence(silence=0.5), llm=LlmConfig(filler=FillerConfig.OFF))
    result, _, _ = await weather_call(3.0, config=off)
    assert result.report.fillers == 0
    # A tool that opts out (filler_after=None) gets none under the default policy either.
    result, _, _ = await weather_call(3.0, spec=WEATHER.with_filler_after(None))
    assert result.report.fillers == 0
    per_tool = EngineConfig(turn=FixedSilence(silence=0.5), llm=LlmConfig(filler=FillerConfig.PER_TOOL))
    result, tool, _ = await weather_call(3.0, config=per_tool, spec=WEATHER.with_filler_after(0.4))
    at = filler_at(result)
    assert at is not None and at - tool.started[0] == pytest.approx(0.4, abs=1e-9)


async def test_the_filler_enters_the_context_after_the_results_and_before_the_answer() -> None:
    result, _, llm = await weather_call(3.0, then=("thanks", 3.0))
    msgs = result.report.context.messages
    kinds = [type(m).__name__ for m in msgs[1:]]
    assert kinds == [
        "UserMessage",
        "AssistantMessage",  # the call
        "ToolMessage",
        "AssistantMessage",  # the filler, heard in full
        "AssistantMessage",  # the answer
        "UserMessage",
        "AssistantMessage",
    ]
    assert isinstance(msgs[3], ToolMessage)
    assert msgs[4].text == DEFAULT_FILLER_TEXT  # type: ignore[union-attr]
    assert msgs[5].text == ANSWER  # type: ignore[union-attr]
    # The request that produced the answer was built without the filler; the next one has it.
    assert not any(getattr(m, "text", None) == DEFAULT_FILLER_TEXT for m in llm.requests[1].messages)
    assert any(getattr(m, "text", None) == DEFAULT_FILLER_TEXT for m in llm.requests[2].messages)
    assert result.report.fillers_in_context == 1
    result.report.context.validate()


async def test_a_filler_cut_by_a_barge_in_stays_in_the_context_as_its_heard_prefix() -> None:
    baseline = live_tasks()
    # The tool starts about 0.5 s after the speech ends; the filler 1.2 s later; the caller
    # talks over it 0.7 s into the phrase.
    result, tool, _ = await weather_call(5.0, pause=2.4, then=("no wait", 4.0))
    assert result.report.interrupts == 1
    assert result.report.fillers == 1
    texts = [t.removesuffix(CUT_MARKER) for t in assistant_texts(result)]
    heard = [t for t in texts if DEFAULT_FILLER_TEXT.startswith(t) and t != DEFAULT_FILLER_TEXT]
    assert heard == ["One moment,"]
    assert len(tool.calls) == 1
    msgs = result.report.context.messages
    interrupted = [m for m in msgs if isinstance(m, ToolMessage) and "interrupted" in m.content]
    assert len(interrupted) == 1
    # The filler sits after the interrupted result and before the caller's next words.
    i = next(i for i, m in enumerate(msgs) if getattr(m, "text", None) == "One moment," + CUT_MARKER)
    assert isinstance(msgs[i - 1], ToolMessage)
    assert getattr(msgs[i + 1], "text", None) == "no wait"
    result.report.context.validate()
    await wait_for_task_baseline(SimClock(), baseline)


async def test_a_filler_that_was_never_heard_is_removed_from_the_context() -> None:
    # The TTS takes a second to start each utterance: the barge-in comes before any filler audio.
    slow_tts = MockTtsConfig(latency=LatencyProfile(first_event=1.0))
    result, _, _ = await weather_call(5.0, pause=2.0, then=("no wait", 4.0), tts=slow_tts)
    assert result.report.interrupts == 1
    assert result.report.fillers == 1
    assert not any(DEFAULT_FILLER_TEXT.startswith(t) for t in assistant_texts(result))
    result.report.context.validate()


async def test_a_barge_in_before_the_delay_speaks_no_filler() -> None:
    result, tool, _ = await weather_call(5.0, pause=1.0, then=("no wait", 4.0))
    assert result.report.interrupts == 1
    assert result.report.fillers == 0
    assert filler_at(result) is None
    assert len(tool.calls) == 1
    result.report.context.validate()


async def test_a_side_effect_booking_finishing_while_the_filler_plays_is_answered_once() -> None:
    book = ToolSpec(name="get_weather", description="Book.", parameters=OBJ, kind=ToolKind.SIDE_EFFECT, timeout=10.0)
    result, tool, _ = await weather_call(1.5, spec=book)
    assert result.report.fillers == 1
    assert len(tool.calls) == 1
    results = [m for m in result.report.context.messages if isinstance(m, ToolMessage)]
    assert len(results) == 1 and not results[0].is_error
    result.report.context.validate()


async def slow_model_call(
    tool_seconds: float, latency: LatencyProfile, first: tuple[Say, ...] = (), *, filler: FillerPolicy | None = None,
    spec: ToolSpec = WEATHER, calls: int = 1,
) -> tuple[SimResult, Counter]:
    """A weather call by a model that streams at ``latency``: ``first`` text, the call (``calls``
    rounds of it), then the answer."""
    clock = SimClock()
    tool = Counter(clock, seconds=tool_seconds, answer={"sky": "sunny"})
    call = Call(name="get_weather", arguments={"day": "friday"})
    script = [[*first, call], *([call] for _ in range(calls - 1)), [Say(ANSWER)]]
    llm = ScriptedLlm(clock, script, latency=latency)
    scenario = ScenarioBuilder().pause(0.5).say("what is the weather on friday").pause(25.0).build()
    return await simulate(clock, scenario, llm, tools=registry(w=(spec, tool)), filler=filler), tool


async def test_a_round_that_only_writes_a_slow_call_gets_the_model_filler_while_it_writes() -> None:
    # A local model writes the call's name at once, then its arguments token by token: the
    # caller would hear nothing for the whole round, the quick tool (no tool filler) and the
    # next round's first token.  The model filler bounds that silence from the turn's end.
    result, tool = await slow_model_call(0.1, LatencyProfile(first_event=0.3, per_event=1.0))
    assert result.report.fillers == 1
    at = filler_at(result)
    record = next(r for r in result.report.timeline if r.epoch == 0)
    request, first = record.at(TurnEvent.LLM_REQUEST), record.at(TurnEvent.LLM_FIRST_TOKEN)
    assert at is not None and request is not None and first is not None
    assert first < request + DEFAULT_MODEL_FILLER_DELAY  # the call's name came in time ...
    assert at == pytest.approx(request + DEFAULT_MODEL_FILLER_DELAY, abs=0.01)  # ... its arguments did not
    assert tool.started and at < tool.started[0]
    assert assistant_texts(result) == [DEFAULT_FILLER_TEXT, ANSWER]
    result.report.context.validate()


async def test_a_round_after_a_quick_call_and_tool_fills_at_once_when_the_silence_already_passed_the_delay() -> None:
    # Each step is under its own delay (the call's round 1.8 s, the tool 1.0 s), but the caller
    # has heard nothing for 2.8 s when the second round starts: its filler does not wait again.
    result, tool = await slow_model_call(1.0, LatencyProfile(first_event=0.9, per_event=0.3))
    assert result.report.fillers == 1
    at = filler_at(result)
    assert at is not None and tool.started and at == pytest.approx(tool.started[0] + 1.0, abs=0.01)
    assert assistant_texts(result) == [DEFAULT_FILLER_TEXT, ANSWER]


async def test_a_round_that_spoke_keeps_its_own_model_delay_for_the_next_round() -> None:
    result, _ = await slow_model_call(0.1, LatencyProfile(first_event=0.3, per_event=1.0), (Say("Let me check."),))
    assert result.report.fillers == 0
    assert assistant_texts(result) == ["Let me check.", ANSWER]


def request_and_first_token(result: SimResult) -> tuple[float, float]:
    record = next(r for r in result.report.timeline if r.epoch == 0)
    request, first = record.at(TurnEvent.LLM_REQUEST), record.at(TurnEvent.LLM_FIRST_TOKEN)
    assert request is not None and first is not None
    return request, first


async def test_a_turn_of_several_slow_rounds_and_slow_tools_hears_the_filler_once() -> None:
    # Three rounds with a late first token and two slow tools: each would fill on its own;
    # the caller heard the same phrase three times in one turn before (docs/DEMO.md).
    result, tool = await slow_model_call(2.0, LatencyProfile(first_event=2.5, per_event=0.1), calls=2)
    assert len(tool.started) == 2
    assert result.report.fillers == 1
    assert assistant_texts(result) == [DEFAULT_FILLER_TEXT, ANSWER]
    result.report.context.validate()


async def test_a_call_round_acknowledges_at_its_first_event_with_at_call() -> None:
    # The call's name comes at 0.3 s, its arguments take seconds more (a local model writing
    # the call): with at_call the filler starts at the name, not at the model delay.
    result, tool = await slow_model_call(0.1, LatencyProfile(first_event=0.3, per_event=1.0),
                                         filler=FillerPolicy().with_at_call())
    assert result.report.fillers == 1
    at = filler_at(result)
    _, first = request_and_first_token(result)
    assert at == pytest.approx(first, abs=1e-9)
    assert tool.started and at < tool.started[0]
    assert assistant_texts(result) == [DEFAULT_FILLER_TEXT, ANSWER]
    result.report.context.validate()


async def test_at_call_says_nothing_extra_in_a_text_round_or_for_a_tool_without_fillers() -> None:
    policy = FillerPolicy().with_at_call()
    result, _ = await slow_model_call(0.1, LatencyProfile(first_event=0.3, per_event=0.3), (Say("Let me check."),),
                                      filler=policy)
    assert result.report.fillers == 0
    assert assistant_texts(result) == ["Let me check.", ANSWER]
    # A tool that opts out keeps the model delay only: its round wrote the call within 2 s.
    result, _ = await slow_model_call(0.1, LatencyProfile(first_event=0.3, per_event=0.3), filler=policy,
                                      spec=WEATHER.with_filler_after(None))
    assert result.report.fillers == 0
