"""Whisper's log-mel features in numpy (what Smart Turn takes as input).

16 kHz audio; a 400-point periodic Hann window every 160 samples on the reflect-padded
("centred") signal; the power spectrum through 80 Slaney-normalized triangular mel
filters on the Slaney mel scale (0 to 8 kHz); log10 with a 1e-10 floor; the last frame
dropped; values clamped to (max - 8); then (x + 4) / 4.  The same as Hugging Face's
``WhisperFeatureExtractor`` (a test checks it), without torch or transformers.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from brisvox.core.errors import InvalidInput

__all__ = ["HOP_LENGTH", "N_FFT", "N_MELS", "SAMPLE_RATE", "log_mel", "mel_filters", "normalize_waveform"]

SAMPLE_RATE = 16000
N_FFT = 400
HOP_LENGTH = 160
N_MELS = 80

Float32Array = npt.NDArray[np.float32]
Float64Array = npt.NDArray[np.float64]

_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = 15.0
_LOGSTEP = 27.0 / math.log(6.4)


def _hz_to_mel(hz: Float64Array) -> Float64Array:
    mel = 3.0 * hz / 200.0
    high = hz >= _MIN_LOG_HZ
    mel[high] = _MIN_LOG_MEL + np.log(hz[high] / _MIN_LOG_HZ) * _LOGSTEP
    return mel


def _mel_to_hz(mel: Float64Array) -> Float64Array:
    hz = 200.0 * mel / 3.0
    high = mel >= _MIN_LOG_MEL
    hz[high] = _MIN_LOG_HZ * np.exp((mel[high] - _MIN_LOG_MEL) / _LOGSTEP)
    return hz


def mel_filters(
    n_mels: int = N_MELS, n_fft: int = N_FFT, sample_rate: int = SAMPLE_RATE, fmax: float | None = None
) -> Float64Array:
    """Slaney-normalized triangular filters on the Slaney mel scale, shape (n_mels, n_fft // 2 + 1)."""
    fmax = sample_rate / 2 if fmax is None else fmax
    n_bins = n_fft // 2 + 1
    fft_freqs = np.linspace(0.0, sample_rate // 2, n_bins)
    edges = _mel_to_hz(np.linspace(_hz_to_mel(np.array([0.0]))[0], _hz_to_mel(np.array([fmax]))[0], n_mels + 2))
    diff = np.diff(edges)
    slopes = edges[None, :] - fft_freqs[:, None]
    down = -slopes[:, :-2] / diff[:-1]
    up = slopes[:, 2:] / diff[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    filters *= (2.0 / (edges[2 : n_mels + 2] - edges[:n_mels]))[None, :]
    result: Float64Array = filters.T
    return result


_FILTERS = mel_filters()
_WINDOW = np.hanning(N_FFT + 1)[:-1]  # periodic Hann

# The filter bank as sparse (bin, weight) runs, one per mel: each triangle covers a few
# bins, so the projection is ~400 multiply-adds per frame with no BLAS call (a BLAS
# matrix product here spins up its own threads, which on a busy machine costs 40x more
# than the arithmetic).
_ROWS, _COLS = np.nonzero(_FILTERS)
_WEIGHTS = _FILTERS[_ROWS, _COLS]
_STARTS = np.searchsorted(_ROWS, np.arange(N_MELS))
_EMPTY = np.bincount(_ROWS, minlength=N_MELS) == 0


def _project(power: Float64Array) -> Float64Array:
    """(frames, bins) power -> (mels, frames) mel energies."""
    by_bin = np.ascontiguousarray(power.T)  # (bins, frames): row gathers are copies of whole rows
    weighted = by_bin[_COLS] * _WEIGHTS[:, None]
    mel: Float64Array = np.add.reduceat(weighted, np.minimum(_STARTS, _COLS.size - 1), axis=0)
    mel[_EMPTY] = 0.0
    return mel


def normalize_waveform(audio: npt.NDArray[np.floating]) -> Float32Array:
    """Zero mean, unit variance (float32, with a 1e-7 variance floor), as ``do_normalize=True`` does."""
    x = np.asarray(audio, dtype=np.float32)
    out: Float32Array = ((x - x.mean()) / np.sqrt(x.var() + np.float32(1e-7))).astype(np.float32)
    return out


def log_mel(audio: npt.NDArray[np.floating]) -> Float32Array:
    """Whisper log-mel features of 16 kHz float audio: shape (80, len(audio) // 160)."""
    x = np.asarray(audio, dtype=np.float64)
    if x.ndim != 1 or x.size < N_FFT // 2 + 1:
        raise InvalidInput(f"log_mel needs mono audio of at least {N_FFT // 2 + 1} samples, got shape {x.shape}")
    pad = N_FFT // 2
    padded = np.pad(x, (pad, pad), mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_LENGTH]
    spectrum = np.fft.rfft(frames * _WINDOW, n=N_FFT, axis=1)
    power = spectrum.real**2 + spectrum.imag**2  # (frames, bins)
    mel = np.maximum(1e-10, _project(power))  # (mels, frames)
    logspec = np.log10(mel)[:, :-1]
    logspec = np.maximum(logspec, logspec.max() - 8.0)
    out: Float32Array = ((logspec + 4.0) / 4.0).astype(np.float32)
    return out
