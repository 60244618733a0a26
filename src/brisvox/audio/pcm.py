"""PCM16 helpers: little-endian signed 16-bit mono samples as ``bytes`` or numpy ``int16`` arrays.

Frames carry audio as ``bytes``; DSP works on arrays.  :func:`pcm16_to_array` is a
zero-copy view (read-only), :func:`array_to_pcm16` copies once into ``bytes``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from brisvox.core.errors import InvalidInput

__all__ = [
    "AUDIBLE_LEVEL",
    "PCM16_DTYPE",
    "array_to_pcm16",
    "check_whole_samples",
    "duration_of",
    "first_audible",
    "float_to_pcm16",
    "pcm16_to_array",
    "pcm16_to_float",
    "sample_count",
    "samples_for",
    "silence",
]

PCM16_DTYPE: np.dtype[np.int16] = np.dtype("<i2")

AUDIBLE_LEVEL = 33
"""The smallest PCM16 peak counted as audible: about -60 dBFS (a synthesized voice's
leading near-silence stays below it, its first phoneme is far above)."""

Int16Array = npt.NDArray[np.int16]
Float32Array = npt.NDArray[np.float32]


def check_whole_samples(pcm: bytes | bytearray | memoryview) -> None:
    """Raise :class:`InvalidInput` unless ``pcm`` holds whole 2-byte samples."""
    if len(pcm) % 2:
        raise InvalidInput(f"PCM16 audio must hold whole 2-byte samples, got {len(pcm)} bytes")


def pcm16_to_array(pcm: bytes | bytearray | memoryview) -> Int16Array:
    """A zero-copy int16 view of little-endian PCM16 bytes (read-only for ``bytes``)."""
    check_whole_samples(pcm)
    return np.frombuffer(pcm, dtype=PCM16_DTYPE)


def array_to_pcm16(samples: npt.NDArray[np.integer] | npt.NDArray[np.floating]) -> bytes:
    """Little-endian PCM16 bytes of an int16 array (other integer dtypes are clipped to int16).

    Float arrays are taken to be in [-1, 1] and go through :func:`float_to_pcm16`.
    """
    arr = np.asarray(samples)
    if arr.ndim != 1:
        raise InvalidInput(f"PCM16 audio must be mono (1-D), got shape {arr.shape}")
    if np.issubdtype(arr.dtype, np.floating):
        return float_to_pcm16(arr)
    if arr.dtype != PCM16_DTYPE:
        arr = np.clip(arr, -32768, 32767).astype(PCM16_DTYPE)
    return arr.tobytes()


def pcm16_to_float(pcm: bytes | bytearray | memoryview) -> Float32Array:
    """Samples as float32 in [-1, 1): ``sample / 32768``."""
    return pcm16_to_array(pcm).astype(np.float32) * np.float32(1.0 / 32768.0)


def float_to_pcm16(samples: npt.NDArray[np.floating]) -> bytes:
    """PCM16 bytes of float samples in [-1, 1], rounded and clipped."""
    arr = np.asarray(samples, dtype=np.float32)
    scaled: npt.NDArray[np.float32] = np.clip(np.rint(arr * np.float32(32768.0)), -32768, 32767)
    return scaled.astype(PCM16_DTYPE).tobytes()


def sample_count(pcm: bytes | bytearray | memoryview) -> int:
    """Samples in a PCM16 buffer."""
    check_whole_samples(pcm)
    return len(pcm) // 2


def duration_of(pcm: bytes | bytearray | memoryview, sample_rate: int) -> float:
    """Seconds of audio in a PCM16 buffer at ``sample_rate``."""
    if sample_rate <= 0:
        raise InvalidInput(f"sample_rate must be positive, got {sample_rate}")
    return sample_count(pcm) / sample_rate


def samples_for(seconds: float, sample_rate: int) -> int:
    """Samples in ``seconds`` of audio at ``sample_rate`` (rounded to the nearest sample)."""
    if sample_rate <= 0:
        raise InvalidInput(f"sample_rate must be positive, got {sample_rate}")
    if seconds < 0:
        raise InvalidInput(f"a duration cannot be negative, got {seconds}")
    return round(seconds * sample_rate)


def silence(seconds: float, sample_rate: int) -> bytes:
    """PCM16 silence of the given length."""
    return bytes(2 * samples_for(seconds, sample_rate))


def first_audible(pcm: bytes | bytearray | memoryview, level: int = AUDIBLE_LEVEL) -> int | None:
    """The index of the first sample whose magnitude reaches ``level``; None when every
    sample stays below it (silence, or the near-silence a TTS voice starts with)."""
    samples = pcm16_to_array(pcm)
    loud = np.flatnonzero(np.abs(samples.astype(np.int32)) >= level)
    return int(loud[0]) if loud.size else None
