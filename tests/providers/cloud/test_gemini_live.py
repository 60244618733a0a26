from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from websockets.asyncio.server import ServerConnection

from brisvox.agent.tools import ToolKind, ToolSpec
from brisvox.core.clock import SimClock
from brisvox.core.secret import Secret
from brisvox.providers.cloud.gemini_live import (
    GeminiLive,
    GeminiLiveOptions,
    LiveDecoder,
    build_setup,
    tool_response,
)
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.s2s import (
    BargeIn,
    S2sAudio,
    S2sConfig,
    S2sError,
    S2sInteractionEnded,
    S2sInterrupted,
    S2sReady,
    S2sResponseDone,
    S2sToolCall,
    S2sToolCallsCancelled,
    S2sToolResult,
    S2sTranscript,
    Scheduling,
    Speaker,
)

from . import _s2s_rig as rig
from ._fake_ws import FakeWsServer, Upgrade

KEY = "gemini-live-test-key-123"
PATH = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"


def options(url: str) -> GeminiLiveOptions:
    return GeminiLiveOptions(api_key=Secret(KEY), base_url=url)


class Live:
    """The Gemini Live side of a scenario."""

    def __init__(self) -> None:
        self.setup: dict[str, Any] | None = None

    async def handshake(self, ws: ServerConnection) -> None:
        self.setup = json.loads(await ws.recv())
        await ws.send(json.dumps({"setupComplete": {}}))

    async def send_calls(self, ws: ServerConnection, calls: Sequence[rig.Call]) -> None:
        functions = [{"id": cid, "name": name, "args": args} for cid, name, args in calls]
        await ws.send(json.dumps({"toolCall": {"functionCalls": functions}}))

    async def read_answer(self, ws: ServerConnection) -> list[dict[str, Any]]:
        got = []
        while True:
            msg = json.loads(await ws.recv())
            got.append(msg)
            if "toolResponse" in msg:  # the model goes on by itself after a toolResponse
                return got

    async def finish(self, ws: ServerConnection) -> None:
        audio = base64.b64encode(b"\x01\x00" * 240).decode()
        part = {"inlineData": {"mimeType": "audio/pcm;rate=24000", "data": audio}}
        await ws.send(json.dumps({"serverContent": {"modelTurn": {"parts": [part]}}}))
        await ws.send(json.dumps({"serverContent": {"outputTranscription": {"text": "Done."}}}))
        await ws.send(json.dumps({"serverContent": {"turnComplete": True}}))


async def run_scenario(rounds: list[list[rig.Call]]) -> tuple[rig.Script, rig.Tools, list[Any], float, Live]:
    vendor = Live()
    out = await rig.run_scenario(vendor, lambda url, clock: GeminiLive(options(url), clock), rounds, input_rate=16_000)
    return out.script, out.tools, out.seen, out.elapsed, vendor


def responses(answer: list[dict[str, Any]]) -> list[dict[str, Any]]:
    (message,) = [m for m in answer if "toolResponse" in m]
    return list(message["toolResponse"]["functionResponses"])


async def test_three_parallel_calls_are_answered_in_call_order_in_one_tool_response() -> None:
    script, tools, seen, elapsed, _ = await run_scenario(rig.PARALLEL)
    (answer,) = script.answers
    assert answer == [m for m in answer if "toolResponse" in m]  # one message, nothing before it
    got = responses(answer)
    assert [r["id"] for r in got] == ["c1", "c2", "c3"]
    assert [r["response"]["what"] for r in got] == ["a", "b", "c"]
    assert [w for w, _ in tools.finished] == ["b", "c", "a"]
    assert elapsed == pytest.approx(0.3)
    # request_response after results sends nothing more: the toolResponse is the one response request
    assert not any("clientContent" in m for m in script.trailing)
    assert isinstance(seen[-1], S2sInteractionEnded)
    assert any(isinstance(e, S2sAudio) for e in seen)
    assert S2sTranscript(Speaker.MODEL, "Done.") in seen


