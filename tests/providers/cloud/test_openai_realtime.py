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
from brisvox.core.errors import InvalidInput
from brisvox.core.secret import Secret
from brisvox.providers.cloud.openai_realtime import (
    OpenAiRealtime,
    OpenAiRealtimeOptions,
    RealtimeDecoder,
    build_session_update,
    truncate_event,
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
    S2sSpeechStarted,
    S2sToolCall,
    S2sTranscript,
    Speaker,
)

from . import _s2s_rig as rig
from ._fake_ws import FakeWsServer, Upgrade

KEY = "sk-realtime-test-key-123"


def options(url: str) -> OpenAiRealtimeOptions:
    return OpenAiRealtimeOptions(api_key=Secret(KEY), base_url=url)


class Realtime:
    """The OpenAI Realtime side of a scenario."""

    def __init__(self) -> None:
        self.session_update: dict[str, Any] | None = None

    async def handshake(self, ws: ServerConnection) -> None:
        await ws.send(json.dumps({"type": "session.created", "session": {}}))
        self.session_update = json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "session.updated", "session": {}}))

    async def send_calls(self, ws: ServerConnection, calls: Sequence[rig.Call]) -> None:
        output = []
        for call_id, name, args in calls:
            item = {"type": "function_call", "call_id": call_id, "name": name, "arguments": json.dumps(args)}
            output.append(item)
            await ws.send(json.dumps({"type": "response.output_item.done", "item": item}))
        await ws.send(json.dumps({"type": "response.done", "response": {"id": "r", "status": "completed", "output": output}}))

    async def read_answer(self, ws: ServerConnection) -> list[dict[str, Any]]:
        got = []
        while True:
            msg = json.loads(await ws.recv())
            got.append(msg)
            if msg["type"] == "response.create":
                return got

    async def finish(self, ws: ServerConnection) -> None:
        audio = base64.b64encode(b"\x01\x00" * 240).decode()
        await ws.send(json.dumps({"type": "response.output_audio.delta", "item_id": "it9", "delta": audio}))
        await ws.send(json.dumps({"type": "response.output_audio_transcript.done", "item_id": "it9", "transcript": "Done."}))
        await ws.send(json.dumps({"type": "response.done", "response": {"id": "r9", "status": "completed", "output": []}}))


async def run_scenario(rounds: list[list[rig.Call]]) -> tuple[rig.Script, rig.Tools, list[Any], float]:
    vendor = Realtime()
    out = await rig.run_scenario(vendor, lambda url, clock: OpenAiRealtime(options(url), clock), rounds)
    assert vendor.session_update is not None and vendor.session_update["type"] == "session.update"
    return out.script, out.tools, out.seen, out.elapsed


def outputs(answer: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (m["item"]["call_id"], json.loads(m["item"]["output"]))
        for m in answer
        if m["type"] == "conversation.item.create" and m["item"]["type"] == "function_call_output"
    ]


async def test_three_parallel_calls_are_answered_in_call_order_with_one_response_request() -> None:
    script, tools, seen, elapsed = await run_scenario(rig.PARALLEL)
    (answer,) = script.answers
    assert [cid for cid, _ in outputs(answer)] == ["c1", "c2", "c3"]
    assert [out["what"] for _, out in outputs(answer)] == ["a", "b", "c"]
    assert [m["type"] for m in answer].count("response.create") == 1 and answer[-1]["type"] == "response.create"
    assert all(t == 0.0 for _, t in tools.started)  # every call started before the first finished
    assert [w for w, _ in tools.finished] == ["b", "c", "a"]
    assert elapsed == pytest.approx(0.3)  # together, not one after the other (0.6)
    assert isinstance(seen[-1], S2sInteractionEnded)
    assert any(isinstance(e, S2sAudio) and e.item_id == "it9" for e in seen)


async def test_a_three_round_chain_sends_one_result_and_one_response_request_per_round() -> None:
    script, tools, _, _ = await run_scenario(rig.CHAIN)
    assert len(script.answers) == 3
    for answer, expected in zip(script.answers, ["c1", "c2", "c3"], strict=True):
        assert [cid for cid, _ in outputs(answer)] == [expected]
        assert [m["type"] for m in answer] == ["conversation.item.create", "response.create"]
    assert [w for w, _ in tools.finished] == ["country", "capital", "weather"]


