"""Silero VAD run by our own onnxruntime code.

The model (``silero_vad.onnx``, MIT) scores windows of 512 samples at 16 kHz (256 at
8 kHz).  Each call sees the window prefixed by the last 64 samples (32 at 8 kHz) of the
previous one and carries a recurrent state of shape (2, 1, 128) from window to window.
:class:`SileroModel` holds one onnxruntime session, shared by every call (``run`` is
thread-safe); :class:`SileroScorer` holds one stream's context and state.

The recurrent state drifts during long non-speech (music, long silence, noise, mostly at
8 kHz) until the model under-reports the speech that follows; the peer that ships this
model measured it and resets the state periodically.  :class:`SileroReset` does the
same: once ``interval`` seconds of audio have passed since the last reset, the next run
of ``quiet_windows`` windows all below ``max_probability`` clears the state and the
context (never inside speech, where a reset would cost confidence).

Digital silence without a model run: from a reset, the model sees zeros (a zero context and
zero windows) until the first sound, so the states and probabilities it goes through are the
same for every stream: :meth:`SileroModel.silence` computes them once per rate and reset
policy, and :meth:`SileroScorer.skip` answers a window of zeros from that table while the
stream is on that path (every window since its last reset was zeros), resets included.
"""

from __future__ import annotations

import math
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from brisvox.core.errors import ConfigError
from brisvox.inference.errors import ModelError
from brisvox.inference.models import SILERO_VAD, require_model
from brisvox.inference.onnx import load_session

__all__ = ["SilencePath", "SileroModel", "SileroReset", "SileroScorer"]

_WINDOW = {16000: 512, 8000: 256}
_CONTEXT = {16000: 64, 8000: 32}
_ZERO_WINDOW = {rate: bytes(2 * samples) for rate, samples in _WINDOW.items()}  # digital silence, as bytes
_SILENCE_WITHOUT_RESET = 256  # windows of the silence table when the policy never resets


@dataclass(frozen=True, slots=True)
class SilencePath:
    """What zeros after a reset do: ``states[j]`` and ``probabilities[j]`` after j zero windows
    (``states[0]`` is the cleared state; ``probabilities[0]`` is unused)."""

    states: npt.NDArray[np.float32]  # (windows + 1, 2, 1, 128), read-only
    probabilities: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class SileroReset:
    """When a stream's recurrent state is cleared (``interval=None`` never resets)."""

    interval: float | None = 2.0
    max_probability: float = 0.1
    quiet_windows: int = 5


class SileroModel:
    """The loaded Silero VAD network (one per process is enough)."""

    __slots__ = ("_session", "_silence", "_silence_lock", "path")

    def __init__(self, session: Any, path: Path | None = None) -> None:
        self._session = session
        self.path = path
        self._silence: dict[tuple[int, SileroReset], SilencePath] = {}
        self._silence_lock = threading.Lock()

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

    def run_batch(
        self, x: npt.NDArray[np.float32], state: npt.NDArray[np.float32], sample_rate: int
    ) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32]]:
        """One step of B streams: ``x`` is (B, context + window), ``state`` (2, B, 128); returns
        the B probabilities and the new (2, B, 128) state (rows are independent)."""
        try:
            out, new_state = self._session.run(
                None, {"input": x, "state": state, "sr": np.array(sample_rate, dtype=np.int64)}
            )
        except Exception as exc:  # onnxruntime raises its own exception types
            raise ModelError(f"silero VAD inference failed: {exc}") from exc
        return np.asarray(out, dtype=np.float32)[:, 0], np.asarray(new_state, dtype=np.float32)

    def silence(self, sample_rate: int, reset: SileroReset) -> SilencePath:
        """The path of zeros from a cleared state at ``sample_rate`` under ``reset``, computed once
        (one model run per window of the reset's cycle: about 11 ms at 16 kHz; at start-up or the
        first silence of that rate)."""
        key = (sample_rate, reset)
        with self._silence_lock:
            path = self._silence.get(key)
            if path is None:
                path = self._silence[key] = self._silence_path(sample_rate, reset)
        return path

    def _silence_path(self, sample_rate: int, reset: SileroReset) -> SilencePath:
        win, ctx = _WINDOW[sample_rate], _CONTEXT[sample_rate]
        if reset.interval is None:
            windows = _SILENCE_WITHOUT_RESET
        else:  # the cycle: the reset comes back after this many windows of zeros (a quiet run)
            windows = max(math.ceil(round(reset.interval * sample_rate) / win), reset.quiet_windows)
        x = np.zeros((1, ctx + win), dtype=np.float32)
        states = [np.zeros((2, 1, 128), dtype=np.float32)]
        probs = [0.0]
        for _ in range(windows):
            prob, state = self.run(x, states[-1], sample_rate)
            states.append(state)
            probs.append(prob)
        table = np.stack(states)
        table.flags.writeable = False
        return SilencePath(table, tuple(probs))

    def scorer(self, sample_rate: int = 16000, reset: SileroReset | None = None) -> SileroScorer:
        return SileroScorer(self, sample_rate, reset)

    def warm(self) -> None:
        """Score a few silent windows, so the first real call does not pay onnxruntime's first-run cost."""
        scorer = self.scorer()
        for _ in range(3):
            scorer.score(np.zeros(scorer.window_samples, dtype=np.int16))


