from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from brisvox.audio.pcm import first_audible
from brisvox.core.clock import SimClock
from brisvox.core.errors import ConfigError
from brisvox.core.tasks import TaskScope
from brisvox.providers.local.hibari import (
    HIBARI_SAMPLE_RATE,
    HibariConfig,
    HibariTts,
    HibariTtsSession,
    trim_leading_silence,
)
from brisvox.providers.tts import TtsAudio, TtsCancelled, TtsConfig, TtsEvent, TtsFlushed, TtsWords

pytestmark = pytest.mark.slow

TEXT = "Your table for two is booked for tonight. See you then!"


async def _collect(session: HibariTtsSession, out: list[TtsEvent]) -> None:
    async for event in session:
        out.append(event)


async def _until(clock: SimClock, done: Callable[[], bool]) -> None:
    for _ in range(2000):
        if done():
            return
        await clock.sleep(0.01)
    raise AssertionError("timed out waiting for the TTS")


async def test_the_local_tts_speaks_at_24_khz_a_plausible_length_then_flushes_and_honours_a_cancel() -> None:
    clock = SimClock()
    tts = HibariTts()
    events: list[TtsEvent] = []
    try:
        await tts.warm()
        async with await tts.connect(TtsConfig()) as session, TaskScope("t") as scope:
            scope.spawn(_collect(session, events), name="reader")
            await session.send_text(1, TEXT)
            await session.flush(1)
            await _until(clock, lambda: TtsFlushed(context_id=1) in events)
            await session.send_text(2, "This reply is cut off. It has a second sentence that is never heard.")
            await session.flush(2)
            session.cancel(2)
            await _until(clock, lambda: TtsCancelled(context_id=2) in events)
            await clock.sleep(0.5)
            await session.aclose()
    finally:
        await tts.aclose()
    audio = [e for e in events if isinstance(e, TtsAudio) and e.context_id == 1]
    assert audio and all(a.sample_rate == HIBARI_SAMPLE_RATE == 24_000 for a in audio)
    seconds = sum(a.duration for a in audio)
    # About 11 words: between 1.5 and 3.5 words per second of speech.
    assert 11 / 3.5 <= seconds <= 11 / 1.5
    assert events.index(TtsFlushed(context_id=1)) > max(events.index(a) for a in audio)
    assert not any(isinstance(e, TtsWords) for e in events)  # hibari exposes no durations
    after = events[events.index(TtsCancelled(context_id=2)) :]
    assert not any(getattr(e, "context_id", None) == 2 for e in after[1:])
    assert TtsFlushed(context_id=2) not in events
    # The reply's first sound comes at once: the voice's leading ~0.3 s of silence is cut.
    first = first_audible(b"".join(a.pcm for a in audio))
    assert first is not None and first / HIBARI_SAMPLE_RATE < 0.03


async def test_the_local_tts_refuses_a_rate_or_voice_it_cannot_produce() -> None:
    tts = HibariTts()
    try:
        with pytest.raises(ConfigError, match="24000"):
            await tts.connect(TtsConfig(sample_rate=16_000))
        with pytest.raises(ConfigError, match="voice"):
            await tts.connect(TtsConfig(voice="emma"))
    finally:
        await tts.aclose()
    with pytest.raises(ConfigError, match="bundled"):
        HibariConfig(voice="emma")


def test_the_leading_silence_is_cut_to_the_lead_in_and_faded_in_and_the_rest_is_kept() -> None:
    voice = np.concatenate([np.full(7200, 1e-5, dtype=np.float32), np.full(2400, 0.5, dtype=np.float32)])
    out = trim_leading_silence(voice, keep=240)
    assert out.size == 240 + 2400
    assert out[0] == 0.0 and np.all(out[240:] == 0.5)
    silent = np.zeros(100, dtype=np.float32)
    assert trim_leading_silence(silent, keep=10).size == 100  # nothing audible: nothing cut
    with pytest.raises(ConfigError, match="lead_in"):
        HibariConfig(lead_in=-0.1)
