"""The VAD windowing lever: cutting caller frames into Silero windows, the numpy way (concatenate
and copy per frame, brisvox before) against the bytes buffer VoiceActivityDetector uses now.
Prints the best of 15 rounds of 5000 20 ms frames, in microseconds per frame.

    taskset -c 0 python bench/density/window_lever.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from brisvox.audio.pcm import PCM16_DTYPE, pcm16_to_array
from brisvox.inference.vad import VoiceActivityDetector, _Window

WIN, RATE = 512, 16000


class FreeScorer:
    """A scorer that costs nothing: only the windowing is timed."""

    sample_rate = RATE
    window_samples = WIN

    def score(self, window: np.ndarray) -> float:
        return 0.0

    def reset(self) -> None:
        return None


class NumpyWindows:
    """The windowing before: the partial window as an int16 array, concatenated with each frame."""

    def __init__(self) -> None:
        self._buf = np.zeros(0, dtype=PCM16_DTYPE)
        self._anchor_at = 0.0
        self._anchor_pos = 0

    def _windows(self, pcm: bytes, at: float) -> list[_Window]:
        samples = pcm16_to_array(pcm)
        if self._buf.size == 0:
            self._anchor_at, self._anchor_pos, buf = at, 0, samples
        else:
            buf = np.concatenate((self._buf, samples))
        out, pos = [], 0
        while buf.size - pos >= WIN:
            out.append(_Window(self._anchor_at + (self._anchor_pos + pos) / RATE, buf[pos : pos + WIN]))
            pos += WIN
        self._buf = buf[pos:].copy()
        self._anchor_pos += pos
        return out


def main() -> None:
    contenders = {"numpy (before)": NumpyWindows(), "bytes (now)": VoiceActivityDetector(FreeScorer())}
    frame = (np.random.default_rng(0).standard_normal(320) * 1000).astype(np.int16).tobytes()
    best = dict.fromkeys(contenders, float("inf"))
    for _ in range(15):
        for name, det in contenders.items():
            t = time.perf_counter()
            for i in range(5000):
                det._windows(frame, i * 0.02)
            best[name] = min(best[name], (time.perf_counter() - t) / 5000 * 1e6)
    for name, us in best.items():
        print(f"{name}: {us:.2f} us per 20 ms frame")


if __name__ == "__main__":
    main()
