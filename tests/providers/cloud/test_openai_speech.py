"""OpenAI speech (HTTP streaming PCM) against a loopback server of /v1/audio/speech."""

from __future__ import annotations

import pytest

from brisvox.core.clock import SimClock
from brisvox.core.errors import ConfigError
from brisvox.core.secret import Secret
from brisvox.providers.cloud.openai_speech import OpenAiSpeechOptions, OpenAiSpeechTts
from brisvox.providers.errors import ProviderErrorKind
from brisvox.providers.tts import TtsAudio, TtsCancelled, TtsConfig, TtsError, TtsEvent, TtsFlushed

from ._fake_http import FakeHttpServer, RecordedRequest, Response

KEY = "sk-speech-secret-9"


def speech_server(*, first_delay: float = 0.0, chunk_delay: float = 0.0, statuses: list[int] | None = None,
                  chunks: int = 4) -> FakeHttpServer:
    pending = list(statuses or [])

    async def handle(req: RecordedRequest, resp: Response) -> None:
        if pending:
            await resp.json_error(pending.pop(0), {"error": {"message": "nope", "type": "server_error"}})
            return
        await resp.start(200, "audio/pcm")
        if len(server.requests) == 1:
            await resp.sleep(first_delay)  # only the first request is slow
        # 0.1 s per chunk at 24 kHz, cut at an odd byte to check sample alignment
        body = b"\x02\x00" * (2400 * chunks)
        step = len(body) // chunks + 1
        for i in range(0, len(body), step):
            await resp.chunk(body[i : i + step])
            await resp.sleep(chunk_delay)

    server = FakeHttpServer(handle)
    return server


def make(url: str) -> OpenAiSpeechTts:
    return OpenAiSpeechTts(OpenAiSpeechOptions(api_key=Secret(KEY), base_url=url + "/v1"), SimClock())


async def until(session: object, pred: type) -> list[TtsEvent]:
    out: list[TtsEvent] = []
    for _ in range(500):
        event = await anext(session)  # type: ignore[call-overload]
        out.append(event)
        if isinstance(event, pred):
            return out
    raise AssertionError(out)


async def test_segments_stream_in_order_as_whole_samples_and_the_flush_follows_the_last_audio() -> None:
    async with speech_server() as server:
        tts = make(server.base_url)
        async with await tts.connect(TtsConfig(sample_rate=24_000, voice="nova")) as session:
            await session.send_text(1, "Hello there.")
            await session.send_text(1, "How are you?")
            await session.flush(1)
            events = await until(session, TtsFlushed)
        bodies = [r.json() for r in server.requests]
        auth = server.requests[0].headers["authorization"]
    audio = [e for e in events if isinstance(e, TtsAudio)]
    assert all(len(e.pcm) % 2 == 0 and e.sample_rate == 24_000 for e in audio)
    assert sum(e.duration for e in audio) == pytest.approx(0.8)
    assert [b["input"] for b in bodies] == ["Hello there.", "How are you?"]
    assert bodies[0] == {"model": "gpt-4o-mini-tts", "input": "Hello there.", "voice": "nova", "response_format": "pcm"}
    assert auth == f"Bearer {KEY}"


async def test_a_cancel_aborts_the_request_in_flight_and_drops_queued_segments() -> None:
    async with speech_server(chunk_delay=0.5, chunks=20) as server:
        tts = make(server.base_url)
        async with await tts.connect(TtsConfig(sample_rate=24_000)) as session:
            await session.send_text(1, "a long sentence")
            await session.send_text(1, "never spoken")
            await until(session, TtsAudio)
            session.cancel(1)
            await session.send_text(2, "next")
            await session.flush(2)
            rest = await until(session, TtsFlushed)
        inputs = [r.json()["input"] for r in server.requests]
    assert isinstance(rest[0], TtsCancelled)
    assert all(getattr(e, "context_id", None) == 2 for e in rest[1:])
    assert inputs == ["a long sentence", "next"]


async def test_slow_first_audio_is_a_timeout_for_that_context() -> None:
    clock = SimClock()
    async with speech_server(first_delay=9.0) as server:
        tts = make(server.base_url)
        async with await tts.connect(TtsConfig(sample_rate=24_000)) as session:
            t0 = clock.now()
            await session.send_text(1, "slow")
            await session.flush(1)
            [err] = await until(session, TtsError)
            waited = clock.now() - t0
            await session.send_text(2, "after")
            await session.flush(2)
            after = await until(session, TtsFlushed)
    assert isinstance(err, TtsError) and err.error.kind is ProviderErrorKind.TIMEOUT and not err.fatal
    assert waited == pytest.approx(8.0, abs=0.01)
    assert [e.context_id for e in after if isinstance(e, TtsFlushed)] == [2]


async def test_an_overload_before_audio_is_retried_and_a_bad_key_is_not() -> None:
    async with speech_server(statuses=[503]) as server:
        async with await make(server.base_url).connect(TtsConfig(sample_rate=24_000)) as session:
            await session.send_text(1, "retry me")
            await session.flush(1)
            ok = await until(session, TtsFlushed)
        assert len(server.requests) == 2
    assert any(isinstance(e, TtsAudio) for e in ok)
    async with speech_server(statuses=[401]) as server:
        tts = make(server.base_url)
        async with await tts.connect(TtsConfig(sample_rate=24_000)) as session:
            await session.send_text(1, "denied")
            [err] = await until(session, TtsError)
        assert len(server.requests) == 1
    assert isinstance(err, TtsError) and err.error.kind is ProviderErrorKind.AUTH
    assert KEY not in str(err.error) and KEY not in repr(tts)


async def test_only_its_pcm_rate_is_accepted() -> None:
    with pytest.raises(ConfigError, match="24000"):
        await make("http://127.0.0.1:9").connect(TtsConfig(sample_rate=16_000))
