from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from brisvox.agent.context import AssistantMessage, SystemMessage, UserMessage
from brisvox.agent.played import CUT_MARKER
from brisvox.agent.tools.filler import DEFAULT_FILLER_TEXT, DEFAULT_MODEL_FILLER_DELAY, FillerConfig
from brisvox.agent.turn import FixedSilence
from brisvox.core.clock import SimClock
from brisvox.core.errors import ConfigError
from brisvox.core.frames import BusyStage, ReplyMode, TurnEndReason
from brisvox.core.tasks import live_tasks, wait_for_task_baseline
from brisvox.core.timeline import TurnEvent as E
from brisvox.engine import CallObserver, EngineConfig, EngineEvent, LlmConfig
from brisvox.engine.config import DEFAULT_FALLBACK_LINE
from brisvox.engine.events import BotText, EngineFailure, ModelBusy, UserTurn
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.stt import SttConfig, SttError, SttEvent, Transcript
from brisvox.sim import MockStt, MockSttConfig, MockTtsConfig, Say, ScenarioBuilder, ScriptedLlm
from brisvox.sim.latency import LatencyProfile
from brisvox.sim.mock_stt import MockSttSession
from tests.engine.harness import SEEDS, SimResult, llm_latency, simulate, tts_config


@pytest.mark.parametrize("seed", SEEDS)
async def test_a_plain_exchange_answers_the_caller_and_records_the_turn(seed: int) -> None:
    clock = SimClock()
    baseline = live_tasks()
    scenario = ScenarioBuilder().pause(0.5).say("book a table for two").pause(2.0).build()
    llm = ScriptedLlm(clock, [[Say("Sure, for what time?")]], latency=llm_latency(seed))
    result = await simulate(clock, scenario, llm, tts=tts_config(seed))
    messages = result.report.context.messages
    assert isinstance(messages[0], SystemMessage)
    assert [type(m) for m in messages[1:]] == [UserMessage, AssistantMessage]
    assert messages[1].text == "book a table for two"
    assert messages[2].text == "Sure, for what time?"
    audio = result.audio_at()
    assert audio, "the caller heard nothing"
    speech_end = scenario.utterances[0].end
    assert audio[0][0] > speech_end
    assert len(llm.requests) == 1
    await wait_for_task_baseline(clock, baseline)