async def test_a_repeated_booking_is_answered_already_done_and_books_once() -> None:
    script, tools, _, _ = await run_scenario(rig.REPEATED_BOOKING)
    first, second = (outputs(a)[0][1] for a in script.answers)
    assert first == {"booking": "BK-1001"}
    assert second["error"] == "already_done"
    assert tools.bookings == ["BK-1001"]


async def test_the_session_update_carries_the_tools_audio_format_and_barge_in_setting() -> None:
    spec = ToolSpec(name="lookup", description="d", parameters={"type": "object"}, kind=ToolKind.READ_ONLY)
    ours = build_session_update(S2sConfig(instructions="hi", tools=[spec], barge_in=BargeIn.OURS), options("ws://x"))
    session = ours["session"]
    assert ours["type"] == "session.update" and session["type"] == "realtime"
    assert session["tools"] == [{"type": "function", "name": "lookup", "description": "d", "parameters": {"type": "object"}}]
    assert session["audio"]["input"]["format"] == {"type": "audio/pcm", "rate": 24_000}
    assert session["audio"]["input"]["turn_detection"]["interrupt_response"] is False
    model = build_session_update(S2sConfig(), options("ws://x"))
    assert model["session"]["audio"]["input"]["turn_detection"]["interrupt_response"] is True


async def test_connect_sends_the_key_as_a_bearer_header_and_the_model_in_the_query() -> None:
    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        await Realtime().handshake(ws)
        async for _ in ws:
            pass

    async with FakeWsServer(handler) as server:
        async with await OpenAiRealtime(options(server.url), SimClock()).connect(S2sConfig()) as session:
            await session.send_audio(b"\x00\x00" * 10)
        up = server.upgrades[0]
    assert up.path == "/v1/realtime" and up.query["model"] == ["gpt-realtime"]
    assert up.headers["Authorization"] == f"Bearer {KEY}"


async def test_truncate_tells_the_model_the_heard_position_of_its_item() -> None:
    received: list[dict[str, Any]] = []

    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        await Realtime().handshake(ws)
        async for raw in ws:
            received.append(json.loads(raw))

    async with FakeWsServer(handler) as server:
        session = await OpenAiRealtime(options(server.url), SimClock()).connect(S2sConfig())
        async with session:
            await session.truncate("it7", 1234)
            await session.add_note("NOTE: fact")
            await session.cancel_response()
            await SimClock().sleep(0.05)
    assert received[0] == {"type": "conversation.item.truncate", "item_id": "it7", "content_index": 0, "audio_end_ms": 1234}
    assert received[1]["item"]["role"] == "system" and received[1]["item"]["content"][0]["text"] == "NOTE: fact"
    assert received[2] == {"type": "response.cancel"}
    with pytest.raises(InvalidInput):
        truncate_event(None, 10)


async def test_a_refused_key_is_an_auth_error_that_does_not_show_the_key() -> None:
    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        return

    async with FakeWsServer(handler, refuse_with=401) as server:
        with pytest.raises(ProviderError) as info:
            await OpenAiRealtime(options(server.url), SimClock()).connect(S2sConfig())
    assert info.value.kind is ProviderErrorKind.AUTH and KEY not in str(info.value)


async def test_a_setup_the_vendor_never_accepts_times_out_on_the_injected_clock() -> None:
    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        async for _ in ws:
            pass

    clock = SimClock()
    async with FakeWsServer(handler) as server:
        start = clock.now()
        with pytest.raises(ProviderError) as info:
            await OpenAiRealtime(options(server.url), clock).connect(S2sConfig())
    assert info.value.kind is ProviderErrorKind.TIMEOUT
    assert clock.now() - start == pytest.approx(8.0)


async def test_a_vendor_error_during_the_setup_is_raised_with_its_kind() -> None:
    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        await ws.recv()
        err = {"type": "invalid_request_error", "message": "Unknown parameter: 'session.foo'"}
        await ws.send(json.dumps({"type": "error", "error": err}))
        async for _ in ws:
            pass

    async with FakeWsServer(handler) as server:
        with pytest.raises(ProviderError) as info:
            await OpenAiRealtime(options(server.url), SimClock()).connect(S2sConfig())
    assert info.value.kind is ProviderErrorKind.INVALID_REQUEST


