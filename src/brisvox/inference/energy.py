"""An energy VAD for the simulator and tests: a window is speech when its RMS level is loud enough.

It needs no model, runs at any sample rate and costs microseconds per window, so it can
run inline.  Use it with :meth:`VadParams.energy` (40 ms start, 300 ms stop hangover).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from brisvox.core.errors import ConfigError

__all__ = ["EnergyScorer"]


class EnergyScorer:
    """Probability 1.0 for a window at or above ``threshold_dbfs`` RMS, else 0.0 (stateless)."""

    __slots__ = ("_min_ms", "_rate", "_threshold", "_win")

    def __init__(self, sample_rate: int = 16000, window_ms: int = 10, threshold_dbfs: float = -45.0) -> None:
        if sample_rate <= 0 or window_ms <= 0:
            raise ConfigError(f"energy VAD: sample_rate and window_ms must be positive, got {sample_rate}, {window_ms}")
        self._rate = sample_rate
        self._win = sample_rate * window_ms // 1000
        if self._win < 1:
            raise ConfigError(f"energy VAD: a {window_ms} ms window at {sample_rate} Hz holds no sample")
        self._threshold = threshold_dbfs
        # Mean square (in int16 units) at the threshold: compare without a log per window.
        self._min_ms = (32768.0 * 10 ** (threshold_dbfs / 20)) ** 2

    @property
    def sample_rate(self) -> int:
        return self._rate

    @property
    def window_samples(self) -> int:
        return self._win

    def score(self, window: npt.NDArray[np.int16]) -> float:
        x = window.astype(np.float64)
        return 1.0 if float(np.dot(x, x)) / max(1, x.size) >= self._min_ms else 0.0

    def level_dbfs(self, window: npt.NDArray[np.int16]) -> float:
        """The window's RMS level in dBFS (for diagnostics)."""
        x = window.astype(np.float64)
        ms = float(np.dot(x, x)) / max(1, x.size)
        return -math.inf if ms == 0 else 10 * math.log10(ms) - 20 * math.log10(32768.0)

    def skip(self, window: npt.NDArray[np.int16]) -> float | None:
        """Scoring costs microseconds here: no shortcut."""
        return None

    def reset(self) -> None:
        return None
