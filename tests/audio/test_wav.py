from __future__ import annotations

import io
import wave
from pathlib import Path

import pytest

from brisvox.audio import read_wav, wav_bytes, write_wav
from brisvox.core.errors import InvalidInput


def test_a_written_wav_reads_back_identically(tmp_path: Path) -> None:
    pcm = bytes(range(200))
    write_wav(tmp_path / "a.wav", pcm, 8000)
    audio = read_wav(tmp_path / "a.wav")
    assert audio.pcm == pcm
    assert audio.sample_rate == 8000
    assert audio.duration == pytest.approx(100 / 8000)


def test_wav_bytes_read_back_from_memory() -> None:
    audio = read_wav(wav_bytes(b"\x01\x00\x02\x00", 16000))
    assert (audio.pcm, audio.sample_rate) == (b"\x01\x00\x02\x00", 16000)


def test_a_stereo_file_is_refused_naming_its_format() -> None:
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(16000)
        w.writeframes(bytes(8))
    with pytest.raises(InvalidInput, match="2 channel"):
        read_wav(buf.getvalue())


def test_a_file_that_is_not_a_wav_is_refused() -> None:
    with pytest.raises(InvalidInput, match="not a PCM WAV"):
        read_wav(b"RIFF nonsense")


def test_the_repr_shows_the_size_not_the_samples() -> None:
    assert repr(read_wav(wav_bytes(bytes(4), 8000))) == "WavAudio(<4 bytes>, 8000 Hz)"
