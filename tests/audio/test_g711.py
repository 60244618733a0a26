"""G.711 against the ITU-T G.191 reference algorithms (scalar transcriptions below) and audioop."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from brisvox.audio import alaw_decode, alaw_encode, ulaw_decode, ulaw_encode

ALL_SAMPLES = np.arange(-32768, 32768, dtype=np.int16)
ALL_CODES = bytes(range(256))


# --- scalar transcriptions of ulaw_compress/ulaw_expand/alaw_compress/alaw_expand (G.191 g711.c) ---


def itu_ulaw_compress(x: int) -> int:
    absno = ((~x) >> 2) + 33 if x < 0 else (x >> 2) + 33
    absno = min(absno, 0x1FFF)
    i = absno >> 6
    segno = 1
    while i != 0:
        segno += 1
        i >>= 1
    high = 0x8 - segno
    low = 0xF - ((absno >> segno) & 0xF)
    code = (high << 4) | low
    return code | 0x80 if x >= 0 else code


def itu_ulaw_expand(code: int) -> int:
    sign = -1 if code < 0x80 else 1
    mantissa = ~code
    exponent = (mantissa >> 4) & 0x7
    segment = exponent + 1
    mantissa &= 0xF
    step = 4 << segment
    return sign * ((0x80 << exponent) + step * mantissa + step // 2 - 4 * 33)


def itu_alaw_compress(x: int) -> int:
    ix = (~x) >> 4 if x < 0 else x >> 4
    if ix > 15:
        iexp = 1
        while ix > 16 + 15:
            ix >>= 1
            iexp += 1
        ix -= 16
        ix += iexp << 4
    if x >= 0:
        ix |= 0x80
    return ix ^ 0x55


def itu_alaw_expand(code: int) -> int:
    ix = (code ^ 0x55) & 0x7F
    iexp = ix >> 4
    mant = ix & 0xF
    if iexp > 0:
        mant += 16
    mant = (mant << 4) + 0x8
    if iexp > 1:
        mant <<= iexp - 1
    return mant if code > 127 else -mant


def codes(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype=np.uint8)


def samples(data: bytes) -> np.ndarray:
    return np.frombuffer(data, dtype="<i2")


def test_mulaw_encoding_matches_the_itu_reference_for_every_16_bit_sample() -> None:
    expected = np.array([itu_ulaw_compress(int(x)) for x in ALL_SAMPLES], dtype=np.uint8)
    np.testing.assert_array_equal(codes(ulaw_encode(ALL_SAMPLES.tobytes())), expected)


def test_alaw_encoding_matches_the_itu_reference_for_every_16_bit_sample() -> None:
    expected = np.array([itu_alaw_compress(int(x)) for x in ALL_SAMPLES], dtype=np.uint8)
    np.testing.assert_array_equal(codes(alaw_encode(ALL_SAMPLES.tobytes())), expected)


def test_mulaw_decoding_matches_the_itu_reference_for_every_code() -> None:
    expected = np.array([itu_ulaw_expand(c) for c in ALL_CODES], dtype=np.int16)
    np.testing.assert_array_equal(samples(ulaw_decode(ALL_CODES)), expected)


def test_alaw_decoding_matches_the_itu_reference_for_every_code() -> None:
    expected = np.array([itu_alaw_expand(c) for c in ALL_CODES], dtype=np.int16)
    np.testing.assert_array_equal(samples(alaw_decode(ALL_CODES)), expected)


@pytest.mark.parametrize(
    ("sample", "ulaw", "alaw"),
    [(0, 0xFF, 0xD5), (-1, 0x7F, 0x55), (32767, 0x80, 0xAA), (-32768, 0x00, 0x2A), (1000, 0xCE, 0xFA)],
)
def test_well_known_code_points_encode_as_published(sample: int, ulaw: int, alaw: int) -> None:
    pcm = np.array([sample], dtype="<i2").tobytes()
    assert codes(ulaw_encode(pcm))[0] == ulaw
    assert codes(alaw_encode(pcm))[0] == alaw


def test_the_loudest_codes_decode_to_the_published_peaks() -> None:
    assert samples(ulaw_decode(bytes([0x80, 0x00]))).tolist() == [32124, -32124]
    assert samples(alaw_decode(bytes([0xAA, 0x2A]))).tolist() == [32256, -32256]


def test_decoding_then_encoding_returns_every_code_except_mulaw_negative_zero() -> None:
    assert codes(alaw_encode(alaw_decode(ALL_CODES))).tolist() == list(range(256))
    # 0x7F decodes to 0, which encodes as positive zero (0xFF); every other code round-trips.
    round_trip = codes(ulaw_encode(ulaw_decode(ALL_CODES))).tolist()
    assert round_trip == [0xFF if c == 0x7F else c for c in range(256)]


def test_an_int16_array_encodes_like_its_bytes() -> None:
    chunk = ALL_SAMPLES[::97]
    assert ulaw_encode(chunk) == ulaw_encode(chunk.tobytes())
    assert alaw_encode(chunk) == alaw_encode(chunk.tobytes())


def _audioop():  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return pytest.importorskip("audioop", reason="audioop (or audioop-lts) is not installed")


def test_decoders_and_alaw_encoder_agree_with_audioop_everywhere() -> None:
    audioop = _audioop()
    assert ulaw_decode(ALL_CODES) == audioop.ulaw2lin(ALL_CODES, 2)
    assert alaw_decode(ALL_CODES) == audioop.alaw2lin(ALL_CODES, 2)
    assert alaw_encode(ALL_SAMPLES.tobytes()) == audioop.lin2alaw(ALL_SAMPLES.tobytes(), 2)


def test_mulaw_encoder_differs_from_audioop_only_at_negative_decision_boundaries() -> None:
    audioop = _audioop()
    ours = codes(ulaw_encode(ALL_SAMPLES.tobytes()))
    theirs = codes(audioop.lin2ulaw(ALL_SAMPLES.tobytes(), 2))
    differ = ours != theirs
    # audioop negates negative samples; the ITU code takes their one's complement.
    assert np.all(ALL_SAMPLES[differ] < 0)
    assert int(differ.sum()) == 508
    assert np.all(np.abs(ours[differ].astype(int) - theirs[differ].astype(int)) == 1)
