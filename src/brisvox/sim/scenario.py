"""A caller's speech as data: segments of speech and silence, with words and times.

:class:`ScenarioBuilder` writes a scenario the way a test reads it::

    scenario = ScenarioBuilder().pause(0.5).say("book a table for two").pause(1.0).build()

Each ``say`` becomes a :class:`SpokenUtterance` whose words are spread over its duration
in proportion to their length (default pace 2.5 words/s).  :meth:`CallerScenario.render`
turns the scenario into PCM16: speech as tone bursts (one burst per word, a short dip
between words) that an energy VAD detects, silence as zeros or a low noise floor.  The
same scenario feeds :class:`~brisvox.sim.mock_stt.MockStt`, which "recognizes" exactly
these words at these times, so a simulation knows what the caller said and when.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass, field
from typing import Self

import numpy as np

from brisvox.core.errors import ConfigError, InvalidInput
from brisvox.core.frames import WordTiming

__all__ = ["CallerScenario", "ScenarioBuilder", "Segment", "SegmentKind", "SpokenUtterance"]


class SegmentKind(enum.Enum):
    SPEECH = "speech"
    SILENCE = "silence"


@dataclass(frozen=True, slots=True, kw_only=True)
class SpokenUtterance:
    """What the caller says in one speech segment; times are seconds from the scenario start."""

    text: str
    start: float
    end: float
    words: tuple[WordTiming, ...]

    def __repr__(self) -> str:
        return f"SpokenUtterance(<{len(self.words)} words>, {self.start:.3f}-{self.end:.3f})"


@dataclass(frozen=True, slots=True, kw_only=True)
class Segment:
    kind: SegmentKind
    start: float
    end: float
    utterance: SpokenUtterance | None = None

    @property
    def duration(self) -> float:
        return self.end - self.start


@dataclass(frozen=True, slots=True, kw_only=True)
class _Voice:
    tone_hz: float
    level: float
    noise_level: float
    seed: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CallerScenario:
    """A built scenario: its segments, and PCM16 mono rendering at ``sample_rate``."""

    sample_rate: int
    segments: tuple[Segment, ...]
    _voice: _Voice = field(repr=False)

    @property
    def duration(self) -> float:
        return self.segments[-1].end if self.segments else 0.0

    @property
    def utterances(self) -> tuple[SpokenUtterance, ...]:
        return tuple(s.utterance for s in self.segments if s.utterance is not None)

    def is_speech_at(self, t: float) -> bool:
        return any(s.kind is SegmentKind.SPEECH and s.start <= t < s.end for s in self.segments)

    def render(self) -> bytes:
        """The whole scenario as PCM16 little-endian mono."""
        n = round(self.duration * self.sample_rate)
        out = np.zeros(n, dtype=np.float64)
        v = self._voice
        if v.noise_level > 0:
            out += np.random.default_rng(v.seed).normal(0.0, v.noise_level, n)
        for utt in self.utterances:
            for i, word in enumerate(utt.words):
                self._burst(out, word, v.tone_hz * (1.0 + 0.06 * (i % 3)), v.level)
        return (np.clip(out, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()

    def _burst(self, out: np.ndarray, word: WordTiming, hz: float, level: float) -> None:
        sr = self.sample_rate
        a = round(word.start * sr)
        # Leave a dip of up to 40 ms at the end of each word, as between spoken words.
        b = max(a + 1, round(word.end * sr) - min(round(0.04 * sr), (round(word.end * sr) - a) // 5))
        t = np.arange(b - a) / sr
        tone = 0.7 * np.sin(2 * math.pi * hz * t) + 0.3 * np.sin(4 * math.pi * hz * t)
        ramp = min(len(t) // 2, round(0.01 * sr))
        if ramp > 0:
            env = 0.5 - 0.5 * np.cos(np.linspace(0.0, math.pi, ramp))
            tone[:ramp] *= env
            tone[-ramp:] *= env[::-1]
        out[a:b] += level * tone

    def frames(self, frame_seconds: float = 0.02) -> list[bytes]:
        """The rendering cut into frames of ``frame_seconds`` (the last one zero-padded)."""
        size = round(frame_seconds * self.sample_rate) * 2
        if size <= 0:
            raise InvalidInput(f"frame_seconds must give at least one sample, got {frame_seconds}")
        pcm = self.render()
        pad = (-len(pcm)) % size
        pcm += b"\x00" * pad
        return [pcm[i : i + size] for i in range(0, len(pcm), size)]


class ScenarioBuilder:
    """Builds a :class:`CallerScenario` segment by segment (see the module docs)."""

    def __init__(
        self,
        *,
        sample_rate: int = 16_000,
        words_per_second: float = 2.5,
        tone_hz: float = 220.0,
        level: float = 0.3,
        noise_level: float = 0.0,
        seed: int = 0,
    ) -> None:
        if sample_rate <= 0 or words_per_second <= 0:
            raise ConfigError(
                f"ScenarioBuilder: sample_rate and words_per_second must be positive, got {sample_rate}, {words_per_second}"
            )
        self._sample_rate = sample_rate
        self._wps = words_per_second
        self._voice = _Voice(tone_hz=tone_hz, level=level, noise_level=noise_level, seed=seed)
        self._segments: list[Segment] = []
        self._t = 0.0

    def pause(self, seconds: float) -> Self:
        """Silence (or the noise floor) for ``seconds``."""
        if seconds <= 0:
            raise InvalidInput(f"a pause must be longer than 0 s, got {seconds}")
        self._segments.append(Segment(kind=SegmentKind.SILENCE, start=self._t, end=self._t + seconds))
        self._t += seconds
        return self

    def say(self, text: str, *, duration: float | None = None) -> Self:
        """Speech of ``text``, lasting ``duration`` (default: its words at the builder's pace)."""
        words = text.split()
        if not words:
            raise InvalidInput("say() needs at least one word")
        total = duration if duration is not None else len(words) / self._wps
        if total <= 0:
            raise InvalidInput(f"a speech segment must be longer than 0 s, got {total}")
        weights = [len(w) + 1 for w in words]
        scale = total / sum(weights)
        timings: list[WordTiming] = []
        t = self._t
        for word, weight in zip(words, weights, strict=True):
            timings.append(WordTiming(word, t, t + weight * scale))
            t += weight * scale
        end = self._t + total
        utt = SpokenUtterance(text=" ".join(words), start=self._t, end=end, words=tuple(timings))
        self._segments.append(Segment(kind=SegmentKind.SPEECH, start=self._t, end=end, utterance=utt))
        self._t = end
        return self

    def build(self) -> CallerScenario:
        return CallerScenario(sample_rate=self._sample_rate, segments=tuple(self._segments), _voice=self._voice)
