"""The call observer: events of a simulated call, and the bounded drop-oldest queue."""

from __future__ import annotations

import json

import pytest

from brisvox.agent.context import AssistantMessage
from brisvox.agent.tools import ToolKind, ToolRegistry, ToolSpec
from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.engine import CallEvent, CallEventKind, CallObserver
from brisvox.sim import Call, Say, ScenarioBuilder, ScriptedLlm
from tests.engine.harness import simulate

OBJ = {"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]}


def drain(observer: CallObserver) -> list[CallEvent]:
    out = []
    while (event := observer.try_get()) is not None:
        out.append(event)
    return out


async def test_a_call_with_a_tool_reports_the_transcript_the_tool_call_its_result_the_reply_and_the_latency() -> None:
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
    kinds = [e.kind for e in events]
    assert CallEventKind.USER_TRANSCRIPT in kinds
    turn = next(e for e in events if e.kind is CallEventKind.USER_TURN)
    assert turn.data["text"] == "a table on friday"
    call = next(e for e in events if e.kind is CallEventKind.TOOL_CALL)
    result = next(e for e in events if e.kind is CallEventKind.TOOL_RESULT)
    assert call.data["name"] == result.data["name"] == "check_availability"
    assert json.loads(str(call.data["arguments"])) == {"day": "friday"}
    assert result.data["outcome"] == "ok"
    assert kinds.index(CallEventKind.TOOL_CALL) < kinds.index(CallEventKind.TOOL_RESULT)
    bot = "".join(str(e.data["text"]) for e in events if e.kind is CallEventKind.BOT_TEXT)
    assert bot == "Friday is free."
    latency = next(e for e in events if e.kind is CallEventKind.LATENCY)
    assert latency.data["speech_end_to_audio_ms"] >= latency.data["turn_end_to_audio_ms"] >= 0
    assert latency.data["turn_end_reason"] in {"silence", "model", "final", "fallback"}
    assert latency.data["speech_end_to_audio_ms"] == pytest.approx(
        latency.data["speech_end_to_turn_end_ms"] + latency.data["turn_end_to_audio_ms"], abs=0.2)
    body = json.loads(latency.to_json())
    assert body["type"] == "event" and body["kind"] == "latency"


async def test_a_barge_in_is_reported_with_the_new_epoch_and_the_heard_part_of_the_cut_reply() -> None:
    from brisvox.agent.interrupt import InterruptionPolicy
    from brisvox.agent.turn import FixedSilence
    from brisvox.engine import EngineConfig

    clock = SimClock()
    long_reply = " ".join(["word"] * 80)
    llm = ScriptedLlm(clock, [[Say(long_reply)], [Say("Sure.")]])
    scenario = (ScenarioBuilder().pause(0.5).say("tell me a story").pause(2.0)
                .say("stop please stop now").pause(3.0).build())
    observer = CallObserver()
    config = EngineConfig(turn=FixedSilence(silence=0.5), interruption=InterruptionPolicy.recommended())
    result = await simulate(clock, scenario, llm, config=config, observer=observer)
    events = drain(observer)
    interrupts = [e for e in events if e.kind is CallEventKind.INTERRUPTED]
    assert interrupts and interrupts[0].epoch == 1
    # The cut reply is reported with the part the caller heard, which is what the context kept.
    heard = [e for e in events if e.kind is CallEventKind.BOT_HEARD]
    assert [e.epoch for e in heard] == [0]
    text = str(heard[0].data["text"])
    assert text and len(text) < len(long_reply) and long_reply.startswith(text)
    streamed = "".join(str(e.data["text"]) for e in events
                       if e.kind is CallEventKind.BOT_TEXT and e.epoch == 0 and e.data["round"] == heard[0].data["round"])
    assert streamed.startswith(text)
    assert text in [m.text for m in result.report.context.messages if isinstance(m, AssistantMessage)]
    assert events.index(interrupts[0]) < events.index(heard[0])


async def test_a_reply_heard_in_full_is_not_reported_as_cut() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [[Say("Hello there.")]])
    scenario = ScenarioBuilder().pause(0.5).say("hi").pause(4.0).build()
    observer = CallObserver()
    await simulate(clock, scenario, llm, observer=observer)
    kinds = [e.kind for e in drain(observer)]
    assert CallEventKind.BOT_DONE in kinds and CallEventKind.BOT_HEARD not in kinds


def test_a_full_observer_drops_the_oldest_event_and_counts_it() -> None:
    observer = CallObserver(capacity=2)
    for epoch in range(3):
        observer.emit(CallEvent(kind=CallEventKind.BOT_DONE, epoch=epoch, at=0.0))
    assert observer.dropped == 1
    assert [e.epoch for e in drain(observer)] == [1, 2]


async def test_a_closed_observer_drains_then_refuses() -> None:
    observer = CallObserver()
    observer.emit(CallEvent(kind=CallEventKind.BOT_DONE, epoch=0, at=0.0))
    observer.close()
    observer.emit(CallEvent(kind=CallEventKind.BOT_DONE, epoch=1, at=0.0))
    assert (await observer.get()).epoch == 0
    with pytest.raises(ChannelClosed):
        await observer.get()


def test_a_listener_sees_every_event_even_those_the_full_queue_drops() -> None:
    seen: list[int] = []
    observer = CallObserver(capacity=1, listener=lambda event: seen.append(event.epoch))
    for epoch in range(3):
        observer.emit(CallEvent(kind=CallEventKind.BOT_DONE, epoch=epoch, at=0.0))
    assert seen == [0, 1, 2]
    assert observer.dropped == 2


def test_an_observer_needs_room_for_one_event() -> None:
    with pytest.raises(ConfigError, match="capacity"):
        CallObserver(capacity=0)


def test_an_event_repr_names_no_caller_text() -> None:
    event = CallEvent(kind=CallEventKind.USER_TURN, epoch=0, at=0.0, data={"text": "my card is 1234"})
    assert "1234" not in repr(event)
