"""The engine's event stream: typed events of simulated calls, and the bounded drop-oldest queue."""

from __future__ import annotations

import json

import pytest

from brisvox.agent.context import AssistantMessage
from brisvox.agent.interrupt import InterruptionPolicy
from brisvox.agent.played import CUT_MARKER
from brisvox.agent.tools import Outcome, ToolKind, ToolRegistry, ToolSpec
from brisvox.agent.turn import FixedSilence
from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.frames import TurnEndReason
from brisvox.engine import EngineConfig
from brisvox.engine.events import (
    BotAudible,
    BotDone,
    BotHeard,
    BotText,
    CallEvents,
    CallObserver,
    EngineEvent,
    ToolCallSettled,
    ToolCallStarted,
    TurnEnded,
    TurnLatency,
    TurnStarted,
    UserTranscript,
    UserTurn,
)
from brisvox.sim import Call, LatencyProfile, MockTtsConfig, Say, ScenarioBuilder, ScriptedLlm
from tests.engine.harness import OBJ, Counter, registry, simulate


def drain(observer: CallObserver) -> list[EngineEvent]:
    out = []
    while (event := observer.try_get()) is not None:
        out.append(event)
    return out


def of(events: list[EngineEvent], kind: type[EngineEvent]) -> list[EngineEvent]:
    return [e for e in events if isinstance(e, kind)]


async def test_a_call_with_a_tool_reports_the_turn_the_tool_call_its_typed_outcome_the_reply_and_the_latency() -> None:
    clock = SimClock()

    async def lookup(arguments: dict[str, object], ctx: object) -> object:
        return {"free": True, **arguments}

    reg = ToolRegistry()
    reg.register(ToolSpec(name="check_availability", description="Free tables.", parameters=OBJ,
                          kind=ToolKind.READ_ONLY), lookup)
    llm = ScriptedLlm(clock, [[Call(name="check_availability", arguments={"day": "friday"})],
                              [Say("Friday is free.")]])
    scenario = ScenarioBuilder().pause(0.5).say("a table on friday").pause(4.0).build()
    observer = CallObserver()
    await simulate(clock, scenario, llm, tools=reg, observer=observer)
    events = drain(observer)
    assert of(events, UserTranscript)
    turns = of(events, UserTurn)
    assert [(e.epoch, e.text) for e in turns if isinstance(e, UserTurn)] == [(0, "a table on friday")]
    [started] = of(events, ToolCallStarted)
    [settled] = of(events, ToolCallSettled)
    assert isinstance(started, ToolCallStarted) and isinstance(settled, ToolCallSettled)
    assert started.name == settled.name == "check_availability" and started.call_id == settled.call_id
    assert json.loads(started.arguments) == {"day": "friday"}
    assert settled.outcome is Outcome.OK and not settled.is_error
    assert events.index(started) < events.index(settled)
    assert "".join(e.text for e in events if isinstance(e, BotText)) == "Friday is free."
    [latency] = of(events, TurnLatency)
    assert isinstance(latency, TurnLatency)
    assert latency.speech_end_to_audio is not None and latency.turn_end_to_audio is not None
    assert latency.speech_end_to_audio >= latency.turn_end_to_audio >= 0
    assert latency.turn_end_reason is TurnEndReason.SILENCE
    assert latency.speech_end_to_turn_end is not None
    assert latency.speech_end_to_audio == pytest.approx(latency.speech_end_to_turn_end + latency.turn_end_to_audio)
    assert latency.turn_end_to_first_token is not None and latency.turn_end_to_first_token >= 0
    [audible] = of(events, BotAudible)
    assert audible.at == latency.at


