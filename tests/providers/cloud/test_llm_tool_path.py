"""The adapters on the production tool path: the agent's ResponseAssembler and ToolEngine.

Stream events go through the real assembler (ids minted there), the calls run in the real
engine (schema validation, parallel execution, issue-order results), and the next request
is read on the vendor's wire.  This pins that the adapters' deltas and the engine's
results fit each other, not only the test's own mini assembler.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from brisvox.agent import Context
from brisvox.agent import assemble as asm
from brisvox.agent.tools import CancelToken, ToolEngine, ToolRegistry
from brisvox.core.clock import SimClock
from brisvox.providers.llm import (
    Done,
    LlmEvent,
    LlmProvider,
    LlmRequest,
    ProviderDataDelta,
    TextDelta,
    ToolCallDelta,
)

from ._llm_wire import Script, T, VendorFake, call, interleave
from .test_llm_scenarios import TOOLS, VENDORS, make, results_of_last_round, start


def to_delta(event: LlmEvent) -> asm.Delta | None:
    # The adapters' deltas are the assembler's own types: nothing to translate.
    if isinstance(event, TextDelta | ToolCallDelta | ProviderDataDelta):
        return event
    return None


async def round_trip(llm: LlmProvider, ctx: Context, engine: ToolEngine, epoch: int) -> tuple[asm.Response, Any]:
    assembler = asm.ResponseAssembler()
    terminal = None
    async with llm.stream(LlmRequest(messages=ctx.messages, tools=TOOLS)) as stream:
        async for event in stream:
            delta = to_delta(event)
            if delta is not None:
                assembler.push(delta)
            else:
                terminal = event
    response = assembler.finish(epoch, ctx)
    message = response.assistant_message()
    if message is not None:
        ctx.push(message)
    if response.calls:
        execution = await engine.execute(list(response.calls), epoch, CancelToken())
        execution.append_to(ctx)
    return response, terminal


def registry(clock: SimClock, log: list[tuple[str, float, float]]) -> ToolRegistry:
    reg = ToolRegistry()

    async def weather(args: dict[str, Any], ctx: Any) -> Any:
        city = args["city"]
        start_t = clock.now()
        await clock.sleep({"Izmir": 0.3, "Oslo": 0.2, "Lima": 0.1}.get(city, 0.1))  # finish in reverse order
        log.append((city, start_t, clock.now()))
        return {"city": city, "celsius": len(city) * 3}

    async def customer(args: dict[str, Any], ctx: Any) -> Any:
        return {"city": "Rome"}

    by_name = {t.name: t for t in TOOLS}
    reg.register(by_name["get_weather"], weather)
    reg.register(by_name["get_customer"], customer)
    return reg


@pytest.mark.parametrize("vendor", VENDORS)
async def test_three_parallel_calls_run_together_and_reach_the_vendor_in_call_order(vendor: str) -> None:
    clock = SimClock()
    ran: list[tuple[str, float, float]] = []
    cities = ["Izmir", "Oslo", "Lima"]
    fragments = interleave(*(call(i, f"call_{i}", "get_weather", {"city": c}, pieces=5) for i, c in enumerate(cities)))
    fake = VendorFake(vendor, [Script([T("Checking. "), *fragments], tool_use=True), Script([T("All warm.")])])
    ctx = start("Weather in Izmir, Oslo and Lima?")
    async with fake, ToolEngine(registry(clock, ran), "s1", clock) as engine:
        llm = make(vendor, fake.server.base_url)
        t0 = clock.now()
        first, _ = await round_trip(llm, ctx, engine, epoch=1)
        tool_phase = clock.now() - t0
        _, terminal = await round_trip(llm, ctx, engine, epoch=1)
    assert [c.id for c in first.valid_calls()] == ["t1.0", "t1.1", "t1.2"]
    assert max(s for _, s, _ in ran) < min(e for _, _, e in ran), "every call started before the first finished"
    assert [c for c, _, _ in ran] == ["Lima", "Oslo", "Izmir"]
    assert tool_phase == pytest.approx(0.3, abs=0.01)
    sent = results_of_last_round(vendor, fake.bodies()[1])
    assert [payload["city"] for _, payload, _ in sent] == cities
    assert isinstance(terminal, Done)
    assert len(fake.requests) == 2
    ctx.validate()


@pytest.mark.parametrize("vendor", VENDORS)
async def test_an_argument_outside_the_schema_reaches_the_vendor_as_an_invalid_arguments_error(vendor: str) -> None:
    clock = SimClock()
    fake = VendorFake(vendor, [
        Script(call(0, "call_x", "get_weather", {"city": "Oslo", "days": 9}), tool_use=True),
        Script([T("Three days at most.")]),
    ])
    ctx = start()
    async with fake, ToolEngine(registry(clock, []), "s1", clock) as engine:
        llm = make(vendor, fake.server.base_url)
        await round_trip(llm, ctx, engine, epoch=1)
        await round_trip(llm, ctx, engine, epoch=1)
    [(_, payload, is_error)] = results_of_last_round(vendor, fake.bodies()[1])
    assert is_error
    assert payload["error"] == "invalid_arguments"
    assert any(issue["path"] == "/days" for issue in payload["issues"])


@pytest.mark.parametrize("vendor", ["openai", "anthropic"])
async def test_arguments_that_are_not_json_are_answered_as_an_invalid_call_and_the_context_stays_valid(
    vendor: str,
) -> None:
    clock = SimClock()
    from ._llm_wire import C

    broken = [C(0, '{"city": "Os', id="call_b", name="get_weather"), C(0, "lo", last=True)]
    fake = VendorFake(vendor, [Script(broken, tool_use=True), Script([T("Sorry.")])])
    ctx = start()
    async with fake, ToolEngine(registry(clock, []), "s1", clock) as engine:
        llm = make(vendor, fake.server.base_url)
        first, _ = await round_trip(llm, ctx, engine, epoch=1)
        await round_trip(llm, ctx, engine, epoch=1)
    assert first.invalid_calls() and not first.valid_calls()
    [(_, payload, is_error)] = results_of_last_round(vendor, fake.bodies()[1])
    assert is_error and json.dumps(payload)
    ctx.validate()