async def test_the_caller_s_audio_is_heard_in_the_delivering_task_while_the_listen_stage_waits(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # The session's caller-audio sink hands each frame to the listen stage's hear_now: while the
    # stage's task waits, a frame costs it no wake-up; the call is answered as before.
    from brisvox.core.frames import InputAudioFrame
    from brisvox.engine.listen import ListenStage

    in_task = 0
    process = ListenStage.process

    async def counting(self: ListenStage, frame: Any, direction: Any, ctx: Any) -> None:
        nonlocal in_task
        in_task += isinstance(frame, InputAudioFrame)
        await process(self, frame, direction, ctx)

    monkeypatch.setattr(ListenStage, "process", counting)
    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("book a table for two").pause(2.0).build()
    llm = ScriptedLlm(clock, [[Say("Sure, for what time?")]], latency=llm_latency(SEEDS[0]))
    result = await simulate(clock, scenario, llm, tts=tts_config(SEEDS[0]))
    assert [m.text for m in result.report.context.messages[1:]] == ["book a table for two", "Sure, for what time?"]
    frames = len(list(scenario.frames(0.02)))
    assert in_task < frames / 10, f"{in_task} of {frames} frames woke the listen stage's task"


LONG = (
    "We have tables at six, seven and eight tonight, and on the terrace there is room for "
    "larger groups too, so tell me which time suits you best and how many people are coming."
)


@pytest.mark.parametrize("seed", SEEDS)
async def test_a_barge_in_clears_the_old_audio_and_the_context_keeps_only_the_heard_prefix(seed: int) -> None:
    clock = SimClock()
    baseline = live_tasks()
    scenario = (
        ScenarioBuilder().pause(0.5).say("what tables do you have").pause(2.5).say("seven please").pause(2.5).build()
    )
    llm = ScriptedLlm(clock, [[Say(LONG)], [Say("Seven it is.")]], latency=llm_latency(seed))
    result = await simulate(clock, scenario, llm, tts=tts_config(seed))
    barge = scenario.utterances[1].start
    clears = [t for t, epoch in result.clears() if epoch >= 1]
    assert clears, "no clear reached the caller"
    cleared_at = clears[0]
    assert barge < cleared_at < barge + 0.2
    stale_after_clear = [t for t, epoch in result.audio_at() if epoch < 1 and t > cleared_at]
    assert stale_after_clear == []
    messages = result.report.context.messages
    texts = [(type(m).__name__, m.text) for m in messages[1:]]  # type: ignore[union-attr]
    assert [k for k, _ in texts] == ["UserMessage", "AssistantMessage", "UserMessage", "AssistantMessage"]
    heard = texts[1][1].removesuffix(CUT_MARKER)
    assert heard and LONG.startswith(heard) and len(heard) < len(LONG)
    assert texts[2][1] == "seven please"
    assert texts[3][1] == "Seven it is."
    assert result.report.interrupts == 1
    # The second request saw only what the caller heard of the first answer.
    second = llm.requests[1].messages
    assert second[3].text == heard + CUT_MARKER  # type: ignore[union-attr]  # after the prompt and the date
    await wait_for_task_baseline(clock, baseline)


@pytest.mark.parametrize("seed", SEEDS)
async def test_a_model_that_never_answers_gets_the_fallback_line_at_the_first_token_deadline(seed: int) -> None:
    from brisvox.sim import Hang

    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("hello there").pause(1.0).build()
    llm = ScriptedLlm(clock, [[Hang()]], latency=llm_latency(seed))
    observer = CallObserver()
    result = await simulate(clock, scenario, llm, linger=16.0, tts=tts_config(seed), observer=observer)
    assert result.report.fallbacks == 1
    failures = [e for e in drain(observer) if isinstance(e, EngineFailure)]
    assert [(f.stage, f.fatal) for f in failures] == [("llm", False)]  # logged and counted, the call goes on
    filler, last = result.report.context.messages[-2:]
    # The silence is filled at the model filler delay; the fallback restates what was heard.
    assert isinstance(filler, AssistantMessage) and filler.text == DEFAULT_FILLER_TEXT
    assert result.report.fillers == 1
    assert isinstance(last, AssistantMessage) and last.text == LlmConfig().fallback_for("hello there")
    assert "I heard: hello there." in last.text
    audio = result.audio_at()
    assert audio
    turn_end = scenario.utterances[0].end + 0.5
    request = result.report.timeline[0].at(E.LLM_REQUEST)
    assert request is not None
    assert request + DEFAULT_MODEL_FILLER_DELAY <= audio[0][0] < turn_end + DEFAULT_MODEL_FILLER_DELAY + 0.5
    late = [t for t, _ in audio if t > turn_end + 5.0]
    assert late and late[0] >= request + 8.0  # the fallback: not before the first-token deadline


async def test_a_model_round_that_answers_before_the_filler_delay_gets_no_filler() -> None:
    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("hello there").pause(2.0).build()
    llm = ScriptedLlm(clock, [[Say("Hi!")]], latency=LatencyProfile(first_event=DEFAULT_MODEL_FILLER_DELAY - 0.3))
    result = await simulate(clock, scenario, llm, linger=4.0)
    assert result.report.fillers == 0
    assert [m.text for m in result.report.context.messages[1:]] == ["hello there", "Hi!"]  # type: ignore[union-attr]


async def test_a_slow_model_round_is_filled_and_the_answer_follows_it_in_the_context() -> None:
    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("hello there").pause(2.0).build()
    llm = ScriptedLlm(clock, [[Say("Hi!")]], latency=LatencyProfile(first_event=DEFAULT_MODEL_FILLER_DELAY + 1.0))
    result = await simulate(clock, scenario, llm, linger=6.0)
    assert result.report.fillers == 1
    assert [m.text for m in result.report.context.messages[1:]] == [  # type: ignore[union-attr]
        "hello there", DEFAULT_FILLER_TEXT, "Hi!"]


async def test_no_filler_fills_a_slow_model_round_when_model_delay_is_none() -> None:
    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("hello there").pause(2.0).build()
    llm = ScriptedLlm(clock, [[Say("Hi!")]], latency=LatencyProfile(first_event=DEFAULT_MODEL_FILLER_DELAY + 1.0))
    config = EngineConfig(turn=FixedSilence(silence=0.5), llm=LlmConfig(filler=FillerConfig(model_delay=None)))
    result = await simulate(clock, scenario, llm, linger=6.0, config=config)
    assert result.report.fillers == 0


class FixedVerdict:
    """An end-of-turn model that always answers the same after a fixed compute time."""

    def __init__(self, clock: SimClock, complete: bool, seconds: float = 0.1) -> None:
        self.clock, self.complete, self.seconds = clock, complete, seconds
        self.calls = 0
        self.samples: list[int] = []

    async def analyze(self, audio: object) -> object:
        from brisvox.inference.smart_turn import TurnVerdict

        self.calls += 1
        self.samples.append(len(audio))  # type: ignore[arg-type]
        await self.clock.sleep(self.seconds)
        return TurnVerdict(probability=1.0 if self.complete else 0.0, complete=self.complete)


async def test_an_end_of_turn_verdict_ends_an_adaptive_turn_before_the_fallback() -> None:
    from brisvox.agent.turn import Adaptive
    from brisvox.engine import EngineConfig

    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("two people at eight").pause(4.0).build()
    for complete, fast in ((True, True), (False, False)):
        model = FixedVerdict(clock, complete)
        llm = ScriptedLlm(clock, [[Say("Done.")]])
        result = await simulate(clock, scenario, llm, config=EngineConfig(turn=Adaptive()), end_of_turn=model)
        assert model.calls == 1
        assert 0 < model.samples[0] <= 8 * 16000
        first_audio = result.audio_at()[0][0]
        stop = scenario.utterances[0].end
        if fast:
            assert first_audio < stop + 0.5  # the verdict, 0.1 s after the stop
        else:
            assert first_audio >= stop + 2.9  # the 3 s fallback


async def test_the_timeline_orders_a_turns_steps_and_the_engine_adds_no_virtual_time() -> None:

    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("hi").pause(2.0).build()
    result = await simulate(clock, scenario, ScriptedLlm(clock, [[Say("Hello! How can I help?")]]))
    record = next(r for r in result.report.timeline if r.at(E.USER_TURN_ENDED) is not None)
    order = [E.USER_TURN_ENDED, E.LLM_REQUEST, E.LLM_FIRST_TOKEN, E.FIRST_TTS_TEXT, E.FIRST_TTS_AUDIO,
             E.FIRST_AUDIO_SENT, E.BOT_AUDIO_STARTED]
    times = [record.at(e) for e in order]
    assert None not in times
    assert times == sorted(times)  # type: ignore[type-var]
    # With instant mocks every engine hop is free on virtual time: the budgets are met exactly.
    assert record.between(E.USER_TURN_ENDED, E.LLM_REQUEST) == 0.0
    assert record.between(E.FIRST_TTS_AUDIO, E.FIRST_AUDIO_SENT) == 0.0
    assert record.llm_round_count() == 1


@pytest.mark.parametrize("seed", SEEDS)
async def test_a_tts_that_drops_mid_answer_is_reconnected_and_the_next_answer_is_spoken(seed: int) -> None:
    clock = SimClock()
    baseline = live_tasks()
    scenario = (
        ScenarioBuilder().pause(0.5).say("tell me everything").pause(6.0).say("and now").pause(3.0).build()
    )
    llm = ScriptedLlm(clock, [[Say(LONG)], [Say("Short.")]], latency=llm_latency(seed))
    result = await simulate(clock, scenario, llm, tts=tts_config(seed, disconnect_after=1.0))
    second_turn = scenario.utterances[1].end
    later_audio = [t for t, epoch in result.audio_at() if t > second_turn]
    assert later_audio, "nothing was spoken after the reconnect"
    first_answer = result.report.context.messages[2]
    assert isinstance(first_answer, AssistantMessage)
    heard = first_answer.text.removesuffix(CUT_MARKER)  # a cut reply is marked as cut for the model
    assert first_answer.text.endswith(CUT_MARKER) and heard and LONG.startswith(heard) and len(heard) < len(LONG)
    assert result.report.context.messages[-1].text == "Short."  # type: ignore[union-attr]
    await wait_for_task_baseline(clock, baseline)


async def test_a_backchannel_over_the_bot_does_not_interrupt_but_a_real_interruption_does() -> None:
    from brisvox.agent.interrupt import InterruptionPolicy
    from brisvox.agent.turn import FixedSilence
    from brisvox.engine import EngineConfig

    config = EngineConfig(turn=FixedSilence(silence=0.5), interruption=InterruptionPolicy.recommended())
    # The STT delivers interims promptly (every 50 ms), as the policy's caller contract asks.
    for words, seconds, interrupts in (("yeah", 0.25, 0), ("wait wait that is not what I asked", 2.0, 1)):
        clock = SimClock()
        scenario = (
            ScenarioBuilder()
            .pause(0.5)
            .say("what tables do you have")
            .pause(2.0)
            .say(words, duration=seconds)
            .pause(12.0)
            .build()
        )
        llm = ScriptedLlm(clock, [[Say(LONG)], [Say("Sorry, go ahead.")]])
        result = await simulate(clock, scenario, llm, config=config, interim_interval=0.05)
        assert result.report.interrupts == interrupts, words
        answer = result.report.context.messages[2]
        assert isinstance(answer, AssistantMessage)
        if interrupts:
            assert len(answer.text) < len(LONG)
        else:
            assert answer.text == LONG  # heard in full: not cut
            assert len(llm.requests) == 1


async def test_a_new_turn_after_the_answer_played_out_is_not_a_barge_in() -> None:
    # Regression: the transport never reported the last partial 100 ms of an utterance, so
    # the bot never "ended" and every later turn counted as an interruption.
    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("hello").pause(5.0).say("and another thing").pause(3.0).build()
    llm = ScriptedLlm(clock, [[Say("Shall I book a table for Friday?")], [Say("Sure.")]])
    result = await simulate(clock, scenario, llm)
    assert result.report.interrupts == 0
    assert result.report.context.messages[2].text == "Shall I book a table for Friday?"  # type: ignore[union-attr]


async def test_a_key_the_caller_presses_is_a_user_turn_of_its_own_and_is_answered() -> None:
    from brisvox.engine.driver import dtmf_text

    clock = SimClock()
    scenario = ScenarioBuilder().pause(4.0).build()
    llm = ScriptedLlm(clock, [[Say("You chose two.")]])
    result = await simulate(clock, scenario, llm, dtmf=((1.0, "2"),))
    texts = [getattr(m, "text", None) for m in result.report.context.messages[1:]]
    assert texts == [dtmf_text("2"), "You chose two."]
    assert result.report.interrupts == 0


async def test_keys_pressed_while_the_caller_speaks_join_that_turn() -> None:
    from brisvox.engine.driver import dtmf_text

    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("my pin is", duration=1.5).pause(3.0).build()
    llm = ScriptedLlm(clock, [[Say("Thanks.")]])
    result = await simulate(clock, scenario, llm, dtmf=((1.0, "7"),))
    user = result.report.context.messages[1]
    assert getattr(user, "text", None) == f"{dtmf_text('7')} my pin is"


async def test_a_text_only_typed_turn_is_shown_never_synthesized_and_the_context_keeps_all_of_it() -> None:
    clock = SimClock()
    scenario = ScenarioBuilder().pause(2.5).say("and on friday").pause(2.5).build()
    llm = ScriptedLlm(clock, [[Say(LONG)], [Say("Friday works.")]])
    observer = CallObserver()
    result = await simulate(clock, scenario, llm, observer=observer,
                            typed=((0.5, "what tables do you have", ReplyMode.TEXT),))
    texts = [getattr(m, "text", None) for m in result.report.context.messages[1:]]
    assert texts == ["what tables do you have", LONG, "and on friday", "Friday works."]  # LONG whole, never cut
    events = drain(observer)
    turns = {e.text: e.epoch for e in events if isinstance(e, UserTurn)}
    shown = [e for e in events if isinstance(e, BotText)]
    assert "".join(e.text for e in shown if e.reply is ReplyMode.TEXT) == LONG
    assert "".join(e.text for e in shown if e.reply is ReplyMode.SPOKEN) == "Friday works."
    assert result.tts is not None
    assert [t for s in result.tts.sessions for t in s.texts.values()] == ["Friday works."]  # only the spoken turn
    audio = result.audio_at()
    assert audio and {epoch for _, epoch in audio} == {turns["and on friday"]}  # none of the typed turn's
    assert result.report.interrupts == 0


async def test_a_text_only_message_typed_while_the_caller_speaks_joins_the_turn_and_the_answer_is_spoken() -> None:
    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("my pin is", duration=1.5).pause(3.0).build()
    llm = ScriptedLlm(clock, [[Say("Thanks.")]])
    result = await simulate(clock, scenario, llm, typed=((1.0, "1234", ReplyMode.TEXT),))
    assert getattr(result.report.context.messages[1], "text", None) == "1234 my pin is"
    assert result.tts is not None
    assert [t for s in result.tts.sessions for t in s.texts.values()] == ["Thanks."]
    assert result.audio_at()


async def test_the_stt_is_fed_at_its_own_rate_when_it_differs_from_the_calls() -> None:
    from brisvox.agent.turn import FixedSilence
    from brisvox.engine import EngineConfig
    from brisvox.sim import MockStt

    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("book a table for two").pause(2.0).build()
    stt = MockStt.for_scenario(clock, scenario)
    config = EngineConfig(turn=FixedSilence(silence=0.5), stt_rate=8000)
    result = await simulate(clock, scenario, ScriptedLlm(clock, [[Say("Sure.")]]), config=config, stt=stt)
    assert result.report.context.messages[1].text == "book a table for two"  # type: ignore[union-attr]
    # Half the bytes at half the rate: the STT heard the call's duration, not twice it.
    heard = stt.sessions[0].audio_seconds
    assert abs(heard - scenario.duration) < 0.05


async def _late_final_call(scenario: Any, llm: ScriptedLlm, clock: SimClock, latencies: tuple[float, ...] = (4.0,),
                           ) -> tuple[SimResult, list[EngineEvent]]:
    """The adaptive policy's 3 s fallback ends a turn 1 s before an STT final that takes 4 s."""
    from brisvox.agent.turn import Adaptive

    events: list[EngineEvent] = []
    stt = MockStt.for_scenario(clock, scenario, final_latencies=latencies)
    result = await simulate(clock, scenario, llm, config=EngineConfig(turn=Adaptive()), stt=stt,
                            observer=CallObserver(listener=events.append))
    return result, events


async def test_a_final_that_arrives_after_its_turn_ended_empty_completes_that_turn_not_a_typed_one() -> None:
    from brisvox.engine.events import TurnEnded

    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("book a table for two").pause(8.0).build()
    llm = ScriptedLlm(clock, [[Say("For what time?")]])
    result, events = await _late_final_call(scenario, llm, clock)
    users = [m.text for m in result.report.context.messages if isinstance(m, UserMessage)]
    assert users == ["book a table for two"]
    assert result.report.context.messages[-1].text == "For what time?"  # type: ignore[union-attr]
    assert len(llm.requests) == 1 and result.report.interrupts == 0
    answered = [e for e in events if isinstance(e, TurnEnded)][-1]
    # The caller spoke, the turn ended on silence: not a typed turn, and its latency counts from the speech.
    assert answered.reason is TurnEndReason.FALLBACK
    assert answered.speech_ended == pytest.approx(scenario.utterances[0].end, abs=0.2)


async def test_the_late_final_of_a_turn_that_ended_on_its_first_words_replaces_the_answer_to_them() -> None:
    clock = SimClock()
    # Two stretches of speech 1.5 s apart: the first final comes at once, the second one after
    # the fallback ended the turn on "book a table" alone.
    scenario = (ScenarioBuilder().pause(0.5).say("book a table", duration=1.0).pause(1.5)
                .say("for two at seven", duration=1.2).pause(10.0).build())
    llm = ScriptedLlm(clock, [[Say("For how many people, and when?")], [Say("Two at seven, let me check.")]],
                      latency=LatencyProfile(first_event=1.5))
    result, _ = await _late_final_call(scenario, llm, clock, (0.05, 4.0))
    users = [m.text for m in result.report.context.messages if isinstance(m, UserMessage)]
    assert users == ["book a table", "for two at seven"]  # the caller's request, whole
    assert result.report.context.messages[-1].text == "Two at seven, let me check."  # type: ignore[union-attr]
    # The answer to the first words had not started playing: it was dropped, not heard.
    said = [m.text for m in result.report.context.messages if isinstance(m, AssistantMessage)]
    assert said == ["Two at seven, let me check."]
    assert {epoch for _, epoch in result.audio_at()} == {1}


GREETING = "Hello, this is Lokanta Deniz. Would you like to book a table for tonight or for another day?"


async def test_a_greeting_is_spoken_before_the_caller_talks_and_the_callers_first_turn_is_epoch_one() -> None:
    clock = SimClock()
    scenario = ScenarioBuilder().pause(9.0).say("a table for two").pause(2.0).build()
    llm = ScriptedLlm(clock, [[Say("For what time?")]])
    config = EngineConfig(turn=FixedSilence(silence=0.5), llm=LlmConfig(greeting=GREETING))
    result = await simulate(clock, scenario, llm, config=config)
    audio = result.audio_at()
    assert audio and audio[0][1] == 0 and audio[0][0] < 1.0  # the bot spoke first, at once
    assert {epoch for _, epoch in audio} == {0, 1}
    messages = result.report.context.messages
    assert [(type(m).__name__, m.text) for m in messages[1:]] == [  # type: ignore[union-attr]
        ("AssistantMessage", GREETING), ("UserMessage", "a table for two"), ("AssistantMessage", "For what time?"),
    ]
    assert llm.requests[0].messages[2].text == GREETING  # the model knows what it said
    assert result.report.interrupts == 0


async def test_a_caller_who_talks_over_the_greeting_cuts_it_and_the_context_keeps_the_heard_part() -> None:
    clock = SimClock()
    scenario = ScenarioBuilder().pause(1.5).say("hi I want a table").pause(2.5).build()
    llm = ScriptedLlm(clock, [[Say("Sure, for how many?")]])
    config = EngineConfig(turn=FixedSilence(silence=0.5), llm=LlmConfig(greeting=GREETING))
    result = await simulate(clock, scenario, llm, config=config)
    assert result.report.interrupts == 1
    cleared = [t for t, epoch in result.clears() if epoch == 1]
    assert cleared
    assert [t for t, epoch in result.audio_at() if epoch == 0 and t > cleared[0]] == []
    messages = result.report.context.messages
    greeting_heard = messages[1].text.removesuffix(CUT_MARKER)  # type: ignore[union-attr]
    assert isinstance(messages[1], AssistantMessage)
    assert greeting_heard and GREETING.startswith(greeting_heard) and len(greeting_heard) < len(GREETING)
    assert isinstance(messages[2], UserMessage) and messages[2].text == "hi I want a table"
    assert llm.requests[0].messages[2].text == greeting_heard + CUT_MARKER


def test_an_empty_greeting_is_refused_by_name() -> None:
    with pytest.raises(ConfigError, match="greeting"):
        LlmConfig(greeting="  ")


def drain(observer: CallObserver) -> list[EngineEvent]:
    out = []
    while (event := observer.try_get()) is not None:
        out.append(event)
    return out


class _BusySttSession(MockSttSession):
    """Every final is refused, as the local Whisper refuses a segment when its inference pool is full."""

    async def _emit(self, event: SttEvent) -> None:
        if isinstance(event, Transcript) and event.is_final and event.text:
            busy = ProviderError("local-whisper", ProviderErrorKind.BUSY, "the inference pool is full")
            event = SttError(error=busy, fatal=False)
        await super()._emit(event)


class _BusyStt(MockStt):
    async def connect(self, config: SttConfig) -> MockSttSession:
        session = _BusySttSession(SimClock(), self.config, config, self.name)
        self.sessions.append(session)
        return session


async def test_a_turn_whose_words_a_busy_stt_refused_is_answered_with_the_fallback_line_and_an_error_event() -> None:
    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("book a table for two").pause(3.0).build()
    observer = CallObserver()
    llm = ScriptedLlm(clock, [[Say("Sure.")]])
    result = await simulate(clock, scenario, llm, stt=_BusyStt(clock, MockSttConfig(utterances=scenario.utterances)),
                            observer=observer)
    said = [m.text for m in result.report.context.messages if isinstance(m, AssistantMessage)]
    assert said == [DEFAULT_FALLBACK_LINE] and not llm.requests  # spoken, not silence; the model was not asked
    assert result.audio_at()
    busy = [e for e in drain(observer) if isinstance(e, ModelBusy)]
    assert [(e.stage, e.provider) for e in busy] == [(BusyStage.STT, "local-whisper")]


async def test_a_reply_a_busy_tts_refused_is_reported_to_the_client_as_an_error_event() -> None:
    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("book a table for two").pause(3.0).build()
    observer = CallObserver()
    result = await simulate(clock, scenario, ScriptedLlm(clock, [[Say("Sure.")]]), tts=MockTtsConfig(busy=True),
                            observer=observer)
    assert not result.audio_at()  # nothing could be spoken ...
    busy = [e for e in drain(observer) if isinstance(e, ModelBusy)]
    assert busy and {e.stage for e in busy} == {BusyStage.TTS}  # ... and the client is told


async def test_the_model_is_told_the_calls_date_from_the_clocks_wall_time_but_the_context_does_not_keep_it() -> None:
    clock = SimClock(datetime(2026, 12, 4, 7, 0, tzinfo=UTC))
    scenario = ScenarioBuilder().pause(0.5).say("a table for tomorrow").pause(2.0).build()
    llm = ScriptedLlm(clock, [[Say("For what time?")]])
    config = EngineConfig(turn=FixedSilence(silence=0.5), llm=LlmConfig(system_prompt="You book tables."))
    result = await simulate(clock, scenario, llm, config=config)
    assert llm.requests[0].messages[0].text == "You book tables."  # type: ignore[union-attr]
    assert llm.requests[0].messages[1].text == (  # type: ignore[union-attr]
        "Today is Friday, 4 December 2026 (2026-12-04). The next days: Saturday 2026-12-05 "
        "(tomorrow), Sunday 2026-12-06, Monday 2026-12-07, Tuesday 2026-12-08, Wednesday 2026-12-09, "
        "Thursday 2026-12-10, Friday 2026-12-11.")
    assert result.report.context.messages[0].text == "You book tables."  # type: ignore[union-attr]


async def test_a_change_of_date_leaves_the_system_prompt_and_the_tools_section_unchanged() -> None:
    # A local model's prompt cache keeps the request's longest unchanged start: with the date
    # inside the system prompt, midnight changed the text before the tools' ~600 tokens and
    # the next turn evaluated them all again (9 s on one thread).
    from brisvox.providers.local._tool_grammar import ToolSchema, tools_prompt
    from brisvox.providers.local.xllama import to_chat_messages

    clock = SimClock(datetime(2026, 12, 4, 23, 59, 55, tzinfo=UTC))
    scenario = (ScenarioBuilder().pause(0.5).say("a table for tomorrow").pause(6.0)
                .say("for two").pause(2.0).build())
    llm = ScriptedLlm(clock, [[Say("For how many?")], [Say("Done.")]])
    config = EngineConfig(turn=FixedSilence(silence=0.5), llm=LlmConfig(system_prompt="You book tables."))
    await simulate(clock, scenario, llm, config=config)
    tools = tools_prompt((ToolSchema("book", "Book a table.", {"type": "object", "properties": {}}),))
    before, after = (to_chat_messages(r.messages, tools) for r in llm.requests)
    assert before[0] == after[0] == {"role": "system", "content": f"You book tables.\n\n{tools}"}
    assert before[1]["content"].startswith("Today is Friday, 4 December 2026")
    assert after[1]["content"].startswith("Today is Saturday, 5 December 2026")


async def test_the_pump_reads_the_transport_events_in_its_only_task_and_watches_the_rest_without_tasks() -> None:
    # The pipeline's end, a failure and a flow's EndCall end the pump through one Event and a
    # callback; only the events reader is a task (a caller's cancel Event would add one).
    clock = SimClock()
    created: list[asyncio.Task[Any]] = []
    loop = asyncio.get_running_loop()
    default = loop.get_task_factory()

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kw: Any) -> asyncio.Task[Any]:
        task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kw)
        created.append(task)  # named after the factory returns
        return task

    scenario = ScenarioBuilder().pause(0.5).say("book a table for two").pause(2.0).build()
    loop.set_task_factory(factory)
    try:
        result = await simulate(clock, scenario, ScriptedLlm(clock, [[Say("Sure.")]]))
    finally:
        loop.set_task_factory(default)
    assert result.report.turns == 1
    assert [n for t in created if (n := t.get_name()).startswith("pump/")] == ["pump/events"]
