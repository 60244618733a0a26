"""In-band DTMF tones: each key's two frequencies, the timing, and refused keys."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from brisvox.audio.dtmf import MAX_DIGITS, dtmf_pcm, parse_digits
from brisvox.core.errors import InvalidInput

ROWS = (697, 770, 852, 941)
COLS = (1209, 1336, 1477, 1633)
GRID = ("123A", "456B", "789C", "*0#D")


def _power(samples: np.ndarray, freq: float, rate: int) -> float:
    """Goertzel power of ``freq`` in ``samples`` (what a DTMF receiver measures)."""
    coeff = 2 * np.cos(2 * np.pi * freq / rate)
    s1 = s2 = 0.0
    for x in samples:
        s1, s2 = x + coeff * s1 - s2, s1
    return float(s1 * s1 + s2 * s2 - coeff * s1 * s2)


@pytest.mark.parametrize("rate", [8000, 16000])
@pytest.mark.parametrize(("row", "col"), [(r, c) for r in range(4) for c in range(4)])
def test_each_key_is_its_row_and_column_frequency_and_no_other(rate: int, row: int, col: int) -> None:
    key = GRID[row][col]
    samples = np.frombuffer(dtmf_pcm(key, rate), dtype="<i2").astype(np.float64)
    tone = samples[: int(0.1 * rate)]
    powers = {f: _power(tone, f, rate) for f in ROWS + COLS}
    strongest = sorted(powers, key=powers.__getitem__)[-2:]
    assert sorted(strongest) == [ROWS[row], COLS[col]]
    assert min(powers[ROWS[row]], powers[COLS[col]]) > 100 * max(p for f, p in powers.items() if f not in strongest)


def test_keys_last_100_ms_with_60_ms_gaps_and_w_pauses_half_a_second() -> None:
    assert len(dtmf_pcm("12", 8000)) == 2 * 2 * (800 + 480)
    assert len(dtmf_pcm("1w", 8000)) == 2 * (800 + 480 + 4000)
    pcm = np.frombuffer(dtmf_pcm("5", 8000), dtype="<i2")
    assert np.abs(pcm).max() < 32767 * 0.55 and not pcm[800:].any()  # no clipping; the gap is silent


@pytest.mark.parametrize("bad", ["", "12x", "1 2", "E", "1" * (MAX_DIGITS + 1)])
def test_other_keys_are_refused_naming_the_problem(bad: str) -> None:
    with pytest.raises(InvalidInput):
        parse_digits(bad)


def test_lower_case_letters_are_keys() -> None:
    assert parse_digits("abcdW") == "ABCDw"


@given(st.text(max_size=80))
def test_parse_digits_answers_every_text_with_keys_or_invalid_input(text: str) -> None:
    try:
        keys = parse_digits(text)
    except InvalidInput:
        return
    assert len(keys) == len(text) and set(keys) <= set("0123456789*#ABCDw")
