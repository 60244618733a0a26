"""A small WAV reader and writer for mono PCM16 (the stdlib ``wave`` module underneath)."""

from __future__ import annotations

import io
import os
import wave
from dataclasses import dataclass
from typing import BinaryIO

from brisvox.audio.pcm import check_whole_samples
from brisvox.core.errors import InvalidInput

__all__ = ["WavAudio", "read_wav", "wav_bytes", "write_wav"]


@dataclass(frozen=True, slots=True)
class WavAudio:
    """Mono PCM16 little-endian samples and their rate."""

    pcm: bytes
    sample_rate: int

    @property
    def duration(self) -> float:
        return len(self.pcm) / (2 * self.sample_rate)

    def __repr__(self) -> str:
        return f"WavAudio(<{len(self.pcm)} bytes>, {self.sample_rate} Hz)"


def read_wav(source: str | os.PathLike[str] | bytes | BinaryIO) -> WavAudio:
    """Read a mono 16-bit PCM WAV file (a path, the file's bytes, or a binary file object)."""
    name = os.fspath(source) if isinstance(source, str | os.PathLike) else "<wav bytes>"
    f: str | BinaryIO = io.BytesIO(source) if isinstance(source, bytes) else (
        os.fspath(source) if isinstance(source, str | os.PathLike) else source
    )
    try:
        with wave.open(f, "rb") as w:
            channels, width, rate = w.getnchannels(), w.getsampwidth(), w.getframerate()
            if channels != 1 or width != 2:
                raise InvalidInput(
                    f"{name}: expected mono 16-bit PCM, got {channels} channel(s) of {8 * width}-bit samples"
                )
            pcm = w.readframes(w.getnframes())
    except (wave.Error, EOFError) as exc:
        raise InvalidInput(f"{name}: not a PCM WAV file ({exc})") from exc
    if len(pcm) % 2:
        pcm = pcm[:-1]
    return WavAudio(pcm=pcm, sample_rate=rate)


def write_wav(target: str | os.PathLike[str] | BinaryIO, pcm: bytes, sample_rate: int) -> None:
    """Write mono PCM16 samples as a WAV file (a path or a binary file object)."""
    check_whole_samples(pcm)
    if sample_rate <= 0:
        raise InvalidInput(f"sample_rate must be positive, got {sample_rate}")
    f: str | BinaryIO = os.fspath(target) if isinstance(target, str | os.PathLike) else target
    with wave.open(f, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(sample_rate)
        w.writeframes(pcm)


def wav_bytes(pcm: bytes, sample_rate: int) -> bytes:
    """The bytes of a WAV file holding ``pcm``."""
    buf = io.BytesIO()
    write_wav(buf, pcm, sample_rate)
    return buf.getvalue()
