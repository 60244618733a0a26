from __future__ import annotations

from collections.abc import AsyncGenerator

import pytest

from brisvox.agent import SystemMessage, ToolSpec, UserMessage
from brisvox.core.errors import InvalidInput
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.llm import (
    Done,
    FinishReason,
    GeneratorLlmStream,
    LlmError,
    LlmEvent,
    LlmRequest,
    TextDelta,
    ToolCallDelta,
    ToolChoice,
    ToolChoiceMode,
)

WEATHER = ToolSpec(name="get_weather", description="Weather for a city")


def test_a_request_refuses_a_forced_tool_it_does_not_offer() -> None:
    with pytest.raises(InvalidInput, match="book_table"):
        LlmRequest(messages=(UserMessage(text="hi"),), tools=(WEATHER,), tool_choice=ToolChoice.tool("book_table"))


def test_a_request_refuses_duplicate_tool_names_and_required_without_tools() -> None:
    with pytest.raises(InvalidInput, match="unique"):
        LlmRequest(messages=(), tools=(WEATHER, WEATHER))
    with pytest.raises(InvalidInput, match="required"):
        LlmRequest(messages=(), tool_choice=ToolChoice.REQUIRED)


def test_a_forced_tool_choice_needs_a_name_and_the_others_none() -> None:
    assert ToolChoice.tool("get_weather").mode is ToolChoiceMode.TOOL
    with pytest.raises(InvalidInput):
        ToolChoice(ToolChoiceMode.TOOL)
    with pytest.raises(InvalidInput):
        ToolChoice(ToolChoiceMode.AUTO, "get_weather")


def test_a_request_finds_only_declared_tools_and_its_repr_hides_the_messages() -> None:
    req = LlmRequest(messages=(SystemMessage(text="be brief"), UserMessage(text="secret")), tools=(WEATHER,))
    assert req.tool("get_weather") is WEATHER
    assert req.tool("rm_rf") is None
    assert "secret" not in repr(req) and "<2 messages>" in repr(req)


def test_a_tool_call_delta_repr_never_shows_arguments() -> None:
    delta = ToolCallDelta(index=0, id="call_1", name="get_weather", arguments_fragment='{"city": "Oslo"}')
    assert "Oslo" not in repr(delta)


async def _events(*events: LlmEvent, raise_after: ProviderError | None = None) -> AsyncGenerator[LlmEvent, None]:
    for e in events:
        yield e
    if raise_after is not None:
        raise raise_after


async def test_a_generator_stream_stops_after_done_even_if_the_generator_has_more() -> None:
    stream = GeneratorLlmStream("test", _events(TextDelta(text="hi"), Done(finish_reason=FinishReason.STOP), TextDelta(text="x")))
    async with stream:
        got = [e async for e in stream]
    assert got == [TextDelta(text="hi"), Done(finish_reason=FinishReason.STOP)]


async def test_a_generator_that_ends_without_a_finish_yields_a_protocol_error() -> None:
    got = [e async for e in GeneratorLlmStream("test", _events(TextDelta(text="hi")))]
    assert isinstance(got[-1], LlmError) and got[-1].error.kind is ProviderErrorKind.PROTOCOL
    assert len(got) == 2


async def test_a_provider_error_raised_by_the_generator_becomes_the_terminal_error_event() -> None:
    err = ProviderError("test", ProviderErrorKind.RATE_LIMITED, "slow down", status=429)
    got = [e async for e in GeneratorLlmStream("test", _events(raise_after=err))]
    assert got == [LlmError(error=err)]


async def test_closing_a_stream_closes_the_generator_so_its_request_is_cancelled() -> None:
    closed: list[bool] = []

    async def gen() -> AsyncGenerator[LlmEvent, None]:
        try:
            yield TextDelta(text="a")
            yield TextDelta(text="b")
        finally:
            closed.append(True)

    async with GeneratorLlmStream("test", gen()) as stream:
        assert await anext(stream) == TextDelta(text="a")
    assert closed == [True]
    assert [e async for e in stream] == []


def test_the_streamed_deltas_are_the_assemblers_own_types_so_nothing_rewraps_them() -> None:
    from brisvox.agent import Context, assemble
    from brisvox.providers import llm

    assert (llm.TextDelta, llm.ToolCallDelta, llm.ProviderDataDelta) == (
        assemble.TextDelta, assemble.ToolCallDelta, assemble.ProviderDataDelta
    )
    a = assemble.ResponseAssembler()
    a.push(llm.TextDelta(text="ok"))
    a.push(llm.ToolCallDelta(index=0, id="call_1", name="f", arguments_fragment='{"x": 1}'))
    response = a.finish(0, Context())
    assert response.text == "ok" and [c.arguments for c in response.valid_calls()] == [{"x": 1}]
