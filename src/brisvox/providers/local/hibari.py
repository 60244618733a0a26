"""Embedded text-to-speech: hibari (a 7.9 MB ONNX voice, numpy and onnxruntime only), 24 kHz.

Each text segment is split into the sentences hibari synthesizes at once; every sentence
is one job on an :class:`~brisvox.inference.InferencePool` (by default one of its own
with one thread), never on the event loop, and its audio is sent in chunks of
``chunk_seconds``.  A cancel takes effect for the reader at once (see
:class:`~brisvox.providers.tts.TtsSessionBase`) and for the model at the next sentence.

hibari exposes no phoneme or word durations (its network returns spectra only), so this
provider sends no word timings; the engine estimates what was heard from the text.

Every sentence hibari synthesizes starts with about 0.25-0.3 s of near-silence (measured
with the bundled voice); the caller would wait that long for the first sound of every
reply.  The session cuts each sentence's leading silence to ``lead_in`` (10 ms by
default, with a 5 ms fade-in so the cut does not click): the pause between sentences
stays, because each sentence also ends with its own trailing silence.  The
first synthesis after loading is slow (about 0.6 s here): call :meth:`HibariTts.warm` at
start.  The default voice ("heart", American English) ships inside the package; other
voices would be downloaded by hibari at run time, which this provider refuses.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np

from brisvox.audio import float_to_pcm16
from brisvox.audio.pcm import AUDIBLE_LEVEL
from brisvox.core.errors import ConfigError
from brisvox.inference import InferenceError, InferencePool, PoolConfig, PoolFull
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.tts import QueuedTtsSession, TtsAudio, TtsConfig, TtsError, TtsProvider

__all__ = ["HIBARI_SAMPLE_RATE", "HibariConfig", "HibariTts", "HibariTtsSession"]

HIBARI_SAMPLE_RATE = 24_000
_BUNDLED_VOICE = "heart"
_INPUT_CAPACITY = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class HibariConfig:
    voice: str = _BUNDLED_VOICE
    threads: int = 1
    chunk_seconds: float = 0.1
    seed: int | None = 0  # fixes the noise component: the same text gives the same audio
    lead_in: float = 0.01  # seconds of a sentence's leading silence that are kept

    def __post_init__(self) -> None:
        if self.lead_in < 0:
            raise ConfigError(f"HibariConfig.lead_in must be >= 0, got {self.lead_in}")
        if self.voice != _BUNDLED_VOICE:
            raise ConfigError(f"HibariConfig.voice: only the bundled voice {_BUNDLED_VOICE!r} is offline, got {self.voice!r}")
        if self.threads < 1 or self.chunk_seconds <= 0:
            raise ConfigError(f"HibariConfig: threads >= 1 and chunk_seconds > 0, got {self.threads}, {self.chunk_seconds}")


class _Engine:
    """The loaded model and its noise generator; only ever called on a pool thread."""

    def __init__(self, config: HibariConfig) -> None:
        from hibari import Hibari  # type: ignore[import-untyped]

        self._tts: Any = Hibari(voice=config.voice, threads=config.threads)
        self._rng = np.random.default_rng(config.seed)

    def sentences(self, text: str) -> list[str]:
        """Phoneme strings, one per sentence the model synthesizes at once."""
        return list(self._tts.phonemize(text))

    def synthesize(self, phonemes: str, speed: float, lead_in: float) -> bytes:
        audio = np.asarray(self._tts.from_ids(self._tts.ids(phonemes), speed, self._rng), dtype=np.float32)
        return float_to_pcm16(trim_leading_silence(audio, round(lead_in * HIBARI_SAMPLE_RATE)))


_AUDIBLE = AUDIBLE_LEVEL / 32768.0  # the PCM16 audibility threshold on hibari's float scale
_FADE_IN = 120  # samples (5 ms at 24 kHz)


def trim_leading_silence(audio: np.ndarray[Any, np.dtype[np.float32]], keep: int) -> np.ndarray[Any, np.dtype[np.float32]]:
    """``audio`` from ``keep`` samples before its first audible sample, faded in over the
    first 5 ms (all of it when nothing is audible)."""
    loud = np.flatnonzero(np.abs(audio) >= _AUDIBLE)
    if not loud.size:
        return audio
    start = max(0, int(loud[0]) - keep)
    if start == 0:
        return audio
    out = audio[start:].copy()
    n = min(_FADE_IN, out.size)
    out[:n] *= np.linspace(0.0, 1.0, n, endpoint=False, dtype=np.float32)
    return out


class HibariTts(TtsProvider):
    """The provider.  ``warm`` loads the model and synthesizes once; ``aclose`` frees it."""

    def __init__(self, config: HibariConfig = HibariConfig(), *, pool: InferencePool | None = None) -> None:
        self.config = config
        self._own_pool = pool is None
        self._pool = pool if pool is not None else InferencePool(PoolConfig(name="brisvox-hibari", threads=1, jobs_per_thread=16))
        self._engine: _Engine | None = None
        self._loading = asyncio.Lock()

    @property
    def name(self) -> str:
        return "local-hibari"

    @property
    def sample_rate(self) -> int:
        return HIBARI_SAMPLE_RATE

    async def _loaded(self) -> _Engine:
        async with self._loading:
            if self._engine is None:
                try:
                    self._engine = await self._pool.run(_Engine, self.config)
                except InferenceError as exc:
                    raise ProviderError(self.name, ProviderErrorKind.MODEL, f"cannot load hibari: {exc}") from exc
            return self._engine

    async def warm(self) -> None:
        engine = await self._loaded()
        for phonemes in await self._pool.run(engine.sentences, "Warm up."):
            await self._pool.run(engine.synthesize, phonemes, 1.0, self.config.lead_in)

    async def connect(self, config: TtsConfig) -> HibariTtsSession:
        if config.sample_rate != HIBARI_SAMPLE_RATE:
            raise ConfigError(f"local-hibari: sample_rate must be {HIBARI_SAMPLE_RATE}, got {config.sample_rate}")
        if config.voice not in (None, self.config.voice):
            raise ConfigError(f"local-hibari: voice {config.voice!r} is not loaded (have {self.config.voice!r})")
        if not config.language.startswith("en"):
            raise ConfigError(f"local-hibari: speaks English only, got language {config.language!r}")
        if not 0.5 <= config.speed <= 2.0:
            raise ConfigError(f"local-hibari: speed must be within 0.5..2.0, got {config.speed}")
        engine = await self._loaded()
        return HibariTtsSession(engine, self._pool, self.config, config.speed)

    async def aclose(self) -> None:
        self._engine = None
        if self._own_pool:
            await self._pool.aclose()


class HibariTtsSession(QueuedTtsSession):
    def __init__(self, engine: _Engine, pool: InferencePool, config: HibariConfig, speed: float) -> None:
        super().__init__(name="local-hibari session", capacity=_INPUT_CAPACITY)
        self._engine = engine
        self._pool = pool
        self._speed = speed
        self._lead_in = config.lead_in
        self._chunk = 2 * max(1, round(config.chunk_seconds * HIBARI_SAMPLE_RATE))

    async def _speak(self, ctx: int, text: str) -> bool:
        try:
            sentences = await self._pool.run(self._engine.sentences, text)
            for phonemes in sentences:
                if self.is_cancelled(ctx):
                    return True
                pcm = await self._pool.run(self._engine.synthesize, phonemes, self._speed, self._lead_in)
                for i in range(0, len(pcm), self._chunk):
                    await self._emit(TtsAudio(context_id=ctx, pcm=pcm[i : i + self._chunk], sample_rate=HIBARI_SAMPLE_RATE))
        except PoolFull:
            err = ProviderError("local-hibari", ProviderErrorKind.BUSY, "the inference pool is full")
            await self._emit(TtsError(error=err, context_id=ctx, fatal=False))
        except InferenceError as exc:
            err = ProviderError("local-hibari", ProviderErrorKind.MODEL, f"synthesis failed: {type(exc.__cause__ or exc).__name__}")
            await self._emit(TtsError(error=err, context_id=ctx, fatal=False))
        return True
