"""DTMF tones as PCM16: what ``send_dtmf`` plays in band where the carrier has no DTMF command.

Each key is the sum of one low-group and one high-group sine (ITU-T Q.23), each at half
of ``level`` so the sum never clips, followed by silence.  Durations follow Q.24's
minimums with margin: 100 ms of tone and 60 ms of gap by default (receivers need about
40 ms of each).  ``w`` is a 0.5 s pause, as on phone dialers.  Pure: numpy only.
"""

from __future__ import annotations

from typing import Final

import numpy as np

from brisvox.audio.pcm import array_to_pcm16
from brisvox.core.errors import InvalidInput

__all__ = ["DTMF_KEYS", "MAX_DIGITS", "dtmf_pcm", "parse_digits"]

_LOW: Final = (697.0, 770.0, 852.0, 941.0)
_HIGH: Final = (1209.0, 1336.0, 1477.0, 1633.0)
_GRID: Final = ("123A", "456B", "789C", "*0#D")
_FREQS: Final = {key: (_LOW[r], _HIGH[c]) for r, row in enumerate(_GRID) for c, key in enumerate(row)}
DTMF_KEYS: Final = frozenset(_FREQS) | {"w"}
"""The keys ``send_dtmf`` takes: 0-9, ``*``, ``#``, A-D and ``w`` (a 0.5 s pause)."""
MAX_DIGITS: Final = 64
_CASE: Final = {"a": "A", "b": "B", "c": "C", "d": "D", "W": "w"}
_PAUSE: Final = 0.5


def parse_digits(text: str) -> str:
    """``text`` as DTMF keys (upper-cased A-D), or :class:`InvalidInput` naming the first bad key."""
    if not 0 < len(text) <= MAX_DIGITS:
        raise InvalidInput(f"expected 1 to {MAX_DIGITS} DTMF keys, got {len(text)}")
    keys = []
    for i, char in enumerate(text):
        key = _CASE.get(char, char)  # per character: str.upper can turn one character into two
        if key not in DTMF_KEYS:
            raise InvalidInput(f"key {i} ({char!r}) is not a DTMF key (0-9, *, #, A-D, w)")
        keys.append(key)
    return "".join(keys)


def dtmf_pcm(keys: str, sample_rate: int, *, tone: float = 0.1, gap: float = 0.06, level: float = 0.5) -> bytes:
    """PCM16 at ``sample_rate`` playing ``keys`` (checked with :func:`parse_digits`)."""
    if sample_rate < 8000:
        raise InvalidInput(f"sample rate {sample_rate}: DTMF needs at least 8000 Hz")
    if not (0.04 <= tone <= 1.0 and 0.04 <= gap <= 1.0 and 0.0 < level <= 1.0):
        raise InvalidInput("expected tone and gap in [0.04, 1] s and level in (0, 1]")
    parsed = parse_digits(keys)
    n_tone, n_gap = round(tone * sample_rate), round(gap * sample_rate)
    t = np.arange(n_tone, dtype=np.float64) / sample_rate
    # A 5 ms ramp at each end keeps the tone from clicking (a click spreads energy out of band).
    ramp = min(n_tone // 2, round(0.005 * sample_rate))
    envelope = np.ones(n_tone)
    envelope[:ramp] = np.linspace(0.0, 1.0, ramp, endpoint=False)
    envelope[n_tone - ramp:] = np.linspace(1.0, 0.0, ramp, endpoint=False)
    parts: list[np.ndarray] = []
    for key in parsed:
        if key == "w":
            parts.append(np.zeros(round(_PAUSE * sample_rate)))
            continue
        low, high = _FREQS[key]
        wave = (np.sin(2 * np.pi * low * t) + np.sin(2 * np.pi * high * t)) * (level / 2) * envelope
        parts.append(wave)
        parts.append(np.zeros(n_gap))
    samples = np.clip(np.concatenate(parts) * 32767.0, -32768, 32767).astype(np.int16)
    return array_to_pcm16(samples)
