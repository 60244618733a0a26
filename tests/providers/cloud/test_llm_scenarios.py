"""The tool-calling scenarios against each LLM adapter over a loopback server of its wire format.

Each scenario is one function run for every vendor: plain text, one call, three parallel
calls with interleaved argument fragments, a two-round chain, an invalid argument answered
with a structured error, a stream cut mid-way and a slow first token.  The assertions read
what reached the "vendor" on the next request: the results in call order, in its shape.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from brisvox.agent import Context, ToolSpec
from brisvox.core.clock import SimClock
from brisvox.core.secret import Secret
from brisvox.providers.cloud.anthropic import AnthropicLlm, AnthropicOptions
from brisvox.providers.cloud.gemini import GeminiLlm, GeminiOptions
from brisvox.providers.cloud.openai_compat import OpenAiCompatLlm, OpenAiCompatOptions
from brisvox.providers.errors import ProviderErrorKind
from brisvox.providers.llm import Done, FinishReason, LlmError, LlmProvider, LlmRequest, TextDelta
from brisvox.providers.resilient import ResiliencePolicy

from ._llm_wire import Cut, Pause, Script, T, VendorFake, assistant_message, call, collect, interleave

VENDORS = ["openai", "anthropic", "gemini"]
KEY = "sk-test-secret-0042"

WEATHER = ToolSpec(
    name="get_weather",
    description="Weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer",
                "maximum": 3}}, "required": ["city"], "additionalProperties": False},
)
CUSTOMER = ToolSpec(
    name="get_customer",
    description="The caller's customer record.",
    parameters={"type": "object", "properties": {}},
)
TOOLS = (CUSTOMER, WEATHER)


def make(vendor: str, base_url: str, policy: ResiliencePolicy | None = None) -> LlmProvider:
    clock = SimClock()
    extra: dict[str, Any] = {"policy": policy} if policy is not None else {}
    if vendor == "openai":
        return OpenAiCompatLlm(
            OpenAiCompatOptions.preset("openai", model="gpt-test", api_key=Secret(KEY), base_url=base_url, **extra),
            clock,
        )
    if vendor == "anthropic":
        return AnthropicLlm(AnthropicOptions(model="claude-test", api_key=Secret(KEY), base_url=base_url, **extra), clock)
    return GeminiLlm(GeminiOptions(model="gemini-test", api_key=Secret(KEY), base_url=base_url, **extra), clock)


async def run(llm: LlmProvider, ctx: Context) -> Any:
    async with llm.stream(LlmRequest(messages=ctx.messages, tools=TOOLS)) as stream:
        return collect([e async for e in stream])


# --- what each vendor's request holds -------------------------------------------------------


def results_of_last_round(vendor: str, body: dict[str, Any]) -> list[tuple[str, Any, bool]]:
    """(call's wire id or name, result payload, is_error) of the trailing results, in wire order."""
    if vendor == "openai":
        msgs = body["messages"]
        out = []
        for m in reversed(msgs):
            if m["role"] != "tool":
                break
            out.append((m["tool_call_id"], json.loads(m["content"]), "error" in json.loads(m["content"])))
        return out[::-1]
    if vendor == "anthropic":
        last = body["messages"][-1]
        assert last["role"] == "user"
        assert all(b["type"] == "tool_result" for b in last["content"]), "one user message of tool_result blocks"
        return [(b["tool_use_id"], json.loads(b["content"]), b.get("is_error", False)) for b in last["content"]]
    last = body["contents"][-1]
    assert last["role"] == "user"
    assert all("functionResponse" in p for p in last["parts"]), "one user content of functionResponse parts"
    out = []
    for p in last["parts"]:
        fr = p["functionResponse"]
        payload = fr["response"]
        is_error = "error" in payload
        out.append((fr.get("id") or fr["name"], payload.get("error", payload), is_error))
    return out


def issued_calls(vendor: str, body: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(wire id, name, arguments) of the last assistant message's calls as sent back to the vendor."""
    if vendor == "openai":
        m = next(m for m in reversed(body["messages"]) if m["role"] == "assistant")
        return [(c["id"], c["function"]["name"], json.loads(c["function"]["arguments"])) for c in m["tool_calls"]]
    if vendor == "anthropic":
        m = next(m for m in reversed(body["messages"]) if m["role"] == "assistant")
        return [(b["id"], b["name"], b["input"]) for b in m["content"] if b["type"] == "tool_use"]
    m = next(m for m in reversed(body["contents"]) if m["role"] == "model")
    return [(p["functionCall"].get("id") or p["functionCall"]["name"], p["functionCall"]["name"],
             p["functionCall"]["args"]) for p in m["parts"] if "functionCall" in p]


def wire_key(vendor: str, cid: str, name: str) -> str:
    return name if vendor == "gemini" else cid


def start(ctx_text: str = "What is the weather?") -> Context:
    ctx = Context()
    ctx.push_system("You are a phone agent.")
    ctx.push_user(ctx_text)
    return ctx


# --- scenarios ------------------------------------------------------------------------------


@pytest.mark.parametrize("vendor", VENDORS)
async def test_plain_text_streams_in_order_and_finishes_with_usage(vendor: str) -> None:
    fake = VendorFake(vendor, [Script([T("Hello"), T(", how can"), T(" I help?")])])
    async with fake:
        got = await run(make(vendor, fake.server.base_url), start("Hi"))
    assert got.text == "Hello, how can I help?"
    assert got.calls == []
    assert isinstance(got.terminal, Done) and got.terminal.finish_reason is FinishReason.STOP
    assert got.terminal.usage is not None
    assert (got.terminal.usage.input_tokens, got.terminal.usage.output_tokens) == (11, 7)
    assert len(fake.requests) == 1
    raw = fake.requests[0]
    assert KEY in " ".join(raw.headers.values()) or KEY in str(raw.query)


@pytest.mark.parametrize("vendor", VENDORS)
async def test_one_tool_call_is_assembled_and_its_result_reaches_the_next_request(vendor: str) -> None:
    fake = VendorFake(vendor, [
        Script([T("Let me check. "), *call(0, "call_a", "get_weather", {"city": "Paris"})], tool_use=True),
        Script([T("It is sunny in Paris.")]),
    ])
    ctx = start()
    async with fake:
        llm = make(vendor, fake.server.base_url)
        got = await run(llm, ctx)
        assert isinstance(got.terminal, Done) and got.terminal.finish_reason is FinishReason.TOOL_CALLS
        msg = assistant_message(ctx, 1, got)
        ctx.push(msg)
        assert [(c.name, c.arguments) for c in msg.tool_calls] == [("get_weather", {"city": "Paris"})]
        ctx.push_tool_result(msg.tool_calls[0].id, json.dumps({"sky": "sunny"}))
        second = await run(llm, ctx)
    assert second.text == "It is sunny in Paris."
    body = fake.bodies()[1]
    assert issued_calls(vendor, body) == [(wire_key(vendor, "call_a", "get_weather"), "get_weather", {"city": "Paris"})]
    assert results_of_last_round(vendor, body) == [(wire_key(vendor, "call_a", "get_weather"), {"sky": "sunny"}, False)]


@pytest.mark.parametrize("vendor", VENDORS)
async def test_three_parallel_calls_with_interleaved_fragments_return_results_in_call_order(vendor: str) -> None:
    cities = ["Izmir", "Oslo", "Lima"]
    fragments = interleave(*(call(i, f"call_{i}", "get_weather", {"city": c}, pieces=4) for i, c in enumerate(cities)))
    fake = VendorFake(vendor, [Script(fragments, tool_use=True), Script([T("Done.")])])
    ctx = start("Weather in Izmir, Oslo and Lima?")
    async with fake:
        llm = make(vendor, fake.server.base_url)
        got = await run(llm, ctx)
        msg = assistant_message(ctx, 1, got)
        ctx.push(msg)
        assert [c.arguments["city"] for c in msg.tool_calls] == cities
        # The tools finish in reverse order; the context holds them in completion order.
        for c in reversed(msg.tool_calls):
            ctx.push_tool_result(c.id, json.dumps({"city": c.arguments["city"], "temp": len(c.arguments["city"])}))
        await run(llm, ctx)
    body = fake.bodies()[1]
    sent = results_of_last_round(vendor, body)
    if vendor == "gemini":
        assert [r[1]["city"] for r in sent] == cities
    else:
        assert [r[0] for r in sent] == ["call_0", "call_1", "call_2"]
        assert [r[1]["city"] for r in sent] == cities
    assert len(fake.requests) == 2


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_two_round_chain_sends_each_result_before_the_call_that_needs_it(vendor: str) -> None:
    fake = VendorFake(vendor, [
        Script(call(0, "call_c", "get_customer", {}), tool_use=True),
        Script(call(0, "call_w", "get_weather", {"city": "Rome"}), tool_use=True),
        Script([T("In Rome it is 21 degrees.")]),
    ])
    ctx = start("Weather where I live?")
    async with fake:
        llm = make(vendor, fake.server.base_url)
        for result in ({"city": "Rome"}, {"temp": 21}):
            got = await run(llm, ctx)
            msg = assistant_message(ctx, 1, got)
            ctx.push(msg)
            ctx.push_tool_result(msg.tool_calls[0].id, json.dumps(result))
        final = await run(llm, ctx)
    assert final.text == "In Rome it is 21 degrees."
    assert [c.id for m in ctx.messages if hasattr(m, "tool_calls") for c in m.tool_calls] == ["t1.0", "t1.1"]
    second, third = fake.bodies()[1], fake.bodies()[2]
    assert results_of_last_round(vendor, second) == [(wire_key(vendor, "call_c", "get_customer"), {"city": "Rome"}, False)]
    assert results_of_last_round(vendor, third) == [(wire_key(vendor, "call_w", "get_weather"), {"temp": 21}, False)]
    # The chain's first round is still in the third request, in order.
    assert [c[1] for c in issued_calls(vendor, third)] == ["get_weather"]
    assert len(fake.requests) == 3


@pytest.mark.parametrize("vendor", VENDORS)
async def test_an_invalid_argument_is_answered_with_a_structured_error_in_the_vendor_shape(vendor: str) -> None:
    fake = VendorFake(vendor, [
        Script(call(0, "call_x", "get_weather", {"city": "Oslo", "days": 9}), tool_use=True),
        Script([T("I can look up three days at most.")]),
    ])
    ctx = start("Ten-day forecast for Oslo?")
    error = {"error": "invalid_arguments", "tool": "get_weather", "detail": "arguments do not match the schema",
             "issues": [{"path": "/days", "reason": "9 is greater than the maximum of 3"}], "truncated": False}
    async with fake:
        llm = make(vendor, fake.server.base_url)
        msg = assistant_message(ctx, 1, await run(llm, ctx))
        ctx.push(msg)
        ctx.push_tool_result(msg.tool_calls[0].id, json.dumps(error), is_error=True)
        got = await run(llm, ctx)
    assert got.text == "I can look up three days at most."
    [(key, payload, is_error)] = results_of_last_round(vendor, fake.bodies()[1])
    assert key == wire_key(vendor, "call_x", "get_weather")
    assert is_error
    assert payload["error"] == "invalid_arguments"
    assert payload["issues"][0]["path"] == "/days"


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_stream_cut_mid_way_ends_with_a_closed_error_and_is_not_retried(vendor: str) -> None:
    fake = VendorFake(vendor, [Script([T("The weather in"), Cut(), T(" never arrives")])])
    async with fake:
        got = await run(make(vendor, fake.server.base_url), start())
    assert got.text == "The weather in"
    assert isinstance(got.terminal, LlmError)
    assert got.terminal.error.kind is ProviderErrorKind.CLOSED
    assert len(fake.requests) == 1


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_slow_first_token_hits_the_first_token_timeout(vendor: str) -> None:
    fake = VendorFake(vendor, [Script([Pause(9.0), T("too late")])])
    clock = SimClock()
    async with fake:
        t0 = clock.now()
        got = await run(make(vendor, fake.server.base_url), start())
        waited = clock.now() - t0
    assert got.text == ""
    assert isinstance(got.terminal, LlmError) and got.terminal.error.kind is ProviderErrorKind.TIMEOUT
    assert waited == pytest.approx(8.0, abs=0.01)
    assert len(fake.requests) == 1


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_stall_after_the_first_token_hits_the_idle_timeout(vendor: str) -> None:
    fake = VendorFake(vendor, [Script([T("Hello"), Pause(20.0), T(" there")])])
    clock = SimClock()
    async with fake:
        t0 = clock.now()
        got = await run(make(vendor, fake.server.base_url), start())
        waited = clock.now() - t0
    assert got.text == "Hello"
    assert isinstance(got.terminal, LlmError) and got.terminal.error.kind is ProviderErrorKind.TIMEOUT
    assert waited == pytest.approx(15.0, abs=0.01)


@pytest.mark.parametrize("vendor", VENDORS)
async def test_an_overloaded_answer_before_the_stream_is_retried_with_backoff(vendor: str) -> None:
    fake = VendorFake(vendor, [503, Script([T("Hi.")])])
    async with fake:
        got = await run(make(vendor, fake.server.base_url), start())
    assert got.text == "Hi."
    assert len(fake.requests) == 2


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_refused_request_is_not_retried_and_is_typed(vendor: str) -> None:
    fake = VendorFake(vendor, [400, Script([T("never")])])
    async with fake:
        got = await run(make(vendor, fake.server.base_url), start())
    assert isinstance(got.terminal, LlmError)
    assert got.terminal.error.kind is ProviderErrorKind.INVALID_REQUEST
    assert got.terminal.error.status == 400
    assert len(fake.requests) == 1


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_refused_connection_is_a_connect_error_after_bounded_attempts(vendor: str) -> None:
    fake = VendorFake(vendor, [])
    async with fake:
        url = fake.server.base_url
    policy = ResiliencePolicy(max_attempts=2)
    got = await run(make(vendor, url, policy), start())
    assert isinstance(got.terminal, LlmError) and got.terminal.error.kind is ProviderErrorKind.CONNECT


@pytest.mark.parametrize("vendor", VENDORS)
async def test_the_api_key_is_redacted_in_reprs_and_errors(vendor: str) -> None:
    fake = VendorFake(vendor, [401])
    async with fake:
        llm = make(vendor, fake.server.base_url)
        got = await run(llm, start())
    assert KEY not in repr(llm)
    assert isinstance(got.terminal, LlmError) and got.terminal.error.kind is ProviderErrorKind.AUTH
    assert KEY not in str(got.terminal.error)



# --- round-trip provider data ----------------------------------------------------------------


async def test_anthropic_thinking_blocks_come_back_as_provider_data_and_are_echoed_before_the_calls() -> None:
    fake = VendorFake("anthropic", [
        Script(call(0, "toolu_1", "get_weather", {"city": "Oslo"}), tool_use=True, thinking="sig-abc"),
        Script([T("Cold.")]),
    ])
    ctx = start()
    async with fake:
        llm = make("anthropic", fake.server.base_url)
        got = await run(llm, ctx)
        assert got.response_data == {"anthropic": {"thinking": [
            {"type": "thinking", "thinking": "Let me think.", "signature": "sig-abc"}]}}
        msg = assistant_message(ctx, 1, got)
        ctx.push(msg)
        ctx.push_tool_result(msg.tool_calls[0].id, '{"temp": -3}')
        await run(llm, ctx)
    assistant = fake.bodies()[1]["messages"][-2]
    assert assistant["role"] == "assistant"
    assert [b["type"] for b in assistant["content"]] == ["thinking", "tool_use"]
    assert assistant["content"][0]["signature"] == "sig-abc"


async def test_gemini_thought_signatures_ride_on_the_call_and_are_echoed_on_the_same_part() -> None:
    calls = [*call(0, "", "get_weather", {"city": "Oslo"}), *call(1, "", "get_weather", {"city": "Rome"})]
    fake = VendorFake("gemini", [Script(calls, tool_use=True, signature="c2lnLTE="), Script([T("Fine.")])])
    ctx = start()
    async with fake:
        llm = make("gemini", fake.server.base_url)
        got = await run(llm, ctx)
        assert [c["provider_data"] for c in got.calls] == [{"gemini": {"thought_signature": "c2lnLTE="}}, None]
        msg = assistant_message(ctx, 1, got)
        ctx.push(msg)
        for c in msg.tool_calls:
            ctx.push_tool_result(c.id, '{"ok": true}')
        await run(llm, ctx)
    model = fake.bodies()[1]["contents"][-2]
    assert model["role"] == "model"
    assert model["parts"][0]["thoughtSignature"] == "c2lnLTE="
    assert "thoughtSignature" not in model["parts"][1]
    assert fake.bodies()[0]["tools"][0]["functionDeclarations"][1]["parametersJsonSchema"]["additionalProperties"] is False


async def test_a_request_never_ends_with_an_assistant_prefill_for_anthropic() -> None:
    fake = VendorFake("anthropic", [Script([T("Yes?")])])
    ctx = start("Hello")
    ctx.push_assistant("Hi, how can I")  # cut off by a barge-in, the caller said nothing yet
    async with fake:
        await run(make("anthropic", fake.server.base_url), ctx)
    body = fake.bodies()[0]
    assert body["messages"][-1]["role"] == "user"
    assert body["system"] == "You are a phone agent."


async def test_openai_compatible_presets_send_their_reasoning_effort_and_token_field() -> None:
    fake = VendorFake("openai", [Script([T("ok")])])
    async with fake:
        llm = OpenAiCompatLlm(OpenAiCompatOptions.preset("ollama", model="qwen3:4b", base_url=fake.server.base_url),
                              SimClock())
        async with llm.stream(LlmRequest(messages=start().messages, tools=TOOLS, max_tokens=50)) as stream:
            [e async for e in stream]
    body = fake.bodies()[0]
    assert body["reasoning_effort"] == "none"
    assert body["max_tokens"] == 50
    assert body["stream_options"] == {"include_usage": True}
    assert "authorization" not in fake.requests[0].headers


@pytest.mark.parametrize("vendor", VENDORS)
async def test_warm_opens_the_connection_that_the_first_request_then_reuses(vendor: str) -> None:
    fake = VendorFake(vendor, [401, Script([T("Hi.")])])
    async with fake:
        llm = make(vendor, fake.server.base_url)
        await llm.warm()
        got = await run(llm, start())
    assert got.text == "Hi."
    warm, first = fake.requests
    assert warm.method == "GET" and warm.path.endswith("/models")
    assert first.method == "POST" and first.peer == warm.peer


@pytest.mark.parametrize("vendor", VENDORS)
async def test_closing_the_stream_mid_response_releases_the_connection_at_once(vendor: str) -> None:
    fake = VendorFake(vendor, [Script([T("Hello"), Pause(1.0), T(" there"), Pause(60.0), T("!")]),
                               Script([T("Next.")])])
    clock = SimClock()
    async with fake:
        llm = make(vendor, fake.server.base_url)
        t0 = clock.now()
        async with llm.stream(LlmRequest(messages=start().messages, tools=TOOLS)) as stream:
            async for event in stream:
                if isinstance(event, TextDelta):
                    break  # a barge-in: the caller talks over the first words
        assert clock.now() - t0 < 1.0
        again = await run(llm, start())
    assert again.text == "Next."
