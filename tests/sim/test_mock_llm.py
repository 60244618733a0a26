from __future__ import annotations

import asyncio
import json

import pytest

from brisvox.agent import ToolSpec, UserMessage
from brisvox.core.clock import SimClock
from brisvox.providers.errors import ProviderErrorKind
from brisvox.providers.llm import (
    Done,
    FinishReason,
    LlmError,
    LlmEvent,
    LlmRequest,
    ProviderDataDelta,
    TextDelta,
    ToolCallDelta,
)
from brisvox.sim.latency import LatencyProfile
from brisvox.sim.mock_llm import Call, Fail, Finish, Hang, Interleave, Pause, Say, ScriptedLlm

REQ = LlmRequest(messages=(UserMessage(text="what is the weather in Oslo and Bergen?"),), tools=(ToolSpec(name="weather", description="w"),))


async def _events(llm: ScriptedLlm, request: LlmRequest = REQ) -> list[tuple[float, LlmEvent]]:
    clock = SimClock()
    start = clock.now()
    out: list[tuple[float, LlmEvent]] = []
    async with llm.stream(request) as stream:
        async for event in stream:
            out.append((round(clock.now() - start, 4), event))
    return out


def _args_by_index(events: list[tuple[float, LlmEvent]]) -> dict[int, str]:
    args: dict[int, str] = {}
    for _, e in events:
        if isinstance(e, ToolCallDelta):
            args[e.index] = args.get(e.index, "") + e.arguments_fragment
    return args


async def test_text_streams_word_by_word_after_the_first_event_delay_and_ends_with_stop() -> None:
    llm = ScriptedLlm(SimClock(), [[Say("Hello there, friend.")]], latency=LatencyProfile(first_event=0.3, per_event=0.05))
    events = await _events(llm)
    texts = [e.text for _, e in events if isinstance(e, TextDelta)]
    assert "".join(texts) == "Hello there, friend." and len(texts) == 3
    assert [t for t, _ in events] == [0.3, 0.35, 0.4, 0.45]
    done = events[-1][1]
    assert isinstance(done, Done) and done.finish_reason is FinishReason.STOP
    assert done.usage is not None and done.usage.input_tokens == len(REQ.messages[0].text) // 4 + 4


async def test_calls_one_after_the_other_carry_id_and_name_on_their_first_fragment() -> None:
    llm = ScriptedLlm(SimClock(), [[Call(name="weather", arguments={"city": "Oslo"}), Call(name="weather", arguments={"city": "Bergen"}, id="x9")]])
    events = await _events(llm)
    deltas = [e for _, e in events if isinstance(e, ToolCallDelta)]
    assert [d.index for d in deltas] == [0, 0, 0, 1, 1, 1]
    assert (deltas[0].id, deltas[0].name, deltas[3].id) == ("call_0", "weather", "x9")
    assert all(d.id is None and d.name is None for d in deltas[1:3])
    assert {i: json.loads(a) for i, a in _args_by_index(events).items()} == {0: {"city": "Oslo"}, 1: {"city": "Bergen"}}
    assert isinstance(events[-1][1], Done) and events[-1][1].finish_reason is FinishReason.TOOL_CALLS


async def test_interleaved_calls_alternate_their_fragments_and_still_assemble() -> None:
    calls = (Call(name="weather", arguments={"city": "Oslo"}, fragments=4), Call(name="weather", arguments={"city": "Bergen"}, fragments=2))
    events = await _events(ScriptedLlm(SimClock(), [[Interleave(calls)]]))
    order = [e.index for _, e in events if isinstance(e, ToolCallDelta)]
    assert order == [0, 1, 0, 1, 0, 0]
    assert {i: json.loads(a) for i, a in _args_by_index(events).items()} == {0: {"city": "Oslo"}, 1: {"city": "Bergen"}}


async def test_a_pause_in_the_middle_delays_the_rest_of_the_response() -> None:
    llm = ScriptedLlm(SimClock(), [[Say("One moment."), Pause(2.0), Say("Done.")]])
    events = await _events(llm)
    times = [t for t, e in events if isinstance(e, TextDelta)]
    assert times == [0.0, 0.0, 2.0]


async def test_a_scripted_failure_is_the_terminal_error_event() -> None:
    events = await _events(ScriptedLlm(SimClock(), [[Say("Let me"), Fail(ProviderErrorKind.RATE_LIMITED)]]))
    last = events[-1][1]
    assert isinstance(last, LlmError) and last.error.kind is ProviderErrorKind.RATE_LIMITED
    assert not any(isinstance(e, Done) for _, e in events)


async def test_a_model_that_never_answers_is_ended_by_the_consumers_timeout_and_closed() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [[Hang()]])
    start = clock.now()
    async with llm.stream(REQ) as stream:
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(5.0):
                await anext(stream)
    assert clock.now() - start == pytest.approx(5.0)
    assert llm.closed_streams == 1


async def test_requests_get_the_scripts_in_order_and_an_exhausted_script_is_a_protocol_error() -> None:
    llm = ScriptedLlm(SimClock(), [[Say("first")]])
    await _events(llm)
    events = await _events(llm)
    assert len(llm.requests) == 2
    only = events[0][1]
    assert isinstance(only, LlmError) and only.error.kind is ProviderErrorKind.PROTOCOL


async def test_a_function_can_choose_the_script_from_the_request() -> None:
    llm = ScriptedLlm(SimClock(), lambda req: [Say(f"{len(req.messages)} messages")])
    events = await _events(llm)
    assert [e.text for _, e in events if isinstance(e, TextDelta)] == ["1 ", "messages"]


async def test_a_finish_step_sets_the_reason_and_sends_response_provider_data_before_done() -> None:
    llm = ScriptedLlm(SimClock(), [[Say("cut"), Finish(FinishReason.LENGTH, provider_data={"sig": "abc"})]])
    events = [e for _, e in await _events(llm)]
    assert events[-2] == ProviderDataDelta(data={"sig": "abc"})
    assert isinstance(events[-1], Done) and events[-1].finish_reason is FinishReason.LENGTH
