from __future__ import annotations

import pytest

from brisvox.audio import AudioEncoding, decode_to_pcm16, encode_from_pcm16, ulaw_encode
from brisvox.core.errors import InvalidInput


def test_each_encoding_round_trips_through_pcm16() -> None:
    for enc in AudioEncoding:
        wire = encode_from_pcm16(bytes(320), enc)
        assert len(wire) == 160 * enc.bytes_per_sample
        pcm = decode_to_pcm16(wire, enc)
        assert len(pcm) == 320
        assert encode_from_pcm16(pcm, enc) == wire


def test_mulaw_goes_through_the_g711_encoder() -> None:
    pcm = b"\x10\x27" * 4
    assert encode_from_pcm16(pcm, AudioEncoding.MULAW) == ulaw_encode(pcm)


def test_half_a_pcm16_sample_is_refused() -> None:
    with pytest.raises(InvalidInput):
        decode_to_pcm16(b"\x00", AudioEncoding.PCM16)