class SileroScorer:
    """One stream's Silero state: the 64-sample context and the (2, 1, 128) recurrent state."""

    __slots__ = (
        "_ctx",
        "_input",
        "_loaded_zeros",
        "_low_run",
        "_model",
        "_policy",
        "_rate",
        "_reset_after",
        "_since_reset",
        "_state",
        "_win",
        "_zeros_since_reset",
        "resets",
    )

    def __init__(self, model: SileroModel, sample_rate: int = 16000, reset: SileroReset | None = None) -> None:
        if sample_rate not in _WINDOW:
            raise ConfigError(f"Silero VAD runs at 16000 or 8000 Hz, got {sample_rate} (resample first)")
        self._model = model
        self._policy = reset or SileroReset()
        interval = self._policy.interval
        self._since_reset = 0  # samples scored since the last reset
        self._low_run = 0  # consecutive windows below max_probability
        self.resets = 0
        self._rate = sample_rate
        self._win = _WINDOW[sample_rate]
        self._ctx = _CONTEXT[sample_rate]
        self._reset_after = None if interval is None else round(interval * sample_rate)
        self._input = np.zeros((1, self._ctx + self._win), dtype=np.float32)
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        # Windows since the last reset, while every one of them was zeros (None: off that path).
        self._zeros_since_reset: int | None = 0
        self._loaded_zeros = False

    @property
    def sample_rate(self) -> int:
        return self._rate

    @property
    def window_samples(self) -> int:
        return self._win

    def score(self, window: npt.NDArray[np.int16]) -> float:
        buf = self.load(window)
        prob, state = self._model.run(buf[np.newaxis], self._state, self._rate)
        self.accept(prob, state)
        return prob

    def load(self, window: npt.NDArray[np.int16]) -> npt.NDArray[np.float32]:
        """The model's input row for the next window: the previous window's last samples, then
        this one, scaled to [-1, 1) (a view of this scorer's buffer: use it before the next load)."""
        if window.shape != (self._win,):
            raise ConfigError(f"Silero VAD windows hold {self._win} samples, got {window.shape}")
        self._loaded_zeros = window.tobytes() == _ZERO_WINDOW[self._rate]  # a memcmp, not numpy's any()
        buf: npt.NDArray[np.float32] = self._input[0]
        # Context: the last samples of the previous window, already at the end of the buffer.
        buf[: self._ctx] = buf[-self._ctx :]
        buf[self._ctx :] = window
        buf[self._ctx :] *= np.float32(1.0 / 32768.0)
        return buf

    def skip(self, window: npt.NDArray[np.int16]) -> float | None:
        """A window of zeros while every window since the last reset was zeros: its probability and
        state from the model's silence path, as :meth:`score` would give them; else None."""
        if window.shape != (self._win,):
            raise ConfigError(f"Silero VAD windows hold {self._win} samples, got {window.shape}")
        if self._zeros_since_reset is None or window.tobytes() != _ZERO_WINDOW[self._rate]:
            return None
        path = self._model.silence(self._rate, self._policy)
        step = self._zeros_since_reset + 1
        if step >= len(path.probabilities):  # never resets: past the table, score it
            return None
        prob = path.probabilities[step]
        self._state = path.states[step]  # read-only: states are replaced, never written in place
        self._zeros_since_reset = step
        self._maybe_reset(prob)
        return prob

    def accept(self, prob: float, state: npt.NDArray[np.float32]) -> None:
        """Take the model's answer for the window just loaded: its probability and the new (2, 1, 128) state."""
        self._state = state
        on_path = self._zeros_since_reset is not None and self._loaded_zeros
        self._zeros_since_reset = self._zeros_since_reset + 1 if on_path and self._zeros_since_reset is not None else None
        self._maybe_reset(prob)

    def _maybe_reset(self, prob: float) -> None:
        self._since_reset += self._win
        self._low_run = self._low_run + 1 if prob < self._policy.max_probability else 0
        if (
            self._reset_after is not None
            and self._since_reset >= self._reset_after
            and self._low_run >= self._policy.quiet_windows
        ):
            self.reset()
            self.resets += 1

    @property
    def state(self) -> npt.NDArray[np.float32]:
        """The recurrent state (a view, for diagnostics and tests)."""
        return self._state

    def reset(self) -> None:
        self._input[:] = 0.0
        self._state = np.zeros((2, 1, 128), dtype=np.float32)
        self._since_reset = 0
        self._low_run = 0
        self._zeros_since_reset = 0