async def test_a_barge_in_is_reported_as_a_turn_started_by_a_barge_in_and_the_heard_part_of_the_cut_reply() -> None:
    clock = SimClock()
    long_reply = " ".join(["word"] * 80)
    llm = ScriptedLlm(clock, [[Say(long_reply)], [Say("Sure.")]])
    scenario = (ScenarioBuilder().pause(0.5).say("tell me a story").pause(2.0)
                .say("stop please stop now").pause(3.0).build())
    observer = CallObserver()
    config = EngineConfig(turn=FixedSilence(silence=0.5), interruption=InterruptionPolicy.recommended())
    result = await simulate(clock, scenario, llm, config=config, observer=observer)
    events = drain(observer)
    barge_ins = [e for e in events if isinstance(e, TurnStarted) and e.barge_in]
    assert [e.epoch for e in barge_ins] == [1]
    [heard] = of(events, BotHeard)
    assert isinstance(heard, BotHeard) and heard.epoch == 0
    assert heard.text and len(heard.text) < len(long_reply) and long_reply.startswith(heard.text)
    streamed = "".join(e.text for e in events if isinstance(e, BotText) and e.epoch == 0 and e.round == heard.round)
    assert streamed.startswith(heard.text)
    assert heard.text + CUT_MARKER in [m.text for m in result.report.context.messages if isinstance(m, AssistantMessage)]
    assert events.index(barge_ins[0]) < events.index(heard)
    # The turn after the barge-in reaches the model, and the stream says so.
    assert [(e.epoch, e.text) for e in of(events, UserTurn) if isinstance(e, UserTurn)] == [
        (0, "tell me a story"), (1, "stop please stop now")]


async def test_the_next_user_turn_is_reported_when_settling_removed_a_reply_nobody_heard() -> None:
    # The reply of turn 0 is in the context but its speech is slow: the caller corrects
    # themselves before any audio, the reply is removed as unheard, and the correction
    # takes its place in the context.  The turn must still be reported.
    clock = SimClock()
    llm = ScriptedLlm(clock, [[Say("Booked for thursday.")], [Say("Friday it is.")]])
    scenario = (ScenarioBuilder().pause(0.5).say("book thursday").pause(1.2)
                .say("actually make it friday").pause(4.0).build())
    observer = CallObserver()
    config = EngineConfig(turn=FixedSilence(silence=0.5), interruption=InterruptionPolicy.disabled())
    result = await simulate(clock, scenario, llm, config=config, observer=observer,
                            tts=MockTtsConfig(latency=LatencyProfile(first_event=3.0)))
    events = drain(observer)
    texts = [m.text for m in result.report.context.messages if isinstance(m, AssistantMessage)]
    assert "Booked for thursday." not in texts  # settled away: nobody heard it
    assert [e.text for e in of(events, UserTurn) if isinstance(e, UserTurn)] == [
        "book thursday", "actually make it friday"]


async def test_every_transcript_carries_the_epoch_of_the_turn_it_went_to() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [[Say("One.")], [Say("Two.")], [Say("Three.")]])
    scenario = (ScenarioBuilder().pause(0.5).say("first thing").pause(3.0).say("second thing").pause(3.0)
                .say("third thing").pause(3.0).build())
    observer = CallObserver()
    await simulate(clock, scenario, llm, observer=observer)
    events = drain(observer)
    turns = {e.text: e.epoch for e in events if isinstance(e, UserTurn)}
    assert turns == {"first thing": 0, "second thing": 1, "third thing": 2}
    finals = [(e.text, e.epoch) for e in events if isinstance(e, UserTranscript) and e.final]
    assert finals and all(turns[text] == epoch for text, epoch in finals)
    assert {e.epoch for e in of(events, UserTranscript)} == {0, 1, 2}
    ends = [e for e in events if isinstance(e, TurnEnded)]
    assert [e.epoch for e in ends] == [0, 1, 2] and all(e.speech_ended is not None for e in ends)


async def test_a_reply_heard_in_full_is_not_reported_as_cut() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [[Say("Hello there.")]])
    scenario = ScenarioBuilder().pause(0.5).say("hi").pause(4.0).build()
    observer = CallObserver()
    await simulate(clock, scenario, llm, observer=observer)
    events = drain(observer)
    assert of(events, BotDone) and not of(events, BotHeard)


def bot_done(epoch: int) -> BotDone:
    return BotDone(epoch=epoch, at=0.0)


def test_a_full_observer_drops_the_oldest_event_and_counts_it() -> None:
    observer = CallObserver(capacity=2)
    for epoch in range(3):
        observer.emit(bot_done(epoch))
    assert observer.dropped == 1
    assert [e.epoch for e in drain(observer)] == [1, 2]


async def test_a_closed_observer_drains_then_refuses() -> None:
    observer = CallObserver()
    observer.emit(bot_done(0))
    observer.close()
    observer.emit(bot_done(1))
    assert (await observer.get()).epoch == 0
    with pytest.raises(ChannelClosed):
        await observer.get()