async def test_a_three_round_chain_sends_one_tool_response_per_round() -> None:
    script, tools, _, _, _ = await run_scenario(rig.CHAIN)
    assert [[r["id"] for r in responses(a)] for a in script.answers] == [["c1"], ["c2"], ["c3"]]
    assert all(len(a) == 1 for a in script.answers)
    assert [w for w, _ in tools.finished] == ["country", "capital", "weather"]


async def test_a_repeated_booking_is_answered_already_done_and_books_once() -> None:
    script, tools, _, _, _ = await run_scenario(rig.REPEATED_BOOKING)
    first, second = (responses(a)[0] for a in script.answers)
    assert first["response"] == {"booking": "BK-1001"}
    assert second["response"]["error"]["error"] == "already_done"
    assert tools.bookings == ["BK-1001"]


async def test_the_setup_declares_tools_with_parameters_json_schema_as_non_blocking() -> None:
    _, _, _, _, vendor = await run_scenario([])
    assert vendor.setup is not None
    setup = vendor.setup["setup"]
    assert setup["model"].startswith("models/")
    assert setup["generationConfig"]["responseModalities"] == ["AUDIO"]
    (decls,) = [t["functionDeclarations"] for t in setup["tools"]]
    booking = next(d for d in decls if d["name"] == "book_table")
    assert "parameters" not in booking
    assert booking["parametersJsonSchema"]["additionalProperties"] is False
    assert booking["behavior"] == "NON_BLOCKING"
    assert setup["inputAudioTranscription"] == {} and setup["outputAudioTranscription"] == {}


def test_our_barge_in_turns_the_vendors_interruption_off() -> None:
    spec = ToolSpec(name="t", description="d", parameters={"type": "object"}, kind=ToolKind.READ_ONLY)
    ours = build_setup(S2sConfig(tools=[spec], barge_in=BargeIn.OURS, non_blocking_tools=False), options("ws://x"))
    assert ours["setup"]["realtimeInputConfig"]["activityHandling"] == "NO_INTERRUPTION"
    assert "behavior" not in ours["setup"]["tools"][0]["functionDeclarations"][0]


def test_a_non_blocking_result_carries_its_scheduling_and_errors_are_wrapped() -> None:
    message = tool_response(
        [
            S2sToolResult("c1", "t", '{"ok": true}', scheduling=Scheduling.WHEN_IDLE),
            S2sToolResult("c2", "t", "plain text"),
            S2sToolResult("c3", "t", '{"error": "timeout"}', is_error=True),
        ]
    )
    first, second, third = message["toolResponse"]["functionResponses"]
    assert first == {"id": "c1", "name": "t", "response": {"ok": True, "scheduling": "WHEN_IDLE"}}
    assert second["response"] == {"output": "plain text"}
    assert third["response"] == {"error": {"error": "timeout"}}


async def test_the_key_goes_in_the_query_and_audio_as_realtime_input() -> None:
    received: list[dict[str, Any]] = []

    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        await Live().handshake(ws)
        async for raw in ws:
            received.append(json.loads(raw))

    async with FakeWsServer(handler) as server:
        provider = GeminiLive(options(server.url), SimClock())
        async with await provider.connect(S2sConfig(input_rate=16_000)) as session:
            await session.send_audio(b"\x00\x00" * 4)
            await session.add_note("NOTE: fact")
            await session.request_response()
            await session.truncate(None, 800)
            await SimClock().sleep(0.05)
        up = server.upgrades[0]
    assert up.path == PATH and up.query["key"] == [KEY]
    assert received[0] == {"realtimeInput": {"audio": {"data": "AAAAAAAAAAA=", "mimeType": "audio/pcm;rate=16000"}}}
    assert received[1]["clientContent"]["turns"][0]["parts"][0]["text"] == "NOTE: fact"
    assert received[1]["clientContent"]["turnComplete"] is False
    assert received[2] == {"clientContent": {"turnComplete": True}}  # a requested turn after a note
    assert "800 ms" in received[3]["clientContent"]["turns"][0]["parts"][0]["text"]


