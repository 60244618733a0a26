"""Cartesia and ElevenLabs over loopback servers of their WebSocket protocols."""

from __future__ import annotations

import asyncio

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.secret import Secret
from brisvox.providers.cloud.cartesia import CartesiaOptions, CartesiaTts
from brisvox.providers.cloud.elevenlabs import ElevenLabsOptions, ElevenLabsTts, WordAligner
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.tts import (
    TtsAudio,
    TtsCancelled,
    TtsConfig,
    TtsError,
    TtsEvent,
    TtsFlushed,
    TtsProvider,
    TtsWords,
)

from ._fake_ws import FakeWsServer
from ._tts_fakes import WORD_SECONDS, Knobs, cartesia_handler, elevenlabs_handler

KEY = "tts-secret-key-77"
VENDORS = ["cartesia", "elevenlabs"]
RATE = 16_000


def server_for(vendor: str, knobs: Knobs, refuse: int | None = None) -> FakeWsServer:
    handler = cartesia_handler(knobs) if vendor == "cartesia" else elevenlabs_handler(knobs, RATE)
    return FakeWsServer(handler, refuse_with=refuse)


def make(vendor: str, url: str) -> TtsProvider:
    if vendor == "cartesia":
        return CartesiaTts(CartesiaOptions(api_key=Secret(KEY), base_url=url), SimClock())
    return ElevenLabsTts(ElevenLabsOptions(api_key=Secret(KEY), base_url=url), SimClock())


async def until(session: object, pred: type | tuple[type, ...], limit: int = 200) -> list[TtsEvent]:
    out: list[TtsEvent] = []
    for _ in range(limit):
        event = await anext(session)  # type: ignore[call-overload]
        out.append(event)
        if isinstance(event, pred):
            return out
    raise AssertionError(f"no {pred} in {out}")


def words_of(events: list[TtsEvent]) -> list[tuple[str, float, float]]:
    return [(w.word, round(w.start, 3), round(w.end, 3)) for e in events if isinstance(e, TtsWords) for w in e.words]


