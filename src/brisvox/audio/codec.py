"""Wire encodings of audio and the conversions between them and PCM16."""

from __future__ import annotations

import enum

from brisvox.audio.g711 import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode
from brisvox.audio.pcm import check_whole_samples

__all__ = ["AudioEncoding", "decode_to_pcm16", "encode_from_pcm16"]


class AudioEncoding(enum.Enum):
    """How samples travel on a wire: PCM16 little-endian, or G.711 (one byte a sample)."""

    PCM16 = "pcm16"
    MULAW = "mulaw"
    ALAW = "alaw"

    @property
    def bytes_per_sample(self) -> int:
        return 2 if self is AudioEncoding.PCM16 else 1


def decode_to_pcm16(data: bytes, encoding: AudioEncoding) -> bytes:
    """PCM16 bytes of ``data`` in ``encoding`` (PCM16 is returned as it is, after a size check)."""
    if encoding is AudioEncoding.PCM16:
        check_whole_samples(data)
        return data
    if encoding is AudioEncoding.MULAW:
        return ulaw_decode(data)
    return alaw_decode(data)


def encode_from_pcm16(pcm: bytes, encoding: AudioEncoding) -> bytes:
    """``pcm`` (PCM16) in ``encoding``."""
    if encoding is AudioEncoding.PCM16:
        check_whole_samples(pcm)
        return pcm
    if encoding is AudioEncoding.MULAW:
        return ulaw_encode(pcm)
    return alaw_encode(pcm)
