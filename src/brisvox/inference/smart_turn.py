"""End of turn: Smart Turn v3.2 (ONNX, BSD-2-Clause) on our own Whisper log-mel features.

The model reads the last 8 s of the user's audio at 16 kHz (shorter audio is padded with
silence on the left) as log-mel features of shape [1, 80, 800] and answers the
probability that the user has finished their turn.  It expects the audio to end with
about 200 ms of silence, so ask it after the VAD stop plus a short wait.

An analysis costs about 100 ms of one core (measured in ``bench/inference.py``): it runs
on the separate end-of-turn executor (:func:`~brisvox.inference.pool.start_turn_executor`),
never on the event loop and never on the VAD pool.  A refused analysis
(:class:`~brisvox.inference.errors.PoolRefused`) is a missing verdict: the turn ends at
its fallback deadline.
"""

from __future__ import annotations

import os
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from brisvox.audio.pcm import PCM16_DTYPE, pcm16_to_array
from brisvox.core.errors import ConfigError
from brisvox.inference.errors import ModelError
from brisvox.inference.mel import SAMPLE_RATE, log_mel, normalize_waveform
from brisvox.inference.models import SMART_TURN, require_model
from brisvox.inference.onnx import load_session
from brisvox.inference.pool import InferencePool

__all__ = ["MAX_SECONDS", "EndOfTurnAnalyzer", "SmartTurnModel", "TurnAudio", "TurnVerdict", "smart_turn_features"]

MAX_SECONDS = 8
_MAX_SAMPLES = MAX_SECONDS * SAMPLE_RATE

Float32Array = npt.NDArray[np.float32]


def smart_turn_features(audio: npt.NDArray[np.int16] | npt.NDArray[np.floating]) -> Float32Array:
    """The model's input for 16 kHz audio: the last 8 s (left-padded with zeros), normalized, as [1, 80, 800].

    int16 samples are scaled to [-1, 1); float samples are taken as they are.
    """
    arr = np.asarray(audio)
    x = arr.astype(np.float32) / np.float32(32768.0) if arr.dtype == np.int16 else arr.astype(np.float32)
    if x.size >= _MAX_SAMPLES:
        x = x[-_MAX_SAMPLES:]
    else:
        x = np.concatenate((np.zeros(_MAX_SAMPLES - x.size, dtype=np.float32), x))
    features: Float32Array = log_mel(normalize_waveform(x))[np.newaxis, :, :]
    return features


@dataclass(frozen=True, slots=True)
class TurnVerdict:
    """The model's answer: the probability that the turn is complete, and that against the threshold."""

    probability: float
    complete: bool


class SmartTurnModel:
    """The loaded Smart Turn network (one per process; ``run`` is thread-safe)."""

    __slots__ = ("_session", "path")

    def __init__(self, session: Any, path: Path | None = None) -> None:
        self._session = session
        self.path = path

    @classmethod
    def load(cls, path: str | os.PathLike[str] | None = None, threads: int = 1) -> SmartTurnModel:
        """Load from ``path``, ``$BRISVOX_SMART_TURN_PATH`` or the model cache."""
        resolved = require_model(SMART_TURN, path)
        return cls(load_session(resolved, threads), resolved)

    def probability(self, audio: npt.NDArray[np.int16] | npt.NDArray[np.floating]) -> float:
        """P(turn complete) for 16 kHz audio (blocking: call it on the end-of-turn executor)."""
        return self.run_features(smart_turn_features(audio))

    def run_features(self, features: Float32Array) -> float:
        try:
            (out,) = self._session.run(None, {"input_features": features})
        except Exception as exc:  # onnxruntime's own exception types
            raise ModelError(f"smart turn inference failed: {exc}") from exc
        return float(np.clip(np.asarray(out).reshape(-1)[0], 0.0, 1.0))


class TurnAudio:
    """The last 8 s of one caller's 16 kHz PCM16 audio, kept for the next analysis."""

    __slots__ = ("_chunks", "_samples")

    def __init__(self) -> None:
        self._chunks: deque[npt.NDArray[np.int16]] = deque()
        self._samples = 0

    def append(self, pcm: bytes) -> None:
        chunk = pcm16_to_array(pcm)
        if chunk.size == 0:
            return
        self._chunks.append(chunk)
        self._samples += chunk.size
        while self._chunks and self._samples - self._chunks[0].size >= _MAX_SAMPLES:
            self._samples -= self._chunks.popleft().size

    def snapshot(self) -> npt.NDArray[np.int16]:
        """A copy of at most the last 8 s."""
        if not self._chunks:
            return np.zeros(0, dtype=PCM16_DTYPE)
        audio = np.concatenate(list(self._chunks))
        return audio[-_MAX_SAMPLES:]

    @property
    def duration(self) -> float:
        return min(self._samples, _MAX_SAMPLES) / SAMPLE_RATE

    def clear(self) -> None:
        self._chunks.clear()
        self._samples = 0


class EndOfTurnAnalyzer:
    """Runs Smart Turn on an executor: ``await analyze(audio)`` -> :class:`TurnVerdict`.

    Raises :class:`~brisvox.inference.errors.PoolRefused` when the executor refuses (a
    missing verdict) and :class:`~brisvox.inference.errors.InferenceFailed` when the
    model fails.
    """

    def __init__(self, model: SmartTurnModel, executor: InferencePool, threshold: float = 0.5) -> None:
        if not 0.0 < threshold < 1.0:
            raise ConfigError(f"end-of-turn threshold must be in (0, 1), got {threshold}")
        self._model = model
        self._executor = executor
        self._threshold = threshold

    @property
    def threshold(self) -> float:
        return self._threshold

    async def analyze(self, audio: npt.NDArray[np.int16] | npt.NDArray[np.floating]) -> TurnVerdict:
        p = await self._executor.run(self._model.probability, audio)
        return TurnVerdict(probability=p, complete=p > self._threshold)

    async def warm(self) -> None:
        """One analysis of silence, so the first real one does not pay onnxruntime's first-run cost."""
        await self._executor.run(self._model.probability, np.zeros(SAMPLE_RATE, dtype=PCM16_DTYPE))
