from __future__ import annotations

import numpy as np
import pytest

from brisvox.audio import (
    array_to_pcm16,
    duration_of,
    float_to_pcm16,
    pcm16_to_array,
    pcm16_to_float,
    sample_count,
    samples_for,
    silence,
)
from brisvox.core.errors import InvalidInput


def test_bytes_and_int16_arrays_convert_both_ways_little_endian() -> None:
    pcm = bytes([0x01, 0x00, 0xFF, 0x7F, 0x00, 0x80])
    arr = pcm16_to_array(pcm)
    assert arr.tolist() == [1, 32767, -32768]
    assert array_to_pcm16(arr) == pcm


def test_the_array_view_does_not_copy_the_bytes() -> None:
    buf = bytearray(4)
    arr = pcm16_to_array(buf)
    buf[0] = 5
    assert arr[0] == 5


def test_an_odd_number_of_bytes_is_refused_with_its_size() -> None:
    with pytest.raises(InvalidInput, match="3 bytes"):
        pcm16_to_array(b"abc")


def test_wider_integers_are_clipped_to_int16() -> None:
    assert pcm16_to_array(array_to_pcm16(np.array([40000, -40000, 7]))).tolist() == [32767, -32768, 7]


def test_floats_round_trip_within_one_lsb_and_clip_at_full_scale() -> None:
    pcm = np.array([0, 1000, -1000, 32767, -32768], dtype=np.int16).tobytes()
    back = pcm16_to_array(float_to_pcm16(pcm16_to_float(pcm)))
    assert back.tolist() == [0, 1000, -1000, 32767, -32768]
    assert pcm16_to_array(float_to_pcm16(np.array([2.0, -2.0]))).tolist() == [32767, -32768]


def test_durations_and_sample_counts_follow_the_rate() -> None:
    assert sample_count(bytes(640)) == 320
    assert duration_of(bytes(640), 16000) == pytest.approx(0.02)
    assert samples_for(0.02, 8000) == 160
    assert silence(0.02, 8000) == bytes(320)
    with pytest.raises(InvalidInput):
        duration_of(b"", 0)