def test_a_listener_sees_every_event_even_those_the_full_queue_drops() -> None:
    seen: list[int] = []
    observer = CallObserver(capacity=1, listener=lambda event: seen.append(event.epoch))
    for epoch in range(3):
        observer.emit(bot_done(epoch))
    assert seen == [0, 1, 2]
    assert observer.dropped == 2


def test_an_added_listener_sees_every_event_after_the_first_one_and_alone_without_one() -> None:
    seen: list[str] = []
    observer = CallObserver(listener=lambda event: seen.append(f"first {event.epoch}"))
    observer.add_listener(lambda event: seen.append(f"added {event.epoch}"))
    observer.emit(bot_done(4))
    assert seen == ["first 4", "added 4"]
    alone = CallObserver()
    alone.add_listener(lambda event: seen.append(f"alone {event.epoch}"))
    alone.emit(bot_done(5))
    assert seen[-1] == "alone 5"


def test_an_observer_needs_room_for_one_event() -> None:
    with pytest.raises(ConfigError, match="capacity"):
        CallObserver(capacity=0)


def test_an_event_repr_names_no_caller_text() -> None:
    event = UserTurn(epoch=0, at=0.0, text="my card is 1234")
    assert "1234" not in repr(event) and "UserTurn" in repr(event)


def test_a_turn_latency_is_derived_once_from_the_turn_end_and_its_first_audible_audio() -> None:
    observer = CallObserver()
    events = CallEvents("c1", observer)
    events.emit(TurnEnded(epoch=3, at=10.0, reason=TurnEndReason.SILENCE, speech_ended=9.5))
    events.emit(BotAudible(epoch=3, at=10.75))
    events.emit(BotAudible(epoch=3, at=11.0))  # a repeat never makes a second figure
    [latency] = [e for e in drain(observer) if isinstance(e, TurnLatency)]
    assert latency.epoch == 3 and latency.at == 10.75
    assert latency.speech_end_to_audio == pytest.approx(1.25)
    assert latency.speech_end_to_turn_end == pytest.approx(0.5)
    assert latency.turn_end_to_audio == pytest.approx(0.75)
    assert latency.turn_end_to_first_token is None and latency.turn_end_reason is TurnEndReason.SILENCE


def test_a_greeting_that_became_audible_has_no_latency() -> None:
    observer = CallObserver()
    CallEvents("c1", observer).emit(BotAudible(epoch=0, at=1.0))
    assert not [e for e in drain(observer) if isinstance(e, TurnLatency)]


async def test_every_started_tool_call_settles_once_with_the_tool_engine_s_outcome_across_a_barge_in() -> None:
    clock = SimClock()
    book = Counter(clock, seconds=5.0, answer={"booked": True, "table": 7})
    spec = ToolSpec(name="book_table", description="Book a table.", parameters=OBJ, kind=ToolKind.SIDE_EFFECT,
                    timeout=10.0)
    call = Call(name="book_table", arguments={"day": "friday"})
    llm = ScriptedLlm(clock, [[Say("Booking it now, this takes a moment. "), call], [call],
                              [Say("Done, table seven.")], [Say("Anything else?")]])
    scenario = ScenarioBuilder().pause(0.5).say("book friday").pause(2.5).say("are you still there").pause(8.0).build()
    observer = CallObserver()
    await simulate(clock, scenario, llm, tools=registry(book=(spec, book)), observer=observer)
    events = drain(observer)
    started = [e.call_id for e in events if isinstance(e, ToolCallStarted)]
    settled = [(e.call_id, e.outcome) for e in events if isinstance(e, ToolCallSettled)]
    assert len(started) == 2 and len(book.calls) == 1
    # The first call was cut by the barge-in; its booking finished later as a late note; the
    # regenerated call was answered from the record.
    by_outcome = {outcome for _, outcome in settled}
    assert Outcome.INTERRUPTED_RUNNING in by_outcome or Outcome.INTERRUPTED in by_outcome
    assert Outcome.LATE_RESULT in by_outcome
    assert {call_id for call_id, outcome in settled if outcome is not Outcome.LATE_RESULT} == set(started)
