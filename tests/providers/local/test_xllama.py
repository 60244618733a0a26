from __future__ import annotations

import json
import os

import pytest

from brisvox.agent import AssistantMessage, SystemMessage, ToolCall, ToolMessage, ToolSpec, UserMessage
from brisvox.inference import model_path
from brisvox.inference.models import QWEN_CODER_0_5B
from brisvox.providers.llm import (
    Done,
    FinishReason,
    LlmError,
    LlmEvent,
    LlmRequest,
    TextDelta,
    ToolCallDelta,
    ToolChoice,
)
from brisvox.providers.local.llama import LlamaLlm, to_chat_messages

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def test_the_context_maps_onto_the_chat_form_the_model_template_reads() -> None:
    call = ToolCall(id="t1.1", name="get_weather", arguments={"city": "Oslo"})
    msgs = to_chat_messages(
        (
            SystemMessage(text="Be brief."),
            UserMessage(text="Weather in Oslo?"),
            AssistantMessage(text="", tool_calls=(call,)),
            ToolMessage(call_id="t1.1", content='{"temp": 3}'),
        )
    )
    assert msgs == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Oslo?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"id": "t1.1", "type": "function", "function": {"name": "get_weather", "arguments": {"city": "Oslo"}}}],
        },
        {"role": "tool", "tool_call_id": "t1.1", "content": '{"temp": 3}'},
    ]


def _model_or_skip() -> LlamaLlm:
    # Loading 491 MB and generating costs 20-30 s on a busy 2-core machine: opt in.
    if os.environ.get("BRISVOX_LOCAL_LLM_TESTS") != "1":
        pytest.skip("set BRISVOX_LOCAL_LLM_TESTS=1 to run the local LLM (local-llm extra, fetched GGUF)")
    pytest.importorskip("llama_cpp", reason="the local-llm extra (llama-cpp-python) is not installed")
    if not model_path(QWEN_CODER_0_5B).is_file():
        pytest.skip(f"the GGUF is not fetched (brisvox models fetch {QWEN_CODER_0_5B.name})")
    return LlamaLlm()


async def _events(llm: LlamaLlm, request: LlmRequest) -> list[LlmEvent]:
    async with llm.stream(request) as stream:
        return [e async for e in stream]


@pytest.mark.slow
async def test_the_local_llm_answers_in_text_and_a_forced_tool_call_is_valid_json() -> None:
    llm = _model_or_skip()
    try:
        system = SystemMessage(text="You are a helpful assistant. Answer in one short sentence.")
        text_events = await _events(llm, LlmRequest(messages=(system, UserMessage(text="Say hello.")), max_tokens=8, temperature=0.0))
        forced = LlmRequest(
            messages=(system, UserMessage(text="What is the weather in Paris?")),
            tools=(WEATHER,),
            tool_choice=ToolChoice.tool("get_weather"),
            max_tokens=32,
            temperature=0.0,
        )
        call_events = await _events(llm, forced)
    finally:
        await llm.aclose()
    assert not any(isinstance(e, LlmError) for e in text_events + call_events), text_events + call_events
    assert "".join(e.text for e in text_events if isinstance(e, TextDelta)).strip()
    done = text_events[-1]
    assert isinstance(done, Done) and done.usage is not None and done.usage.output_tokens > 0
    deltas = [e for e in call_events if isinstance(e, ToolCallDelta)]
    assert {d.name for d in deltas if d.name} == {"get_weather"} and {d.index for d in deltas} == {0}
    args = json.loads("".join(d.arguments_fragment for d in deltas))
    assert isinstance(args, dict) and isinstance(args.get("city"), str)
    assert isinstance(call_events[-1], Done) and call_events[-1].finish_reason is FinishReason.TOOL_CALLS


@pytest.mark.slow
async def test_in_auto_mode_a_call_the_model_writes_as_text_becomes_a_tool_call_and_is_not_spoken() -> None:
    llm = _model_or_skip()
    try:
        request = LlmRequest(
            messages=(SystemMessage(text="You are a phone assistant."), UserMessage(text="What is the weather in Paris?")),
            tools=(WEATHER,),
            max_tokens=48,
            temperature=0.0,
        )
        events = await _events(llm, request)
    finally:
        await llm.aclose()
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [d.name for d in deltas] == ["get_weather"]
    assert json.loads(deltas[0].arguments_fragment) == {"city": "Paris"}
    assert not "".join(e.text for e in events if isinstance(e, TextDelta)).strip()
    assert isinstance(events[-1], Done) and events[-1].finish_reason is FinishReason.TOOL_CALLS
