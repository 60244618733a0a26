"""The three model-backed brains against a loopback server of each vendor's streaming wire format."""

from __future__ import annotations

from typing import Any

import pytest

import brisvox
from brisvox.core.errors import ConfigError
from brisvox.sdk import AnthropicBrain, GeminiBrain, ModelBrain, OpenAIBrain, needs_result_now
from brisvox.sdk.testing import BrainDriver
from tests.providers.cloud._llm_wire import Script, T, VendorFake, call
from tests.providers.cloud.test_llm_scenarios import KEY, VENDORS, results_of_last_round, wire_key

SYSTEM = "You are a diabetes coach."


class Average:
    """The tools every vendor's brain below carries (one marked read)."""

    @needs_result_now
    @brisvox.tool.read_only
    async def weekly_average(self) -> dict[str, float]:
        """The user's average glucose this week, in mmol/L."""
        return {"mmol": 6.1}


class OpenAICoach(Average, OpenAIBrain):
    pass


class AnthropicCoach(Average, AnthropicBrain):
    pass


class GeminiCoach(Average, GeminiBrain):
    pass


def brain(vendor: str, base_url: str) -> ModelBrain:
    options: dict[str, Any] = {"base_url": base_url, "api_key": KEY, "system": SYSTEM}
    if vendor == "openai":
        return OpenAICoach(model="gpt-test", **options)
    if vendor == "anthropic":
        return AnthropicCoach(model="claude-test", **options)
    return GeminiCoach(model="gemini-test", **options)


def declared(vendor: str, body: dict[str, Any]) -> list[str]:
    if vendor == "openai":
        return [t["function"]["name"] for t in body["tools"]]
    if vendor == "anthropic":
        return [t["name"] for t in body["tools"]]
    return [f["name"] for t in body["tools"] for f in t["functionDeclarations"]]


def system_of(vendor: str, body: dict[str, Any]) -> str:
    if vendor == "openai":
        return str(body["messages"][0]["content"])
    if vendor == "anthropic":
        return str(body["system"])
    return str(body["systemInstruction"])


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_marked_tool_turn_streams_says_and_hands_the_vendor_the_result_in_its_shape(vendor: str) -> None:
    fake = VendorFake(vendor, [
        Script([T("Let me check. "), *call(0, "call_a", "weekly_average", {})], tool_use=True),
        Script([T("Your average"), T(" is 6.1.")]),
    ])
    async with fake, BrainDriver(brain(vendor, fake.server.base_url)) as driver:
        turn = await driver.user_says("How am I doing?")
    assert turn.completed and turn.said == ("Let me check. ", "Your average is 6.1.")
    first, second = fake.bodies()
    assert declared(vendor, first) == ["weekly_average"]
    assert SYSTEM in system_of(vendor, first)
    assert results_of_last_round(vendor, second) == [(wire_key(vendor, "call_a", "weekly_average"), {"mmol": 6.1}, False)]
    assert KEY in " ".join(fake.requests[0].headers.values())


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_vendor_error_is_logged_and_the_caller_hears_the_fallback(vendor: str,
                                                                        caplog: pytest.LogCaptureFixture) -> None:
    fake = VendorFake(vendor, [400])
    async with fake, BrainDriver(brain(vendor, fake.server.base_url)) as driver:
        turn = await driver.user_says("Hi")
    assert not turn.completed and len(turn.said) == 1
    assert any("the model failed" in r.getMessage() for r in caplog.records)


def test_a_missing_key_is_a_config_error_naming_its_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    with pytest.raises(ConfigError, match="OPENAI_API_KEY"):
        OpenAIBrain(model="m")
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        AnthropicBrain(model="m")
    with pytest.raises(ConfigError, match="GEMINI_API_KEY"):
        GeminiBrain(model="m")


def test_a_local_openai_compatible_server_needs_no_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("VLLM_API_KEY", raising=False)
    local = OpenAIBrain(model="llama", preset="ollama")
    assert "127.0.0.1:11434" in repr(local.llm)
    custom = OpenAIBrain(model="m", base_url="http://127.0.0.1:9/v1", api_key="k")
    assert "127.0.0.1:9" in repr(custom.llm)
