"""Silero VAD run by our own onnxruntime code.

The model (``silero_vad.onnx``, MIT) scores windows of 512 samples at 16 kHz (256 at
8 kHz).  Each call sees the window prefixed by the last 64 samples (32 at 8 kHz) of the
previous one and carries a recurrent state of shape (2, 1, 128) from window to window.
:class:`SileroModel` holds one onnxruntime session, shared by every call (``run`` is
thread-safe); :class:`SileroScorer` holds one stream's context and state.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from brisvox.core.errors import ConfigError
from brisvox.inference.errors import ModelError
from brisvox.inference.models import SILERO_VAD, require_model
from brisvox.inference.onnx import load_session

__all__ = ["SileroModel", "SileroScorer"]

_WINDOW = {16000: 512, 8000: 256}
_CONTEXT = {16000: 64, 8000: 32}


class SileroModel:
    """The loaded Silero VAD network (one per process is enough)."""

    __slots__ = ("_session", "path")

    def __init__(self, session: Any, path: Path | None = None) -> None:
        self._session = session
        self.path = path

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None, threads: int = 1) -> SileroModel:
        """Load from ``path``, ``$BRISVOX_SILERO_VAD_PATH`` or the model cache."""
        resolved = require_model(SILERO_VAD, path)
        return cls(load_session(resolved, threads), resolved)

    def run(
        self, x: npt.NDArray[np.float32], state: npt.NDArray[np.float32], sample_rate: int
    ) -> tuple[float, npt.NDArray[np.float32]]:
        """One step: ``x`` is (1, context + window) float32; returns (probability, new state)."""
        try:
            out, new_state = self._session.run(
                None, {"input": x, "state": state, "sr": np.array(sample_rate, dtype=np.int64)}
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ModelError(f"silero VAD inference failed: {exc}") from exc
        return float(out[0, 0]), np.asarray(new_state, dtype=np.float32)

    def scorer(self, sample_rate: int = 16000) -> SileroScorer:
        return SileroScorer(self, sample_rate)


class SileroScorer:
    """One stream's Silero state: the 64-sample context and the (2, 1, 128) recurrent state."""

    __slots__ = ("_ctx", "_input", "_model", "_rate", "_state", "_win")

    def __init__(self, model: SileroModel, sample_rate: int = 16000) -> None:
        if sample_rate not in _WINDOW:
            raise ConfigError(f"Silero VAD runs at 16000 or 8000 Hz, got {sample_rate} (resample first)")
        self._model = model
        self._rate = sample_rate
        self._win = _WINDOW[sample_rate]
        self._ctx = _CONTEXT[sample_rate]
        self._input = np.zeros((1, self._ctx + self._win), dtype=np.float32)
        self._state = np.zeros((2, 1, 128), dtype=np.float32)

    @property
    def sample_rate(self) -> int:
        return self._rate

    @property
    def window_samples(self) -> int:
        return self._win

    def score(self, window: npt.NDArray[np.int16]) -> float:
        if window.shape != (self._win,):
            raise ConfigError(f"Silero VAD windows hold {self._win} samples, got {window.shape}")
        buf = self._input
        # Context: the last samples of the previous window, already at the end of the buffer.
        buf[0, : self._ctx] = buf[0, -self._ctx :]
        buf[0, self._ctx :] = window
        buf[0, self._ctx :] *= np.float32(1.0 / 32768.0)
        prob, self._state = self._model.run(buf, self._state, self._rate)
        return prob

    def reset(self) -> None:
        self._input[:] = 0.0
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
