"""run_s2s_call over the two real adapters, each against its loopback vendor (the spec's parallel scenario)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from websockets.asyncio.server import ServerConnection

from brisvox.core.clock import Clock, SimClock
from brisvox.engine.events import BotText
from brisvox.providers.cloud.gemini_live import GeminiLive
from brisvox.providers.cloud.openai_realtime import OpenAiRealtime
from brisvox.providers.s2s import S2sConfig, S2sProvider
from brisvox.transport import LoopbackClient
from tests.engine.s2s_harness import s2s_call, until
from tests.providers.cloud import _s2s_rig as rig
from tests.providers.cloud import test_gemini_live as gemini
from tests.providers.cloud import test_openai_realtime as openai
from tests.providers.cloud._fake_ws import FakeWsServer


async def parallel_over(vendor: rig.Vendor, provider: Callable[[str, Clock], S2sProvider],
                        config: S2sConfig) -> tuple[rig.Script, rig.Tools, list[Any]]:
    clock = SimClock()
    tools = rig.Tools(clock)
    script = rig.Script(vendor, rig.PARALLEL)
    async with FakeWsServer(script) as server:

        async def vendor_side() -> None:
            await until(clock, lambda: len(script.answers) == 1)

        result = await s2s_call(clock, provider(server.url, clock), vendor_side, config=config,
                                tools=tools.registry(), linger=0.5)
    return script, tools, result.events


async def test_openai_realtime_answers_three_parallel_calls_in_call_order_with_one_response_create() -> None:
    script, tools, events = await parallel_over(openai.Realtime(), lambda url, clock: OpenAiRealtime(
        openai.options(url), clock), S2sConfig())
    (answer,) = script.answers
    outputs = openai.outputs(answer)
    assert [cid for cid, _ in outputs] == ["c1", "c2", "c3"]
    assert [o["what"] for _, o in outputs] == ["a", "b", "c"]
    assert [m["type"] for m in answer].count("response.create") == 1
    assert any(m["type"] == "input_audio_buffer.append" for m in answer)  # the caller's audio went in
    assert [e.text for e in events if isinstance(e, BotText)] == ["Done."]
    assert [w for w, _ in tools.finished] == ["b", "c", "a"]  # they ran at the same time


async def test_gemini_live_answers_three_parallel_calls_in_call_order_in_one_tool_response() -> None:
    script, tools, events = await parallel_over(gemini.Live(), lambda url, clock: GeminiLive(
        gemini.options(url), clock), S2sConfig(input_rate=16_000))
    (answer,) = script.answers
    responses = gemini.responses(answer)
    assert [r["id"] for r in responses] == ["c1", "c2", "c3"]
    assert [r["response"]["what"] for r in responses] == ["a", "b", "c"]
    assert any("realtimeInput" in m for m in answer)  # the caller's audio went in
    assert not any("clientContent" in m for m in script.trailing)  # the toolResponse was the one request
    assert [e.text for e in events if isinstance(e, BotText)] == ["Done."]
    assert [w for w, _ in tools.finished] == ["b", "c", "a"]  # they ran at the same time


class Typed:
    """A vendor that, after its handshake, keeps every message but the caller's audio and answers each
    response request (``asks``: is this message one) with a short reply."""

    def __init__(self, vendor: rig.Vendor, asks: Callable[[dict[str, Any]], bool]) -> None:
        self.vendor, self.asks = vendor, asks
        self.got: list[dict[str, Any]] = []

    def requests(self) -> int:
        return sum(1 for m in self.got if self.asks(m))

    async def __call__(self, ws: ServerConnection, up: object) -> None:
        await self.vendor.handshake(ws)
        async for raw in ws:
            msg = json.loads(raw)
            if msg.get("type") != "input_audio_buffer.append" and "realtimeInput" not in msg:
                self.got.append(msg)
            if self.asks(msg):
                await self.vendor.finish(ws)  # a short answer, then the response is done


async def typed_over(vendor: Typed, provider: Callable[[str, Clock], S2sProvider], config: S2sConfig) -> None:
    """The caller types a message, then presses 5; the vendor keeps what reached it."""
    clock = SimClock()

    async def caller(client: LoopbackClient) -> None:
        await client.send_text("A table for two, please.")
        await until(clock, lambda: vendor.requests() == 1)
        await clock.sleep(0.5)  # the short reply has played and its response is done
        await client.send_dtmf("5")

    async with FakeWsServer(vendor) as server:
        await s2s_call(clock, provider(server.url, clock), lambda: until(clock, lambda: vendor.requests() == 2),
                       config=config, caller=caller)


async def test_openai_realtime_gets_typed_text_and_a_key_as_user_items_each_with_a_response_create() -> None:
    vendor = Typed(openai.Realtime(), lambda m: m["type"] == "response.create")
    await typed_over(vendor, lambda url, clock: OpenAiRealtime(openai.options(url), clock), S2sConfig())

    def user(text: str) -> dict[str, Any]:
        return {"type": "conversation.item.create",
                "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}}

    assert vendor.got == [user("A table for two, please."), {"type": "response.create"},
                          user("[the caller pressed the key 5]"), {"type": "response.create"}]


async def test_gemini_live_gets_typed_text_and_a_key_as_user_turns_each_completed_to_ask_for_a_turn() -> None:
    vendor = Typed(gemini.Live(), lambda m: m.get("clientContent", {}).get("turnComplete") is True)
    await typed_over(vendor, lambda url, clock: GeminiLive(gemini.options(url), clock), S2sConfig(input_rate=16_000))

    def user(text: str) -> dict[str, Any]:
        return {"clientContent": {"turns": [{"role": "user", "parts": [{"text": text}]}], "turnComplete": False}}

    ask = {"clientContent": {"turnComplete": True}}
    assert vendor.got == [user("A table for two, please."), ask, user("[the caller pressed the key 5]"), ask]