async def test_a_dropped_connection_is_a_fatal_error_event_and_ends_the_session() -> None:
    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        await Realtime().handshake(ws)
        await ws.close(1011, "internal error")

    async with FakeWsServer(handler) as server:
        session = await OpenAiRealtime(options(server.url), SimClock()).connect(S2sConfig())
        async with session:
            events = [e async for e in session]
    assert len(events) == 1 and isinstance(events[0], S2sError) and events[0].fatal
    assert events[0].error.kind is ProviderErrorKind.SERVER


def test_a_connect_at_another_rate_is_refused() -> None:
    from brisvox.core.errors import ConfigError

    provider = OpenAiRealtime(options("ws://127.0.0.1:1"), SimClock())
    with pytest.raises(ConfigError, match="24000"):
        provider.connect(S2sConfig(input_rate=16_000)).send(None)


# --- the decoder -------------------------------------------------------------------------------


def test_the_decoder_maps_the_documented_events() -> None:
    decode = RealtimeDecoder()
    assert decode(json.dumps({"type": "session.updated", "session": {}})) == [S2sReady()]
    started = decode(json.dumps({"type": "input_audio_buffer.speech_started", "audio_start_ms": 500, "item_id": "u1"}))
    assert started == [S2sSpeechStarted(at_ms=500, item_id="u1")]
    heard = decode(json.dumps({"type": "conversation.item.input_audio_transcription.completed", "item_id": "u1", "transcript": "hi"}))
    assert heard == [S2sTranscript(Speaker.CALLER, "hi", final=True, item_id="u1")]
    beta = decode(json.dumps({"type": "response.audio_transcript.delta", "item_id": "a1", "delta": "Hel"}))
    assert beta == [S2sTranscript(Speaker.MODEL, "Hel", final=False, item_id="a1")]
    cancelled = decode(json.dumps({"type": "response.done", "response": {"status": "cancelled", "output": []}}))
    assert cancelled == [S2sInterrupted(), S2sResponseDone(interrupted=True), S2sInteractionEnded(interrupted=True)]
    bad_args = decode(json.dumps({"type": "response.output_item.done", "item": {"type": "function_call", "call_id": "c", "name": "n", "arguments": "[1]"}}))
    assert bad_args == [S2sToolCall("c", "n", {}, arguments_error="the arguments are not a JSON object")]
    assert decode(json.dumps({"type": "rate_limits.updated"})) == []


@pytest.mark.parametrize(
    "raw",
    [
        b"\xff",
        "[]",
        '{"type": 3}',
        '{"type": "response.output_audio.delta", "delta": "!!"}',
        '{"type": "response.output_audio.delta", "delta": "AA=="}',
        '{"type": "response.done"}',
        '{"type": "error", "error": "x"}',
        '{"type": "response.output_item.done", "item": {"type": "function_call"}}',
    ],
)
def test_bad_events_become_typed_protocol_errors(raw: str | bytes) -> None:
    (event,) = RealtimeDecoder()(raw)
    assert isinstance(event, S2sError) and not event.fatal
    assert event.error.kind is ProviderErrorKind.PROTOCOL


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
_types = st.sampled_from(
    [
        "session.updated",
        "response.output_audio.delta",
        "response.audio_transcript.delta",
        "response.output_audio_transcript.done",
        "conversation.item.input_audio_transcription.completed",
        "input_audio_buffer.speech_started",
        "input_audio_buffer.speech_stopped",
        "response.output_item.done",
        "response.done",
        "error",
    ]
)


@settings(max_examples=300, deadline=None)
@given(kind=_types, body=st.dictionaries(st.sampled_from(["delta", "transcript", "item", "response", "error", "item_id", "audio_start_ms"]), _json, max_size=4))
def test_the_decoder_never_raises_on_any_event(kind: str, body: dict[str, Any]) -> None:
    for event in RealtimeDecoder()(json.dumps({"type": kind, **body})):
        assert not isinstance(event, S2sError) or event.error.kind in (
            ProviderErrorKind.PROTOCOL,
            ProviderErrorKind.INVALID_REQUEST,
            ProviderErrorKind.SERVER,
            ProviderErrorKind.AUTH,
            ProviderErrorKind.RATE_LIMITED,
        )


@settings(max_examples=200, deadline=None)
@given(raw=st.binary(max_size=64) | st.text(max_size=64))
def test_the_decoder_never_raises_on_any_bytes(raw: bytes | str) -> None:
    RealtimeDecoder()(raw)
