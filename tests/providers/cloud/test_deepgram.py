from __future__ import annotations

import asyncio
import json

import pytest
from websockets.asyncio.server import ServerConnection

from brisvox.core.clock import SimClock
from brisvox.core.secret import Secret
from brisvox.providers.cloud.deepgram import DeepgramOptions, DeepgramStt, parse_message
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.resilient import ResiliencePolicy
from brisvox.providers.stt import SttConfig, SttError, Transcript

from ._fake_ws import FakeWsServer, Upgrade

KEY = "dg-test-key-123"


def results(text: str, *, final: bool, speech_final: bool = False, from_finalize: bool = False,
            start: float = 0.0, duration: float = 1.0) -> str:
    return json.dumps({
        "type": "Results", "channel_index": [0, 1], "duration": duration, "start": start,
        "is_final": final, "speech_final": speech_final, "from_finalize": from_finalize,
        "channel": {"alternatives": [{"transcript": text, "confidence": 0.98, "words": []}]},
    })


def provider(url: str, **kw: object) -> DeepgramStt:
    return DeepgramStt(DeepgramOptions(api_key=Secret(KEY), base_url=url, **kw), SimClock())  # type: ignore[arg-type]


async def scripted(ws: ServerConnection, up: Upgrade) -> None:
    received = 0
    async for msg in ws:
        if isinstance(msg, bytes):
            received += len(msg)
            if received >= 3200:
                await ws.send(results("hel", final=False))
                await ws.send(results("hello there", final=True, speech_final=True, duration=0.1))
                received = -10**9
        else:
            control = json.loads(msg)
            if control["type"] == "Finalize":
                await ws.send(results("bye", final=True, from_finalize=True, start=1.0, duration=0.5))
            elif control["type"] == "CloseStream":
                await ws.send(json.dumps({"type": "Metadata", "duration": 1.5}))
                await ws.close()
                return


async def test_interim_final_and_finalize_results_map_onto_transcripts() -> None:
    async with FakeWsServer(scripted) as server:
        stt = provider(server.url)
        async with await stt.connect(SttConfig(sample_rate=16_000, language="en")) as session:
            await session.send_audio(b"\x00" * 3200)
            events = [await anext(session), await anext(session)]
            await session.finalize()
            events.append(await anext(session))
        up = server.upgrades[0]
    assert up.path == "/v1/listen"
    assert up.headers["Authorization"] == f"Token {KEY}"
    assert up.query["encoding"] == ["linear16"] and up.query["sample_rate"] == ["16000"]
    assert up.query["interim_results"] == ["true"] and up.query["model"] == ["nova-3"]
    assert all(isinstance(e, Transcript) for e in events)
    interim, final, fin = events
    assert isinstance(interim, Transcript) and isinstance(final, Transcript) and isinstance(fin, Transcript)
    assert (interim.text, interim.is_final) == ("hel", False)
    assert (final.text, final.is_final, final.speech_final, final.from_finalize) == ("hello there", True, True, False)
    assert (fin.text, fin.from_finalize, fin.start, fin.end) == ("bye", True, 1.0, 1.5)


async def test_a_keepalive_goes_out_when_no_audio_was_sent_for_the_interval() -> None:
    seen: list[str] = []

    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        async for msg in ws:
            if isinstance(msg, str):
                seen.append(json.loads(msg)["type"])

    async with FakeWsServer(handler) as server:
        stt = provider(server.url, keepalive_interval=4.0)
        clock = SimClock()
        async with await stt.connect(SttConfig()) as session:
            await clock.sleep(9.0)
            assert not session.closed
    assert seen[:2] == ["KeepAlive", "KeepAlive"]


async def test_a_refused_key_is_an_auth_error_at_connect() -> None:
    async with FakeWsServer(scripted, refuse_with=401) as server:
        with pytest.raises(ProviderError) as info:
            await provider(server.url).connect(SttConfig())
    assert info.value.kind is ProviderErrorKind.AUTH
    assert KEY not in str(info.value)


async def test_a_dropped_connection_reconnects_and_keeps_times_continuous() -> None:
    connections = 0

    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        nonlocal connections
        connections += 1
        async for msg in ws:
            if isinstance(msg, bytes):
                if connections == 1:
                    ws.transport.abort()  # the network drops the first connection
                    return
                await ws.send(results("again", final=True, start=0.0, duration=0.5))

    async with FakeWsServer(handler) as server:
        stt = provider(server.url)
        async with await stt.connect(SttConfig(sample_rate=16_000)) as session:
            await session.send_audio(b"\x00" * 32_000)  # one second on the first connection
            first = await anext(session)
            assert isinstance(first, SttError) and not first.fatal
            assert first.error.kind is ProviderErrorKind.CLOSED
            for _ in range(1000):
                if session.reconnects:  # type: ignore[attr-defined]
                    break
                await asyncio.sleep(0.01)
            await session.send_audio(b"\x00" * 320)
            again = await anext(session)
    assert connections == 2
    assert isinstance(again, Transcript) and again.text == "again"
    assert (again.start, again.end) == (1.0, 1.5)


async def test_reconnects_are_bounded_and_the_last_failure_is_fatal() -> None:
    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        ws.transport.abort()

    async with FakeWsServer(handler) as server:
        stt = provider(server.url, policy=ResiliencePolicy(max_attempts=2))
        session = await stt.connect(SttConfig())
        server.refuse_with = 503
        async with session:
            events = [e async for e in session]
    assert [type(e) for e in events] == [SttError, SttError]
    assert isinstance(events[-1], SttError) and events[-1].fatal
    assert events[-1].error.kind is ProviderErrorKind.SERVER


def test_a_non_results_message_maps_to_nothing_and_an_empty_interim_is_skipped() -> None:
    assert parse_message(json.dumps({"type": "UtteranceEnd", "last_word_end": 1.0}), 0.0) is None
    assert parse_message(results("", final=False), 0.0) is None
    empty_final = parse_message(results("", final=True, from_finalize=True), 0.0)
    assert isinstance(empty_final, Transcript) and empty_final.from_finalize


def test_the_api_key_never_shows_in_the_options_repr() -> None:
    options = DeepgramOptions(api_key=Secret(KEY))
    assert KEY not in repr(options)
    assert KEY not in repr(DeepgramStt(options, SimClock()))


async def test_a_flapping_connection_ends_the_session_after_the_reconnect_budget() -> None:
    connections = 0

    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        nonlocal connections
        connections += 1
        ws.transport.abort()  # every connection drops at once

    async with FakeWsServer(handler) as server:
        stt = provider(server.url, policy=ResiliencePolicy(max_reconnects=2))
        async with await stt.connect(SttConfig()) as session:
            events = [e async for e in session]
    assert [e.fatal for e in events if isinstance(e, SttError)] == [False, False, True]
    assert connections == 3
