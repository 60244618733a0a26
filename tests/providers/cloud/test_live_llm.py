"""Live variants of the LLM scenarios: real vendors, loose assertions.

They run only with ``BRISVOX_LIVE_TESTS=1`` and the vendor's key in the environment
(``OPENAI_API_KEY``, ``OPENROUTER_API_KEY``, ``ANTHROPIC_API_KEY``, ``GEMINI_API_KEY``; an
Ollama server at ``OLLAMA_BASE_URL`` with ``OLLAMA_MODEL``) and skip with a message
otherwise.  The loose checks hold whatever a real model chooses; they are also run
against the scripted loopback servers below, so a mistake in them shows in the normal suite.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from brisvox.agent import Context
from brisvox.core.clock import SystemClock
from brisvox.providers.cloud.anthropic import AnthropicLlm, AnthropicOptions
from brisvox.providers.cloud.gemini import GeminiLlm, GeminiOptions
from brisvox.providers.cloud.openai_compat import OpenAiCompatLlm, OpenAiCompatOptions
from brisvox.providers.llm import Done, LlmProvider, LlmRequest

from ._llm_wire import Collected, Script, T, VendorFake, assistant_message, call, collect, interleave
from .test_llm_scenarios import TOOLS, make

LIVE = os.environ.get("BRISVOX_LIVE_TESTS") == "1"

CITIES = ("Paris", "Tokyo", "Lima")


def loose_parallel_round(got: Collected) -> None:
    """A real model asked for three cities' weather: three get_weather calls, or an answer in words."""
    assert isinstance(got.terminal, Done), f"the response failed: {got.terminal}"
    if got.calls:
        names = {c["name"] for c in got.calls}
        assert names <= {"get_weather", "get_customer"}, names
        cities = {json.loads(c["args"] or "{}").get("city", "") for c in got.calls}
        assert any(city in " ".join(cities) for city in CITIES), cities
    else:
        assert got.text.strip(), "neither a call nor text"


def loose_final_round(got: Collected) -> None:
    assert isinstance(got.terminal, Done), f"the response failed: {got.terminal}"
    assert got.text.strip() or got.calls


async def loose_scenario(llm: LlmProvider) -> None:
    ctx = Context()
    ctx.push_system("You are a phone agent. Use the tools. Answer in one short sentence.")
    ctx.push_user("What is the weather in Paris, Tokyo and Lima right now?")
    async with llm.stream(LlmRequest(messages=ctx.messages, tools=TOOLS, max_tokens=400)) as stream:
        got = collect([e async for e in stream])
    loose_parallel_round(got)
    if not got.calls:
        return
    msg = assistant_message(ctx, 1, got)
    ctx.push(msg)
    for c in msg.tool_calls:
        ctx.push_tool_result(c.id, json.dumps({"city": c.arguments.get("city"), "sky": "clear", "celsius": 20}))
    async with llm.stream(LlmRequest(messages=ctx.messages, tools=TOOLS, max_tokens=400)) as stream:
        loose_final_round(collect([e async for e in stream]))


@pytest.mark.parametrize("vendor", ["openai", "anthropic", "gemini"])
async def test_the_loose_assertions_hold_on_the_scripted_servers(vendor: str) -> None:
    calls = interleave(*(call(i, f"call_{i}", "get_weather", {"city": c}) for i, c in enumerate(CITIES)))
    fake = VendorFake(vendor, [Script(calls, tool_use=True), Script([T("Clear skies everywhere.")])])
    async with fake:
        await loose_scenario(make(vendor, fake.server.base_url))
    assert len(fake.requests) == 2


def _live(key_var: str | None) -> None:
    if not LIVE:
        pytest.skip("live provider tests need BRISVOX_LIVE_TESTS=1")
    if key_var is not None and not os.environ.get(key_var):
        pytest.skip(f"live test needs {key_var} in the environment")


def _live_provider(vendor: str) -> Any:
    clock = SystemClock()
    if vendor == "openai":
        return OpenAiCompatLlm(OpenAiCompatOptions.preset("openai", model=os.environ.get("OPENAI_MODEL", "gpt-4.1-mini")), clock)
    if vendor == "openrouter":
        model = os.environ.get("OPENROUTER_MODEL", "openai/gpt-4.1-mini")
        return OpenAiCompatLlm(OpenAiCompatOptions.preset("openrouter", model=model), clock)
    if vendor == "ollama":
        base = os.environ.get("OLLAMA_BASE_URL", "http://127.0.0.1:11434/v1")
        return OpenAiCompatLlm(OpenAiCompatOptions.preset("ollama", model=os.environ["OLLAMA_MODEL"], base_url=base), clock)
    if vendor == "anthropic":
        model = os.environ.get("ANTHROPIC_MODEL", "claude-haiku-4-5")
        return AnthropicLlm(AnthropicOptions.from_env(model=model), clock)
    return GeminiLlm(GeminiOptions.from_env(model=os.environ.get("GEMINI_MODEL", "gemini-2.5-flash")), clock)


_KEYS = {
    "openai": "OPENAI_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "ollama": "OLLAMA_MODEL",
    "anthropic": "ANTHROPIC_API_KEY",
    "gemini": "GEMINI_API_KEY",
}


@pytest.mark.realtime
@pytest.mark.parametrize("vendor", sorted(_KEYS))
async def test_live_parallel_weather_lookups(vendor: str) -> None:
    _live(_KEYS[vendor])
    llm = _live_provider(vendor)
    try:
        await loose_scenario(llm)
    finally:
        await llm.aclose()



VOICE_PROMPTS = (
    "Hi, I'd like to book a table for two tonight.",
    "What time do you open on Sundays?",
    "Can you tell me a bit about your menu?",
    "Is there parking near the restaurant?",
    "Thanks, that's all for now.",
)


@pytest.mark.realtime
async def test_live_ollama_voice_latency() -> None:
    """Time to the first text token and to the end of the first sentence, p50 over five prompts."""
    _live("OLLAMA_MODEL")
    import re
    import statistics

    from brisvox.providers.llm import TextDelta

    clock = SystemClock()
    llm = _live_provider("ollama")
    await llm.warm()
    ttft: list[float] = []
    sentence: list[float] = []
    try:
        for prompt in VOICE_PROMPTS:
            ctx = Context()
            ctx.push_system("You are a restaurant's phone agent. Answer in one or two short sentences.")
            ctx.push_user(prompt)
            t0 = clock.now()
            first: float | None = None
            end: float | None = None
            text = ""
            async with llm.stream(LlmRequest(messages=ctx.messages, max_tokens=120)) as stream:
                async for event in stream:
                    if isinstance(event, TextDelta) and event.text:
                        first = clock.now() - t0 if first is None else first
                        text += event.text
                        if end is None and re.search(r"[.!?](\s|$)", text):
                            end = clock.now() - t0
            if first is not None:
                ttft.append(first)
            if end is not None:
                sentence.append(end)
    finally:
        await llm.aclose()
    assert ttft, "no spoken text at all"
    print(f"LIVE ollama {os.environ['OLLAMA_MODEL']}: TTFT p50 {statistics.median(ttft) * 1000:.0f} ms, "
          f"first sentence p50 {statistics.median(sentence) * 1000 if sentence else float('nan'):.0f} ms")