def test_the_fallback_restates_the_callers_last_words_or_falls_back_to_the_plain_line() -> None:
    config = LlmConfig()
    assert config.fallback_for("a table for two.") == (
        "Sorry, I couldn't answer that in time. I heard: a table for two. Could you say it again?")
    long = " ".join(f"w{i}" for i in range(30))
    assert "I heard: w10 w11" in config.fallback_for(long) and "w9 " not in config.fallback_for(long)
    assert config.fallback_for("  ") == DEFAULT_FALLBACK_LINE
    assert LlmConfig(heard_fallback=None).fallback_for("hello") == DEFAULT_FALLBACK_LINE
    with pytest.raises(ConfigError, match="heard"):
        LlmConfig(heard_fallback="Sorry, say it again.")


async def _paused_request(min_pause: float) -> tuple[SimResult, list[EngineEvent], ScriptedLlm]:
    """"a table for two tomorrow at seven" | 0.4 s | "please", the demo's policy, Smart Turn
    calling every pause complete 0.05 s after the stop and the final at once (the early decode)."""
    from brisvox.agent.turn import Adaptive

    clock = SimClock()
    scenario = (ScenarioBuilder().pause(0.5).say("a table for two tomorrow at seven", duration=1.8).pause(0.4)
                .say("please", duration=0.4).pause(5.0).build())
    llm = ScriptedLlm(clock, [[Say("Let me check that for you.")], [Say("Let me check that for you.")]])
    events: list[EngineEvent] = []
    config = EngineConfig(turn=Adaptive(require_final=True, min_pause=min_pause))
    result = await simulate(clock, scenario, llm, config=config, end_of_turn=FixedVerdict(clock, True, 0.05),
                            observer=CallObserver(listener=events.append))
    return result, events, llm


