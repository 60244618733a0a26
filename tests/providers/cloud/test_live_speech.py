"""Live variants for the speech adapters: real Deepgram, Cartesia, ElevenLabs and OpenAI speech.

They run with ``BRISVOX_LIVE_TESTS=1`` and the vendor's key (``DEEPGRAM_API_KEY``,
``CARTESIA_API_KEY``, ``ELEVENLABS_API_KEY``, ``OPENAI_API_KEY``) and skip with a message
otherwise.  Their loose checks also run against the loopback fakes, so a wrong check
fails in the normal suite first.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from websockets.asyncio.server import ServerConnection

from brisvox.core.clock import SimClock, SystemClock
from brisvox.core.secret import Secret
from brisvox.providers.cloud.cartesia import CartesiaOptions, CartesiaTts
from brisvox.providers.cloud.deepgram import DeepgramOptions, DeepgramStt
from brisvox.providers.cloud.elevenlabs import ElevenLabsOptions, ElevenLabsTts
from brisvox.providers.cloud.openai_speech import OpenAiSpeechOptions, OpenAiSpeechTts
from brisvox.providers.stt import SttConfig, SttEvent, SttProvider, Transcript
from brisvox.providers.tts import TtsAudio, TtsConfig, TtsError, TtsEvent, TtsFlushed, TtsProvider, TtsWords

from ._fake_ws import FakeWsServer, Upgrade
from ._tts_fakes import Knobs, cartesia_handler, elevenlabs_handler
from .test_deepgram import results
from .test_openai_speech import speech_server

LIVE = os.environ.get("BRISVOX_LIVE_TESTS") == "1"
PHRASE = "Hello from brisvox."


def _live(var: str) -> None:
    if not LIVE:
        pytest.skip("live provider tests need BRISVOX_LIVE_TESTS=1")
    if not os.environ.get(var):
        pytest.skip(f"live test needs {var} in the environment")


# --- STT ---------------------------------------------------------------------------------------


def loose_recognition(events: list[SttEvent]) -> None:
    finals = [e for e in events if isinstance(e, Transcript) and e.is_final]
    assert finals, f"no final transcript in {events}"
    text = " ".join(e.text for e in finals).lower()
    assert "hello" in text, text
    assert any(e.from_finalize for e in finals) or any(e.speech_final for e in finals)


async def recognize(stt: SttProvider, pcm: bytes, rate: int) -> list[SttEvent]:
    events: list[SttEvent] = []
    async with await stt.connect(SttConfig(sample_rate=rate)) as session:
        frame = rate // 50 * 2
        for i in range(0, len(pcm), frame):
            await session.send_audio(pcm[i : i + frame])
        await session.finalize()
        async for event in session:
            events.append(event)
            if isinstance(event, Transcript) and event.from_finalize:
                break
    return events


async def test_the_loose_recognition_check_holds_on_the_scripted_deepgram() -> None:
    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        async for msg in ws:
            if isinstance(msg, str) and json.loads(msg)["type"] == "Finalize":
                await ws.send(results("hello world", final=True, from_finalize=True))

    async with FakeWsServer(handler) as server:
        stt = DeepgramStt(DeepgramOptions(api_key=Secret("k"), base_url=server.url), SimClock())
        loose_recognition(await recognize(stt, b"\x00\x00" * 16_000, 16_000))


@pytest.mark.realtime
async def test_live_deepgram_recognizes_espeak_speech(tmp_path: Path) -> None:
    _live("DEEPGRAM_API_KEY")
    from tests._speech import espeak_wav

    wav = espeak_wav("hello world, this is a test", tmp_path, rate=16_000)
    stt = DeepgramStt(DeepgramOptions.from_env(), SystemClock())
    loose_recognition(await recognize(stt, wav.pcm, wav.sample_rate))


# --- TTS ---------------------------------------------------------------------------------------


def loose_speech(events: list[TtsEvent], *, timestamps: bool) -> None:
    assert not any(isinstance(e, TtsError) for e in events), events
    assert isinstance(events[-1], TtsFlushed)
    seconds = sum(e.duration for e in events if isinstance(e, TtsAudio))
    assert 0.3 < seconds < 10.0, seconds
    if timestamps:
        words = [w for e in events if isinstance(e, TtsWords) for w in e.words]
        assert words, "no word timings"
        assert "hello" in words[0].word.lower()
        starts = [w.start for w in words]
        assert starts == sorted(starts) and all(w.end >= w.start for w in words)
        assert words[-1].end <= seconds + 0.5


async def speak(tts: TtsProvider, rate: int) -> list[TtsEvent]:
    events: list[TtsEvent] = []
    async with await tts.connect(TtsConfig(sample_rate=rate)) as session:
        await session.send_text(1, PHRASE)
        await session.flush(1)
        async for event in session:
            events.append(event)
            if isinstance(event, TtsFlushed | TtsError):
                break
    return events


@pytest.mark.parametrize("vendor", ["cartesia", "elevenlabs", "openai-speech"])
async def test_the_loose_speech_check_holds_on_the_scripted_servers(vendor: str) -> None:
    if vendor == "openai-speech":
        async with speech_server() as http:
            tts: TtsProvider = OpenAiSpeechTts(OpenAiSpeechOptions(base_url=http.base_url + "/v1"), SimClock())
            loose_speech(await speak(tts, 24_000), timestamps=False)
        return
    knobs = Knobs()
    handler = cartesia_handler(knobs) if vendor == "cartesia" else elevenlabs_handler(knobs, 16_000)
    async with FakeWsServer(handler) as server:
        if vendor == "cartesia":
            tts = CartesiaTts(CartesiaOptions(api_key=Secret("k"), base_url=server.url), SimClock())
        else:
            tts = ElevenLabsTts(ElevenLabsOptions(api_key=Secret("k"), base_url=server.url), SimClock())
        loose_speech(await speak(tts, 16_000), timestamps=True)


_LIVE_TTS = {"cartesia": "CARTESIA_API_KEY", "elevenlabs": "ELEVENLABS_API_KEY", "openai-speech": "OPENAI_API_KEY"}


@pytest.mark.realtime
@pytest.mark.parametrize("vendor", sorted(_LIVE_TTS))
async def test_live_tts_speaks_with_word_timings(vendor: str) -> None:
    _live(_LIVE_TTS[vendor])
    clock = SystemClock()
    if vendor == "cartesia":
        loose_speech(await speak(CartesiaTts(CartesiaOptions.from_env(), clock), 16_000), timestamps=True)
    elif vendor == "elevenlabs":
        loose_speech(await speak(ElevenLabsTts(ElevenLabsOptions.from_env(), clock), 16_000), timestamps=True)
    else:
        loose_speech(await speak(OpenAiSpeechTts(OpenAiSpeechOptions.from_env(), clock), 24_000), timestamps=False)