async def test_a_refused_upgrade_is_an_error_without_the_key() -> None:
    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        return

    async with FakeWsServer(handler, refuse_with=403) as server:
        with pytest.raises(ProviderError) as info:
            await GeminiLive(options(server.url), SimClock()).connect(S2sConfig())
    assert info.value.kind is ProviderErrorKind.AUTH and KEY not in str(info.value)


async def test_a_setup_refused_with_a_close_is_raised_with_its_kind() -> None:
    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        await ws.recv()
        await ws.close(1008, "Invalid JSON payload received. Unknown name \"parameters\"")

    async with FakeWsServer(handler) as server:
        with pytest.raises(ProviderError) as info:
            await GeminiLive(options(server.url), SimClock()).connect(S2sConfig())
    assert info.value.kind is ProviderErrorKind.INVALID_REQUEST


# --- the decoder -------------------------------------------------------------------------------


def test_the_decoder_maps_the_documented_messages() -> None:
    decode = LiveDecoder()
    assert decode('{"setupComplete": {}}') == [S2sReady()]
    assert decode(json.dumps({"serverContent": {"interrupted": True}})) == [S2sInterrupted()]
    assert decode(json.dumps({"serverContent": {"inputTranscription": {"text": "hi"}}})) == [
        S2sTranscript(Speaker.CALLER, "hi")
    ]
    assert decode(json.dumps({"toolCallCancellation": {"ids": ["c1"]}})) == [S2sToolCallsCancelled(("c1",))]
    calls = decode(json.dumps({"toolCall": {"functionCalls": [{"id": "c1", "name": "t", "args": {"a": 1}}]}}))
    assert calls == [S2sToolCall("c1", "t", {"a": 1}), S2sResponseDone()]
    (away,) = decode(json.dumps({"goAway": {"timeLeft": "10s"}}))
    assert isinstance(away, S2sError) and away.error.kind is ProviderErrorKind.CLOSED and not away.fatal


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff",
        "[]",
        '{"serverContent": 3}',
        '{"serverContent": {"modelTurn": {"parts": [{"inlineData": {"data": "!!"}}]}}}',
        '{"serverContent": {"modelTurn": {"parts": 1}}}',
        '{"toolCall": {}}',
        '{"toolCallCancellation": {"ids": [1]}}',
        '{"serverContent": {"outputTranscription": {}}}',
    ],
)
def test_bad_messages_become_typed_protocol_errors(raw: str | bytes) -> None:
    events = LiveDecoder()(raw)
    assert events and all(isinstance(e, S2sError) and e.error.kind is ProviderErrorKind.PROTOCOL for e in events)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)
_keys = st.sampled_from(
    ["setupComplete", "serverContent", "toolCall", "toolCallCancellation", "goAway", "error", "usageMetadata"]
)
_content = st.fixed_dictionaries(
    {},
    optional={
        "modelTurn": st.fixed_dictionaries({}, optional={"parts": st.lists(st.dictionaries(st.sampled_from(["inlineData", "text"]), _json, max_size=2), max_size=3) | _json}),
        "interrupted": _json,
        "turnComplete": _json,
        "inputTranscription": _json,
        "outputTranscription": _json,
    },
)


@settings(max_examples=300, deadline=None)
@given(body=st.dictionaries(_keys, _json | _content, max_size=3))
def test_the_decoder_never_raises_on_any_message(body: dict[str, Any]) -> None:
    for event in LiveDecoder()(json.dumps(body)):
        if isinstance(event, S2sError):
            assert isinstance(event.error, ProviderError)


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=64) | st.text(max_size=64))
def test_the_decoder_never_raises_on_any_bytes(raw: bytes | str) -> None:
    LiveDecoder()(raw)
