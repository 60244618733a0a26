from __future__ import annotations

from brisvox.core.frames import WordTiming
from brisvox.providers.tts import TtsAudio, TtsWords


def test_tts_audio_knows_its_duration_and_its_repr_shows_no_samples() -> None:
    chunk = TtsAudio(context_id=3, pcm=b"\x01\x00" * 2400, sample_rate=24_000)
    assert chunk.duration == 0.1
    assert repr(chunk) == "TtsAudio(context=3, <4800 bytes>, 24000 Hz)"


def test_tts_words_repr_counts_words_without_showing_them() -> None:
    words = TtsWords(context_id=1, words=(WordTiming("hello", 0.0, 0.3), WordTiming("there", 0.3, 0.6)))
    assert repr(words) == "TtsWords(context=1, <2 words>)"
