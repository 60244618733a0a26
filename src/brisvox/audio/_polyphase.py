"""A streaming polyphase windowed-sinc resampler in numpy, for the real-time path.

libsoxr processes audio in large blocks, so with 20 ms frames it holds back 20 to 115 ms
of output.  This filter emits every output sample as soon as the input it needs has
arrived: its delay is half the filter, about 2.2 ms when one side is 8 kHz and 1.1 ms at
16 kHz, and the output stays aligned with the input (sample ``j`` of the output is the
signal at ``j / out_rate``).  The filter is a Kaiser-windowed sinc with 16 zero crossings
each side, cut off at 90 % of the lower Nyquist frequency (about 60 dB of alias
rejection at that Nyquist frequency).
"""

from __future__ import annotations

import functools
import math

import numpy as np
import numpy.typing as npt

__all__ = ["PolyphaseResampler"]

_ZERO_CROSSINGS = 16
_ROLLOFF = 0.9
_BETA = 5.7  # Kaiser beta for ~60 dB stopband
_CORRELATE_MAX_PHASES = 8

Float64Array = npt.NDArray[np.float64]


@functools.lru_cache(maxsize=32)
def _design(in_rate: int, out_rate: int) -> tuple[int, int, int, Float64Array]:
    """(L, M, center, reversed polyphase table of shape (L, K)); cached and read-only."""
    g = math.gcd(in_rate, out_rate)
    up, down = out_rate // g, in_rate // g
    fs_up = in_rate * up
    fc = 0.5 * min(in_rate, out_rate) * _ROLLOFF  # Hz
    half = math.ceil(_ZERO_CROSSINGS * fs_up / (2.0 * fc))
    n = np.arange(2 * half + 1, dtype=np.float64) - half
    fcn = fc / fs_up
    h = 2.0 * fcn * np.sinc(2.0 * fcn * n) * np.kaiser(2 * half + 1, _BETA) * up
    taps = math.ceil(h.size / up)
    padded = np.zeros(taps * up, dtype=np.float64)
    padded[: h.size] = h
    table = padded.reshape(taps, up).T  # table[p, k] = h[p + k * up]
    result = np.ascontiguousarray(table[:, ::-1])
    result.flags.writeable = False
    return up, down, half, result


class PolyphaseResampler:
    """Stateful rational-ratio resampler: ``process(int16) -> int16``, ``flush()`` at the end."""

    __slots__ = ("_base", "_center", "_down", "_hist", "_in_rate", "_n_in", "_n_out", "_table", "_taps", "_up")

    def __init__(self, in_rate: int, out_rate: int) -> None:
        self._in_rate = in_rate
        self._up, self._down, self._center, self._table = _design(in_rate, out_rate)
        self._taps = self._table.shape[1]
        self.reset()

    def reset(self) -> None:
        self._n_in = 0  # input samples received
        self._n_out = 0  # output samples emitted
        self._hist = np.zeros(self._taps - 1, dtype=np.float64)
        self._base = -(self._taps - 1)  # absolute input index of _hist[0]

    @property
    def delay_seconds(self) -> float:
        """How far the filter looks ahead: the output lags the input by this much."""
        return self._center / (self._up * self._in_rate)

    def _emit(self, x_all: Float64Array, limit: int) -> npt.NDArray[np.int16]:
        up, down, c, taps = self._up, self._down, self._center, self._taps
        # Output j needs input up to q = (j*M + c) // L; emit while q < number of samples known.
        j0 = self._n_out
        j_end = max(j0, (limit * up - c + down - 1) // down)
        n = j_end - j0
        if n == 0:
            return np.zeros(0, dtype=np.int16)
        if up <= _CORRELATE_MAX_PHASES:
            # Outputs j, j + L, j + 2L, ... share a phase and step M input samples apart: one
            # C-level correlation per phase over the block, then a strided slice of it.
            y = np.empty(n, dtype=np.float64)
            for first in range(j0, min(j0 + up, j_end)):
                u = first * down + c
                q = u // up
                phase = u - q * up
                s0 = q - (taps - 1) - self._base  # index in x_all of this output's first tap
                count = (j_end - first + up - 1) // up
                block = x_all[s0 : s0 + (count - 1) * down + taps]
                y[first - j0 :: up] = np.correlate(block, self._table[phase], "valid")[::down]
        else:
            pos = np.arange(j0, j_end, dtype=np.int64) * down + c
            qs = pos // up
            phases = pos - qs * up
            windows = np.lib.stride_tricks.sliding_window_view(x_all, taps)[qs - (taps - 1) - self._base]
            y = np.einsum("ok,ok->o", self._table[phases], windows)
        self._n_out = j_end
        out: npt.NDArray[np.int16] = np.clip(np.rint(y), -32768, 32767).astype(np.int16)
        return out

    def process(self, samples: npt.NDArray[np.int16]) -> npt.NDArray[np.int16]:
        x_all = np.concatenate((self._hist, samples.astype(np.float64)))
        self._n_in += samples.size
        out = self._emit(x_all, self._n_in)
        keep = self._taps - 1
        self._hist = x_all[-keep:] if keep else np.zeros(0, dtype=np.float64)
        self._base = self._n_in - keep
        return out

    def flush(self) -> npt.NDArray[np.int16]:
        """The remaining outputs up to the input's duration (zeros after the end), then a fresh stream."""
        total = -(-self._n_in * self._up // self._down)  # ceil: outputs that cover the input
        need = math.ceil(self._center / self._up) + self._taps + 1
        x_all = np.concatenate((self._hist, np.zeros(need, dtype=np.float64)))
        emitted = self._n_out
        out = self._emit(x_all, self._n_in + need)[: max(0, total - emitted)]
        self.reset()
        return out
