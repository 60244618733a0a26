"""A scripted text-to-speech provider for simulations and tests.

:class:`MockTts` "speaks" each text segment as a tone whose length follows the text
(``chars_per_second``, default 14, the engine's own estimate), so what the caller heard
can be checked against the text.  Per context it waits the profile's ``first_event``
before the first audio, then produces chunks of ``chunk_seconds`` at ``realtime_factor``
(seconds of synthesis per second of audio; 0 produces instantly).  Word timings are sent
per segment before its audio, in seconds from the context's first sample, unless
``word_timings`` is off (a provider without timestamps).

Faults: ``fail_connect`` makes ``connect`` raise; ``disconnect_after`` (seconds of audio
produced by the session) drops the connection mid-utterance with a fatal ``closed``
error.  The provider keeps every session and each session the text it received per
context (``texts``) and the contexts it was told to cancel, for assertions.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from brisvox.core.clock import Clock
from brisvox.core.errors import ConfigError
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.tts import (
    QueuedTtsSession,
    TtsAudio,
    TtsConfig,
    TtsError,
    TtsProvider,
    TtsWords,
    even_word_timings,
)
from brisvox.sim.latency import INSTANT, Delays, LatencyProfile

__all__ = ["MockTts", "MockTtsConfig", "MockTtsSession"]

_INPUT_CAPACITY = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class MockTtsConfig:
    chars_per_second: float = 14.0
    realtime_factor: float = 0.0
    chunk_seconds: float = 0.04
    word_timings: bool = True
    latency: LatencyProfile = INSTANT  # connect, and first_event per context
    disconnect_after: float | None = None
    fail_connect: ProviderErrorKind | None = None
    busy: bool = False  # every segment is refused as by an embedded model whose pool is full (TtsError BUSY)
    tone_hz: float = 300.0
    level: float = 0.2

    def __post_init__(self) -> None:
        if self.chars_per_second <= 0 or self.chunk_seconds <= 0:
            raise ConfigError(
                f"MockTtsConfig: chars_per_second and chunk_seconds must be positive, "
                f"got {self.chars_per_second}, {self.chunk_seconds}"
            )
        if self.realtime_factor < 0:
            raise ConfigError(f"MockTtsConfig.realtime_factor must not be negative, got {self.realtime_factor}")


class MockTts(TtsProvider):
    def __init__(self, clock: Clock, config: MockTtsConfig = MockTtsConfig(), *, name: str = "mock-tts",
                 record: bool = True) -> None:
        self._clock = clock
        self.config = config
        self._name = name
        self._record = record  # False in a server: a session kept per call would grow without bound
        self.sessions: list[MockTtsSession] = []
        self.warm_calls = 0

    @property
    def name(self) -> str:
        return self._name

    async def warm(self) -> None:
        self.warm_calls += 1

    async def connect(self, config: TtsConfig) -> MockTtsSession:
        delays = self.config.latency.delays()
        await self._clock.sleep(delays.connect())
        if self.config.fail_connect is not None:
            raise ProviderError(self._name, self.config.fail_connect, "scripted connect failure")
        session = MockTtsSession(self._clock, self.config, config, self._name, delays)
        if self._record:
            self.sessions.append(session)
        return session


class MockTtsSession(QueuedTtsSession):
    def __init__(self, clock: Clock, script: MockTtsConfig, config: TtsConfig, name: str, delays: Delays) -> None:
        super().__init__(name=f"{name} session", capacity=_INPUT_CAPACITY)
        self._clock = clock
        self._script = script
        self._provider = name
        self._rate = config.sample_rate
        self._timings = script.word_timings and config.word_timestamps
        self._delays = delays
        self.texts: dict[int, str] = {}
        self.cancelled: list[int] = []
        self.audio_seconds = 0.0  # produced by the session, every context
        self._offsets: dict[int, float] = {}  # seconds of audio per open context

    def _accept(self, context_id: int, text: str) -> bool:
        if not text:
            return False
        self.texts[context_id] = self.texts.get(context_id, "") + text
        return True

    def _on_cancel(self, context_id: int) -> None:
        self.cancelled.append(context_id)
        super()._on_cancel(context_id)

    async def _flushed(self, context_id: int) -> None:
        self._offsets.pop(context_id, None)
        await super()._flushed(context_id)

    async def _speak(self, ctx: int, text: str) -> bool:
        """Synthesize one segment; False once the scripted disconnect ended the session."""
        if self._script.busy:
            err = ProviderError(self._provider, ProviderErrorKind.BUSY, "the inference pool is full")
            await self._emit(TtsError(error=err, context_id=ctx, fatal=False))
            return True
        if ctx not in self._offsets:
            self._offsets[ctx] = 0.0
            await self._clock.sleep(self._delays.first_event())
        offset = self._offsets[ctx]
        duration = len(text) / self._script.chars_per_second
        if self._timings:
            await self._emit(TtsWords(context_id=ctx, words=even_word_timings(text, offset, duration)))
        samples = round(duration * self._rate)
        chunk = max(1, round(self._script.chunk_seconds * self._rate))
        start_sample = round(offset * self._rate)
        for first in range(0, samples, chunk):
            if self.is_cancelled(ctx):
                return True
            n = min(chunk, samples - first)
            await self._clock.sleep(n / self._rate * self._script.realtime_factor)
            limit = self._script.disconnect_after
            if limit is not None and self.audio_seconds + n / self._rate > limit + 1e-9:
                err = ProviderError(self._provider, ProviderErrorKind.CLOSED, "scripted disconnect mid-utterance")
                await self._emit(TtsError(error=err, context_id=ctx, fatal=True))
                self._input.abort()
                self._finish()
                return False
            self.audio_seconds += n / self._rate
            await self._emit(TtsAudio(context_id=ctx, pcm=self._tone(start_sample + first, n), sample_rate=self._rate))
        self._offsets[ctx] = offset + samples / self._rate
        return True

    def _tone(self, start: int, n: int) -> bytes:
        script = self._script
        second = _tone_second(self._rate, script.tone_hz, script.level)
        if second is None:  # a tone whose period does not divide one second: computed per chunk
            t = (start + np.arange(n)) / self._rate
            wave = script.level * np.sin(2 * math.pi * script.tone_hz * t)
            return (wave * 32767.0).astype("<i2").tobytes()
        at = 2 * (start % self._rate)
        out = second[at : at + 2 * n]
        while len(out) < 2 * n:  # the chunk wraps past the end of the second
            out += second[: 2 * n - len(out)]
        return out


@functools.lru_cache(maxsize=8)
def _tone_second(rate: int, hz: float, level: float) -> bytes | None:
    """One second of the tone as PCM16 bytes, when whole cycles fill it (then it repeats
    exactly): slicing it costs no synthesis per chunk, as a server with many calls needs."""
    if not float(hz).is_integer():
        return None
    t = np.arange(rate) / rate
    return (level * np.sin(2 * math.pi * hz * t) * 32767.0).astype("<i2").tobytes()