def audio_seconds(events: list[TtsEvent]) -> float:
    return sum(e.duration for e in events if isinstance(e, TtsAudio))


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_context_streams_audio_and_word_timings_then_flushes(vendor: str) -> None:
    knobs = Knobs()
    async with server_for(vendor, knobs) as server:
        tts = make(vendor, server.url)
        async with await tts.connect(TtsConfig(sample_rate=RATE)) as session:
            await session.send_text(1, "Hello there. ")
            await session.send_text(1, "How are you?")
            await session.flush(1)
            events = await until(session, TtsFlushed)
        up = server.upgrades[0]
    assert isinstance(events[-1], TtsFlushed) and events[-1].context_id == 1
    assert all(getattr(e, "context_id", 1) == 1 for e in events)
    assert audio_seconds(events) == pytest.approx(5 * WORD_SECONDS)
    assert [w for w, _, _ in words_of(events)] == ["Hello", "there.", "How", "are", "you?"]
    starts = [s for _, s, _ in words_of(events)]
    assert starts == sorted(starts) and starts[0] == 0.0
    assert starts[2] == pytest.approx(2 * WORD_SECONDS, abs=0.011)
    sent = knobs.received[0]
    if vendor == "cartesia":
        assert up.headers["X-API-Key"] == KEY and up.headers["Cartesia-Version"]
        assert [m["continue"] for m in sent] == [True, True, False]
        assert sent[0]["output_format"] == {"container": "raw", "encoding": "pcm_s16le", "sample_rate": RATE}
        assert sent[0]["add_timestamps"] is True
        assert len({m["context_id"] for m in sent}) == 1
    else:
        assert up.headers["xi-api-key"] == KEY
        assert up.query["output_format"] == [f"pcm_{RATE}"]
        assert up.path.endswith("/multi-stream-input")
        assert [m.get("text") for m in sent[:2]] == ["Hello there. ", "How are you? "]
        assert sent[2:] == [{"context_id": sent[0]["context_id"], "flush": True},
                            {"context_id": sent[0]["context_id"], "close_context": True},
                            {"close_socket": True}]


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_cancel_stops_the_context_at_once_and_tells_the_vendor(vendor: str) -> None:
    knobs = Knobs()
    async with server_for(vendor, knobs) as server:
        tts = make(vendor, server.url)
        async with await tts.connect(TtsConfig(sample_rate=RATE)) as session:
            await session.send_text(1, "one two three four five six")
            first = await until(session, TtsAudio)
            session.cancel(1)
            await session.send_text(2, "next")
            await session.flush(2)
            rest = await until(session, TtsFlushed)
        sent = knobs.received[0]
    assert any(isinstance(e, TtsAudio) and e.context_id == 1 for e in first)
    assert isinstance(rest[0], TtsCancelled) and rest[0].context_id == 1
    assert all(getattr(e, "context_id", None) == 2 for e in rest[1:]), rest
    wire_1 = sent[0]["context_id"]
    if vendor == "cartesia":
        assert {"context_id": wire_1, "cancel": True} in sent
    else:
        assert {"context_id": wire_1, "close_context": True} in sent


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_context_without_first_audio_times_out_and_the_session_lives_on(vendor: str) -> None:
    knobs = Knobs(silent=True)
    clock = SimClock()
    async with server_for(vendor, knobs) as server:
        tts = make(vendor, server.url)
        async with await tts.connect(TtsConfig(sample_rate=RATE)) as session:
            t0 = clock.now()
            await session.send_text(1, "anyone there")
            await session.flush(1)
            [event] = await until(session, TtsError)
            waited = clock.now() - t0
            assert not session.closed
    assert isinstance(event, TtsError) and event.context_id == 1 and not event.fatal
    assert event.error.kind is ProviderErrorKind.TIMEOUT
    assert waited == pytest.approx(8.0, abs=0.01)


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_dropped_socket_fails_the_context_in_flight_and_reconnects_for_the_next(vendor: str) -> None:
    knobs = Knobs(drop_on_text=2)
    async with server_for(vendor, knobs) as server:
        tts = make(vendor, server.url)
        async with await tts.connect(TtsConfig(sample_rate=RATE)) as session:
            await session.send_text(1, "first part")
            await until(session, TtsAudio)
            await session.send_text(1, "second part")
            lost = await until(session, TtsError)
            for _ in range(200):
                if session.reconnects:  # type: ignore[attr-defined]
                    break
                await asyncio.sleep(0.01)
            await session.send_text(2, "fresh start")
            await session.flush(2)
            fresh = await until(session, TtsFlushed)
    err = lost[-1]
    assert isinstance(err, TtsError) and err.context_id == 1 and not err.fatal
    assert err.error.kind is ProviderErrorKind.CLOSED
    assert len(knobs.received) == 2
    assert knobs.received[1][0]["context_id"] != knobs.received[0][0]["context_id"]
    assert [type(e) for e in fresh if not isinstance(e, TtsWords)][-1] is TtsFlushed
    # context 1 is never replayed on the new socket
    assert all("first" not in str(m) and "second" not in str(m) for m in knobs.received[1])


@pytest.mark.parametrize("vendor", VENDORS)
async def test_a_refused_key_is_an_auth_error_and_never_printed(vendor: str) -> None:
    async with server_for(vendor, Knobs(), refuse=401) as server:
        tts = make(vendor, server.url)
        with pytest.raises(ProviderError) as info:
            await tts.connect(TtsConfig(sample_rate=RATE))
    assert info.value.kind is ProviderErrorKind.AUTH
    assert KEY not in str(info.value) and KEY not in repr(tts)


