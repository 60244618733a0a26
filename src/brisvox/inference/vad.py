"""Voice activity: when the caller starts and stops speaking.

Three parts:

* a :class:`WindowScorer` turns one fixed-size window of samples into a speech
  probability (Silero VAD in :mod:`brisvox.inference.silero`, an energy detector in
  :mod:`brisvox.inference.energy`); it may keep state from window to window;
* :class:`VadTracker`, pure, turns the probabilities into start and stop events: speech
  must last ``min_speech`` to start, silence ``min_silence`` to stop; the start is dated
  at the first speech window and the stop is backdated to the first silent window (the
  start of the silence), so a turn-taking deadline counted from the stop is exact;
* :class:`VoiceActivityDetector` feeds PCM16 frames of any size through both, scoring on
  the inference pool's VAD lane when given a pool (never on the event loop for a model).

Digital silence costs no model run (``VadParams.skip_silence``, on by default): a window of
zeros is offered to the scorer first (:meth:`WindowScorer.skip`), and a scorer that knows its
answer exactly takes it without running (Silero, while its state is on the path that zeros
since its last reset take: :class:`~brisvox.inference.silero.SileroScorer`).  The decisions
are the same as scoring every window (tests/inference/test_vad_gate.py,
bench/density/quiet_gate.py); a level floor that also skipped quiet noise was measured and
dropped (docs/PERFORMANCE.md).

Events are :class:`~brisvox.core.frames.VadStartedFrame` and
:class:`~brisvox.core.frames.VadStoppedFrame`.  Time comes in with the audio: the caller
passes the clock time of each frame's first sample.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, cast

import numpy as np
import numpy.typing as npt

from brisvox.audio.pcm import PCM16_DTYPE, check_whole_samples
from brisvox.core.errors import ConfigError, InvalidInput
from brisvox.core.frames import InputAudioFrame, VadStartedFrame, VadStoppedFrame
from brisvox.inference.errors import PoolFull
from brisvox.inference.pool import InferencePool, Lane

if TYPE_CHECKING:
    from brisvox.inference.silero import SileroModel, SileroScorer
    from brisvox.inference.vad_batch import SileroBatcher

__all__ = [
    "VadEvent",
    "VadParams",
    "VadTracker",
    "VoiceActivityDetector",
    "WindowScorer",
    "energy_vad",
    "silero_vad",
]

log = logging.getLogger(__name__)

VadEvent = VadStartedFrame | VadStoppedFrame
Int16Array = npt.NDArray[np.int16]


@dataclass(frozen=True, slots=True)
class VadParams:
    """Start/stop timing.

    ``threshold``: a window at or above it is speech; while speaking, a window counts as
    silence only below ``threshold - hysteresis``.  ``min_speech``: seconds of speech
    before a start; ``min_silence``: seconds of silence before a stop (the hangover).
    The defaults suit Silero (64 ms, 100 ms); :meth:`energy` gives the simulator's
    energy-VAD timing (40 ms start, 300 ms stop).
    """

    threshold: float = 0.5
    hysteresis: float = 0.15
    min_speech: float = 0.064
    min_silence: float = 0.1
    skip_silence: bool = True
    """Digital silence without a model run where the scorer knows its answer (module docs)."""

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise ConfigError(f"VAD threshold must be in (0, 1], got {self.threshold}")
        if not 0.0 <= self.hysteresis < self.threshold:
            raise ConfigError(f"VAD hysteresis must be in [0, threshold), got {self.hysteresis}")
        if self.min_speech < 0 or self.min_silence < 0:
            raise ConfigError(
                f"VAD min_speech and min_silence cannot be negative, got {self.min_speech}, {self.min_silence}"
            )

    def updated(self, overrides: Mapping[str, float | bool]) -> VadParams:
        """These params with ``overrides`` (an agent file's ``[vad]`` keys) over them."""
        unknown = sorted(set(overrides) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ConfigError(f"unknown VAD parameters {unknown}")
        changes: dict[str, Any] = dict(overrides)
        return dataclasses.replace(self, **changes)

    @classmethod
    def energy(cls) -> VadParams:
        """The simulator's energy-VAD timing: 40 ms to start, a 300 ms stop hangover."""
        return cls(min_speech=0.04, min_silence=0.3)


class VadTracker:
    """The start/stop state machine over scored windows (pure: time is an argument).

    Durations are counted in samples, so window arithmetic is exact.
    """

    __slots__ = (
        "_min_silence",
        "_min_speech",
        "_off",
        "_on",
        "_rate",
        "_run",
        "_run_start",
        "_speaking",
        "_started_at",
    )

    def __init__(self, params: VadParams, sample_rate: int) -> None:
        if sample_rate <= 0:
            raise ConfigError(f"sample_rate must be positive, got {sample_rate}")
        self._on = params.threshold
        self._off = params.threshold - params.hysteresis
        self._rate = sample_rate
        self._min_speech = round(params.min_speech * sample_rate)
        self._min_silence = round(params.min_silence * sample_rate)
        self._speaking = False
        self._run = 0  # samples in the current candidate run (speech when quiet, silence when speaking)
        self._run_start = 0.0
        self._started_at = 0.0

    @property
    def speaking(self) -> bool:
        return self._speaking

    def observe(self, at: float, samples: int, probability: float) -> VadEvent | None:
        """One scored window starting at ``at`` and ``samples`` long; returns an event or None."""
        if not self._speaking:
            if probability >= self._on:
                if self._run == 0:
                    self._run_start = at
                self._run += samples
                if self._run >= self._min_speech:
                    self._speaking = True
                    self._started_at = self._run_start
                    self._run = 0
                    return VadStartedFrame(at=self._started_at)
            else:
                self._run = 0
            return None
        if probability < self._off:
            if self._run == 0:
                self._run_start = at
            self._run += samples
            if self._run >= self._min_silence:
                self._speaking = False
                self._run = 0
                return VadStoppedFrame(at=self._run_start, speech_started_at=self._started_at)
        else:
            self._run = 0
        return None

    def finish(self, at: float) -> VadEvent | None:
        """End of the stream at ``at``: a stop if speech is still open (dated at its silence, if any)."""
        if not self._speaking:
            self._run = 0
            return None
        stop_at = self._run_start if self._run else at
        self._speaking = False
        self._run = 0
        return VadStoppedFrame(at=stop_at, speech_started_at=self._started_at)

    def reset(self) -> None:
        self._speaking = False
        self._run = 0


class WindowScorer(Protocol):
    """Speech probability of fixed-size windows of one stream (may keep state between windows).

    ``score`` may run on an inference pool thread; calls for one stream never overlap.
    """

    @property
    def sample_rate(self) -> int: ...

    @property
    def window_samples(self) -> int: ...

    def score(self, window: Int16Array) -> float: ...

    def skip(self, window: Int16Array) -> float | None:
        """``window``'s probability without a model run, advancing the state as :meth:`score` would,
        when the scorer knows it exactly (None: score it)."""
        ...

    def reset(self) -> None: ...


@dataclass(frozen=True, slots=True)
class _Window:
    at: float
    samples: Int16Array


class VoiceActivityDetector:
    """Feeds PCM16 frames through a :class:`WindowScorer` and a :class:`VadTracker`.

    With ``pool`` the windows of each frame are scored in one job on its VAD lane; with
    ``batcher`` (Silero only) in the batcher's next job, together with other calls' windows
    (:mod:`brisvox.inference.vad_batch`).  A refused job (lane full) drops those windows, counted in :attr:`dropped_windows`;
    :attr:`saturated` says whether the last frame's job was refused (the listen stage reports
    each saturation episode to the call).
    Without a pool the scorer runs inline (for the energy VAD, which costs microseconds).
    One detector serves one audio stream; call :meth:`process` sequentially.
    """

    def __init__(
        self,
        scorer: WindowScorer,
        params: VadParams | None = None,
        pool: InferencePool | None = None,
        batcher: tuple[SileroBatcher, SileroScorer] | None = None,
    ) -> None:
        self._scorer = scorer
        self._params = params or VadParams()
        self._pool = pool
        self._batcher = batcher  # the batcher and the Silero scorer it runs (the same object as scorer)
        self._rate = scorer.sample_rate
        self._win = scorer.window_samples
        self._tracker = VadTracker(self._params, self._rate)
        self._pending = b""  # samples of the next window, not yet whole
        self._zeros = bytes(2 * self._win)  # a window of digital silence
        self._anchor_at = 0.0  # clock time of the sample at _anchor_pos == 0
        self._anchor_pos = 0  # samples consumed since the anchor
        # A cancelled caller cannot stop a job already on a thread; the lock keeps that job and
        # the next one from using the scorer's state at the same time.
        self._score_lock = threading.Lock()
        self.dropped_windows = 0
        self.scored_windows = 0
        self.silent_windows = 0
        """Windows of digital silence answered without a model run (``VadParams.skip_silence``)."""
        self.saturated = False
        """Whether the last frame's windows were refused by a full pool (dropped)."""

    @property
    def sample_rate(self) -> int:
        return self._rate

    @property
    def params(self) -> VadParams:
        return self._params

    @property
    def speaking(self) -> bool:
        return self._tracker.speaking

    def _windows(self, pcm: bytes, at: float) -> list[_Window]:
        # The partial window waits as bytes: a frame adds one bytes join and one zero-copy view of
        # its whole windows (no array concatenation and copy per frame: the audio path's allocations).
        check_whole_samples(pcm)
        if not self._pending:
            # Re-anchor the time line on each frame that starts a fresh buffer.
            self._anchor_at = at
            self._anchor_pos = 0
            data = bytes(pcm)
        else:
            data = self._pending + pcm
        count = len(data) // (2 * self._win)
        if count == 0:
            self._pending = data
            return []
        used = count * self._win
        arr = np.frombuffer(data, dtype=PCM16_DTYPE, count=used).reshape(count, self._win)
        start = self._anchor_at + self._anchor_pos / self._rate
        out = [_Window(start + i * self._win / self._rate, arr[i]) for i in range(count)]
        self._pending = data[2 * used :]
        self._anchor_pos += used
        return out

    def _score_all(self, windows: Sequence[Int16Array]) -> list[float]:
        with self._score_lock:
            return [self._scorer.score(w) for w in windows]

    def _track(self, windows: list[_Window], probs: Sequence[float]) -> list[VadEvent]:
        self.scored_windows += len(windows)
        events: list[VadEvent] = []
        for w, p in zip(windows, probs, strict=True):
            event = self._tracker.observe(w.at, self._win, p)
            if event is not None:
                events.append(event)
        return events

    def _skip_silence(self, windows: list[_Window]) -> tuple[list[VadEvent], list[_Window]]:
        """The leading windows of digital silence the scorer answers without a model run; returns
        their events and the windows still to score (from the first one it cannot answer)."""
        events: list[VadEvent] = []
        if not self._params.skip_silence:
            return events, windows
        zeros = self._zeros
        for i, w in enumerate(windows):
            if w.samples.tobytes() != zeros:  # a memcmp: a tenth of numpy's any() per window
                return events, windows[i:]
            with self._score_lock:
                prob = self._scorer.skip(w.samples)
            if prob is None:
                return events, windows[i:]
            self.silent_windows += 1
            event = self._tracker.observe(w.at, self._win, prob)
            if event is not None:
                events.append(event)
        return events, []

    async def process(self, pcm: bytes, at: float) -> list[VadEvent]:
        """Feed one frame whose first sample was heard at ``at``; returns the events it caused."""
        events, windows = self.prepare(pcm, at)
        return events + await self.score(windows) if windows else events

    def prepare(self, pcm: bytes, at: float) -> tuple[list[VadEvent], Sequence[object]]:
        """The part of :meth:`process` that needs no model run: the frame's windows, digital
        silence answered (without a pool, every window: the scorer runs inline).  Returns its events and the windows left to :meth:`score` (opaque;
        none: the frame is done, and ``saturated`` is cleared).  The listen stage calls it in the
        task that delivered the frame; ``prepare`` then ``score`` is exactly ``process``."""
        events, windows = self._skip_silence(self._windows(pcm, at))
        if windows and self._pool is None and self._batcher is None:  # scored inline (the energy VAD)
            events += self._track(windows, self._score_all([w.samples for w in windows]))
            windows = []
        if not windows:
            self.saturated = False
        return events, windows

    async def score(self, left: Sequence[object]) -> list[VadEvent]:
        """Score the windows :meth:`prepare` left (in order, before the next frame's); their events."""
        windows = cast("list[_Window]", left)
        arrays = [w.samples for w in windows]
        try:
            if self._batcher is not None:
                batcher, silero = self._batcher
                probs = await batcher.score(silero, arrays, self._score_lock)
            else:
                assert self._pool is not None  # without one, prepare scored every window
                probs = await self._pool.run(self._score_all, arrays, lane=Lane.VAD)
        except PoolFull:
            self.dropped_windows += len(windows)
            self.saturated = True
            log.debug("VAD windows dropped: the inference pool is full")
            return []
        self.saturated = False
        return self._track(windows, probs)

    async def process_frame(self, frame: InputAudioFrame, at: float) -> list[VadEvent]:
        """:meth:`process` for a caller audio frame; its rate must be the detector's."""
        if frame.sample_rate != self._rate:
            raise InvalidInput(
                f"VAD runs at {self._rate} Hz but the frame is {frame.sample_rate} Hz (resample it first)"
            )
        return await self.process(frame.pcm, at)

    def process_sync(self, pcm: bytes, at: float) -> list[VadEvent]:
        """:meth:`process` scoring inline, for tests, benchmarks and offline use."""
        events, windows = self._skip_silence(self._windows(pcm, at))
        return events + self._track(windows, self._score_all([w.samples for w in windows])) if windows else events

    def finish(self, at: float) -> VadEvent | None:
        """End of the stream: drop the partial window, close open speech."""
        self._pending = b""
        return self._tracker.finish(at)

    def reset(self) -> None:
        """Forget everything (a new stream)."""
        self._pending = b""
        self._tracker.reset()
        with self._score_lock:
            self._scorer.reset()


def energy_vad(
    sample_rate: int = 16000, *, threshold_dbfs: float = -45.0, params: VadParams | None = None
) -> VoiceActivityDetector:
    """The simulator's detector: energy windows of 10 ms, scored inline, 40 ms start / 300 ms stop."""
    from brisvox.inference.energy import EnergyScorer

    return VoiceActivityDetector(
        EnergyScorer(sample_rate, threshold_dbfs=threshold_dbfs), params or VadParams.energy()
    )


def silero_vad(
    model: SileroModel,
    pool: InferencePool | None,
    *,
    sample_rate: int = 16000,
    params: VadParams | None = None,
    batcher: SileroBatcher | None = None,
) -> VoiceActivityDetector:
    """A call's Silero detector, scoring on ``pool``'s VAD lane, or with ``batcher`` (on its pool)
    together with the other calls' windows (64 ms start / 100 ms stop by default)."""
    scorer = model.scorer(sample_rate)
    if batcher is not None:
        return VoiceActivityDetector(scorer, params or VadParams(), batcher=(batcher, scorer))
    return VoiceActivityDetector(scorer, params or VadParams(), pool)