async def test_a_breath_inside_a_request_within_the_min_pause_keeps_one_turn_answered_once() -> None:
    from brisvox.engine.events import TurnEnded

    result, events, llm = await _paused_request(0.5)
    users = [m.text for m in result.report.context.messages if isinstance(m, UserMessage)]
    assert users == ["a table for two tomorrow at seven please"]
    assert len(llm.requests) == 1 and result.report.interrupts == 0
    assert len([e for e in events if isinstance(e, TurnEnded)]) == 1
    # Without the min pause the same call is two turns: the first reply is cut by "please".
    result, events, llm = await _paused_request(0.0)
    assert len([e for e in events if isinstance(e, TurnEnded)]) == 2 and len(llm.requests) == 2


async def test_a_final_3_5_s_after_the_stop_ends_the_held_turn_answered_once_as_one_turn() -> None:
    """The demo's policy (require_final) with Smart Turn calling the flat voice unfinished: the
    second stretch's final comes 3.5 s after the stop, past the 3 s fallback.  The turn waits
    for it (final_timeout) instead of answering "a table for two" and cutting that answer."""
    from brisvox.agent.turn import Adaptive
    from brisvox.engine.events import BotHeard, TurnEnded, TurnStarted

    clock = SimClock()
    scenario = (ScenarioBuilder().pause(0.5).say("a table for two", duration=1.0).pause(1.0)
                .say("tomorrow at seven please", duration=1.5).pause(10.0).build())
    llm = ScriptedLlm(clock, [[Say("For two, when would you like to come?")], [Say("Two at seven, let me check.")]],
                      latency=LatencyProfile(first_event=0.08, per_event=0.02))
    events: list[EngineEvent] = []
    stt = MockStt.for_scenario(clock, scenario, final_latencies=(0.05, 3.5))
    result = await simulate(clock, scenario, llm, config=EngineConfig(turn=Adaptive(require_final=True)), stt=stt,
                            end_of_turn=FixedVerdict(clock, False), observer=CallObserver(listener=events.append))
    users = [m.text for m in result.report.context.messages if isinstance(m, UserMessage)]
    assert users == ["a table for two tomorrow at seven please"]
    assert len(llm.requests) == 1 and result.report.interrupts == 0 and result.clears() == []
    assert [type(e) for e in events if isinstance(e, TurnStarted | TurnEnded)] == [TurnStarted, TurnEnded]
    assert not [e for e in events if isinstance(e, BotHeard)]  # no reply was cut
    ended = next(e for e in events if isinstance(e, TurnEnded))
    assert ended.reason is TurnEndReason.FALLBACK and ended.speech_ended is not None
    assert ended.at - ended.speech_ended == pytest.approx(0.3 + 3.5, abs=0.1)  # the VAD's hangover, then the final
    assert {epoch for _, epoch in result.audio_at()} == {0}