async def test_a_cartesia_error_for_one_context_fails_only_that_context() -> None:
    knobs = Knobs(error_for="bad")
    async with server_for("cartesia", knobs) as server:
        tts = make("cartesia", server.url)
        async with await tts.connect(TtsConfig(sample_rate=RATE)) as session:
            await session.send_text(1, "bad voice")
            [err] = await until(session, TtsError)
            await session.send_text(2, "good")
            await session.flush(2)
            ok = await until(session, TtsFlushed)
    assert isinstance(err, TtsError) and err.context_id == 1 and err.error.kind is ProviderErrorKind.INVALID_REQUEST
    assert isinstance(ok[-1], TtsFlushed) and ok[-1].context_id == 2


def test_the_aligner_joins_words_split_across_chunks_and_offsets_them() -> None:
    aligner = WordAligner()
    first = aligner.feed({"chars": list("Hi the"), "charStartTimesMs": [0, 10, 20, 30, 40, 50],
                          "charDurationsMs": [10] * 6}, 1.0)
    second = aligner.feed({"chars": list("re."), "charStartTimesMs": [0, 10, 20], "charDurationsMs": [10] * 3}, 1.06)
    tail = aligner.finish()
    assert [(w.word, round(w.start, 3), round(w.end, 3)) for w in first + second + tail] == [
        ("Hi", 1.0, 1.02), ("there.", 1.03, 1.09)]


def test_unsupported_sample_rates_are_refused_by_name() -> None:
    from brisvox.core.errors import ConfigError

    tts = make("cartesia", "ws://127.0.0.1:9")
    with pytest.raises(ConfigError, match="sample_rate"):
        asyncio.run(tts.connect(TtsConfig(sample_rate=11_025)))


async def test_an_elevenlabs_session_error_fails_the_context_and_the_session_reconnects() -> None:
    import json as _json

    from websockets.asyncio.server import ServerConnection

    from ._fake_ws import Upgrade

    connections = 0

    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        nonlocal connections
        connections += 1
        async for raw in ws:
            m = _json.loads(raw)
            if connections == 1 and m.get("text", "").strip():
                await ws.send(_json.dumps({"error": "internal", "message": "something broke"}))

    async with FakeWsServer(handler) as server:
        tts = make("elevenlabs", server.url)
        async with await tts.connect(TtsConfig(sample_rate=RATE)) as session:
            await session.send_text(1, "hello")
            [err] = await until(session, TtsError)
            for _ in range(200):
                if session.reconnects:  # type: ignore[attr-defined]
                    break
                await asyncio.sleep(0.01)
    assert isinstance(err, TtsError) and err.context_id == 1 and not err.fatal
    assert err.error.kind is ProviderErrorKind.SERVER
    assert connections == 2


async def test_deepgram_reports_a_message_it_cannot_map_and_keeps_listening() -> None:
    import json as _json

    from websockets.asyncio.server import ServerConnection

    from brisvox.providers.cloud.deepgram import DeepgramOptions, DeepgramStt
    from brisvox.providers.stt import SttConfig, SttError, Transcript

    from ._fake_ws import Upgrade

    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        async for msg in ws:
            if isinstance(msg, bytes):
                await ws.send(_json.dumps({"type": "Results", "channel": {"alternatives": [{"transcript": "x"}]},
                                           "start": "soon", "is_final": True}))
                await ws.send(_json.dumps({"type": "Results", "channel": {"alternatives": [{"transcript": "ok"}]},
                                           "start": 0.0, "duration": 0.5, "is_final": True}))

    async with FakeWsServer(handler) as server:
        stt = DeepgramStt(DeepgramOptions(api_key=Secret(KEY), base_url=server.url), SimClock())
        async with await stt.connect(SttConfig()) as session:
            await session.send_audio(b"\x00\x00" * 160)
            bad, good = await anext(session), await anext(session)
    assert isinstance(bad, SttError) and not bad.fatal and bad.error.kind is ProviderErrorKind.PROTOCOL
    assert isinstance(good, Transcript) and good.text == "ok"
