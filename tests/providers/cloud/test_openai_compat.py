"""Pure pieces of the OpenAI-compatible adapter: the decoder and the request builder."""

from __future__ import annotations

import json

from brisvox.agent import Context, ToolCall
from brisvox.core.secret import Secret
from brisvox.providers.cloud._sse import SseEvent
from brisvox.providers.cloud.openai_compat import OpenAiCompatOptions, OpenAiStreamDecoder, build_openai_body
from brisvox.providers.llm import Done, LlmRequest, ProviderDataDelta


def chunk(delta: dict[str, object], finish: str | None = None) -> SseEvent:
    return SseEvent("message", json.dumps({"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}))


def test_openrouter_reasoning_details_are_merged_by_index_and_kept_as_provider_data() -> None:
    dec = OpenAiStreamDecoder("openrouter")
    events = []
    for ev in (
        chunk({"reasoning_details": [{"type": "reasoning.text", "text": "Let me ", "index": 0, "format": "x"}]}),
        chunk({"reasoning_details": [{"type": "reasoning.text", "text": "check.", "index": 0, "signature": "s1"}]}),
        chunk({"reasoning_details": [{"type": "reasoning.encrypted", "data": "ZW5j", "index": 1}]}),
        chunk({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "f", "arguments": "{}"}}]}, "tool_calls"),
        SseEvent("message", "[DONE]"),
    ):
        events += dec.feed(ev)
    [data] = [e for e in events if isinstance(e, ProviderDataDelta)]
    assert data.data == {"openai_compat": {"reasoning_details": [
        {"type": "reasoning.text", "text": "Let me check.", "index": 0, "format": "x", "signature": "s1"},
        {"type": "reasoning.encrypted", "data": "ZW5j", "index": 1},
    ]}}
    assert isinstance(dec.done, Done)


def test_reasoning_details_are_echoed_on_their_assistant_message_and_foreign_data_is_not() -> None:
    details = [{"type": "reasoning.encrypted", "data": "ZW5j", "index": 0}]
    ctx = Context()
    ctx.push_user("hi")
    ctx.push_assistant(tool_calls=[ToolCall(id="t1.0", name="f", provider_id="c1")],
                       provider_data={"openai_compat": {"reasoning_details": details}})
    ctx.push_tool_result("t1.0", "{}")
    ctx.push_assistant("done", provider_data={"anthropic": {"thinking": []}})
    ctx.push_user("bye")
    body = build_openai_body(LlmRequest(messages=ctx.messages),
                             OpenAiCompatOptions.preset("openrouter", model="m", api_key=Secret("k")))
    first, second = (m for m in body["messages"] if m["role"] == "assistant")
    assert first["reasoning_details"] == details and first["content"] is None
    assert first["tool_calls"][0]["id"] == "c1"
    assert "reasoning_details" not in second