async def test_a_punctuated_final_that_comes_after_the_minimum_pause_ends_the_turn_when_it_comes() -> None:
    """The demo's policy with Smart Turn calling the flat voice unfinished and Whisper's final
    0.7 s after the VAD's stop: the turn ends on the final itself, not a grace after it (the
    grace counts from the end of speech, which the final is already past)."""
    from brisvox.agent.turn import Adaptive
    from brisvox.engine.events import TurnEnded

    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("A table for two tomorrow at seven.", duration=1.8).pause(5.0).build()
    llm = ScriptedLlm(clock, [[Say("Let me check that for you.")]])
    events: list[EngineEvent] = []
    stt = MockStt.for_scenario(clock, scenario, final_latencies=(0.7,))
    await simulate(clock, scenario, llm, config=EngineConfig(turn=Adaptive(require_final=True)), stt=stt,
                   end_of_turn=FixedVerdict(clock, False), observer=CallObserver(listener=events.append))
    (ended,) = [e for e in events if isinstance(e, TurnEnded)]
    assert ended.reason is TurnEndReason.FINAL and ended.speech_ended is not None
    assert ended.at - ended.speech_ended == pytest.approx(0.3 + 0.7, abs=0.05)  # the VAD's hangover, then the final
    assert len(llm.requests) == 1


class _SlowModel:
    """A local model's round: ``think`` seconds of prompt evaluation before its first token."""

    def __init__(self, clock: SimClock, think: float) -> None:
        self.clock, self.think = clock, think
        self.started: list[float] = []
        self.closed: list[float] = []  # when the stream was closed (the slot released)
        self.tokens = 0  # tokens produced

    @property
    def name(self) -> str:
        return "slow"

    async def warm(self) -> None:
        return None

    def stream(self, request: Any) -> Any:
        from brisvox.providers.llm import Done, FinishReason, GeneratorLlmStream, TextDelta

        async def respond() -> Any:
            self.started.append(self.clock.now())
            try:
                await self.clock.sleep(self.think)
                for word in ("We ", "have ", "a ", "table."):
                    self.tokens += 1
                    yield TextDelta(text=word)
                yield Done(finish_reason=FinishReason.STOP)
            finally:
                self.closed.append(self.clock.now())

        return GeneratorLlmStream(self.name, respond())


async def test_a_hang_up_during_a_model_round_cancels_the_round_at_once() -> None:
    # The caller hangs up while the model still evaluates the prompt: the round is cancelled
    # there and then (no StopTimeout, no token generated for nobody); before, the stop waited
    # for the round and its answer, and past Timeouts.stop the call failed.
    clock = SimClock()
    scenario = ScenarioBuilder().pause(0.5).say("a table for two tomorrow").pause(2.0).build()
    llm = _SlowModel(clock, think=6.0)
    result = await simulate(clock, scenario, llm, linger=0.5)  # type: ignore[arg-type]
    assert len(llm.started) == 1, "the turn's round never started"
    hung_up = scenario.duration + 0.5
    assert llm.started[0] < hung_up
    assert llm.closed and llm.closed[0] - hung_up < 0.1, f"the round was closed {llm.closed[0] - hung_up:.2f} s after the hang-up"
    assert llm.tokens == 0
    assert result.report.failure is None
