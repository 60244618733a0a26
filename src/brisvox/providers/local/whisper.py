"""Embedded speech-to-text: Whisper tiny.en through faster-whisper (CTranslate2), on CPU.

Whisper is not a streaming model, so the session works per utterance: it buffers the
audio it is sent and, on ``finalize()`` (which the engine calls when the VAD says the
caller stopped), transcribes the buffered segment and answers with one final
(``is_final`` and ``from_finalize``; an empty one when the segment was too short).
There are no interims.  Transcription runs on an :class:`~brisvox.inference.InferencePool`
(by default one of its own with one thread; CTranslate2 itself uses ``threads`` cores),
never on the event loop, so ``send_audio`` never waits for the model.

``WhisperConfig.prompt`` (the agent file's ``[stt.options] prompt``) is the agent's
vocabulary, given to Whisper as the text before each segment.

The model directory comes from ``WhisperConfig.model_dir``, else ``$BRISVOX_WHISPER_DIR``,
else the model cache that ``brisvox models fetch`` fills (``whisper-tiny.en/``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from brisvox.audio import pcm16_to_float
from brisvox.core.channel import Channel
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.tasks import TaskScope
from brisvox.inference import InferenceError, InferencePool, PoolConfig, PoolFull, model_path
from brisvox.inference.models import WHISPER_TINY_EN
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.session import SessionBase
from brisvox.providers.stt import SttConfig, SttError, SttEvent, SttProvider, Transcript

__all__ = ["WHISPER_DIR_ENV", "WhisperConfig", "WhisperStt", "WhisperSttSession"]

log = logging.getLogger(__name__)

WHISPER_DIR_ENV = "BRISVOX_WHISPER_DIR"
SAMPLE_RATE = 16_000
_JOBS = 4  # finalized segments waiting for the model, per session
MAX_PROMPT_CHARS = 600  # Whisper keeps at most 223 prompt tokens; a longer prompt would be cut silently


@dataclass(frozen=True, slots=True, kw_only=True)
class WhisperConfig:
    model_dir: str | os.PathLike[str] | None = None
    compute_type: str = "int8"
    threads: int = 2
    beam_size: int = 1
    language: str = "en"
    max_segment_seconds: float = 30.0  # Whisper's window; older audio of a longer segment is dropped
    min_segment_seconds: float = 0.1  # shorter segments are answered with an empty final
    # Words the caller is likely to say (the agent's vocabulary: names, party sizes, times),
    # given to Whisper as the previous text of every segment: it steers spelling and numbers
    # (bench/whisper_models.py: tiny.en 22.1 % -> 17.7 % WER on the demo's sentences).
    prompt: str | None = None

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ConfigError(f"WhisperConfig.threads must be at least 1, got {self.threads}")
        if self.beam_size < 1:
            raise ConfigError(f"WhisperConfig.beam_size must be at least 1, got {self.beam_size}")
        if self.prompt is not None and not 0 < len(self.prompt) <= MAX_PROMPT_CHARS:
            raise ConfigError(f"WhisperConfig.prompt must hold 1 to {MAX_PROMPT_CHARS} characters, got {len(self.prompt)}")
        if not 0 < self.max_segment_seconds <= 30.0:
            raise ConfigError(f"WhisperConfig.max_segment_seconds must be in (0, 30], got {self.max_segment_seconds}")

    def resolve_dir(self, env: dict[str, str] | None = None) -> Path:
        if self.model_dir is not None:
            return Path(self.model_dir).expanduser()
        raw = (os.environ if env is None else env).get(WHISPER_DIR_ENV)
        if raw:
            return Path(raw).expanduser()
        return model_path(WHISPER_TINY_EN[0]).parent


@dataclass(frozen=True, slots=True)
class _Result:
    text: str
    confidence: float | None


class _Model:
    """The loaded model; only ever called on a pool thread."""

    def __init__(self, config: WhisperConfig, directory: Path) -> None:
        if not (directory / "model.bin").is_file():
            raise ProviderError(
                "local-whisper",
                ProviderErrorKind.MODEL,
                f"no Whisper model in {directory}; run `brisvox models fetch` or set {WHISPER_DIR_ENV}",
            )
        from faster_whisper import WhisperModel  # type: ignore[import-untyped]

        self._config = config
        self._model: Any = WhisperModel(
            str(directory), device="cpu", compute_type=config.compute_type, cpu_threads=config.threads, num_workers=1
        )

    def transcribe(self, pcm: bytes) -> _Result:
        audio = pcm16_to_float(pcm)
        segments, _info = self._model.transcribe(
            audio,
            language=self._config.language,
            beam_size=self._config.beam_size,
            temperature=0.0,  # no sampling fallback: deterministic, and no second decode
            vad_filter=False,
            condition_on_previous_text=False,
            without_timestamps=True,
            initial_prompt=self._config.prompt,
        )
        texts: list[str] = []
        logprobs: list[float] = []
        for seg in segments:
            texts.append(seg.text.strip())
            logprobs.append(float(seg.avg_logprob))
        text = " ".join(t for t in texts if t)
        confidence = math.exp(sum(logprobs) / len(logprobs)) if logprobs else None
        return _Result(text, confidence)


class WhisperStt(SttProvider):
    """The provider.  Load the model ahead of the first call with :meth:`warm`; ``aclose`` frees it."""

    def __init__(self, config: WhisperConfig = WhisperConfig(), *, pool: InferencePool | None = None) -> None:
        self.config = config
        self._own_pool = pool is None
        self._pool = pool if pool is not None else InferencePool(PoolConfig(name="brisvox-whisper", threads=1, jobs_per_thread=8))
        self._model: _Model | None = None
        self._loading = asyncio.Lock()

    @property
    def name(self) -> str:
        return "local-whisper"

    async def _loaded(self) -> _Model:
        async with self._loading:
            return await self._load()

    async def _load(self) -> _Model:
        if self._model is None:
            directory = self.config.resolve_dir()
            try:
                model = await self._pool.run(_Model, self.config, directory)
            except InferenceError as exc:
                cause = exc.__cause__ if isinstance(exc.__cause__, ProviderError) else None
                if cause is not None:
                    raise cause from None
                raise ProviderError(self.name, ProviderErrorKind.MODEL, f"cannot load Whisper from {directory}: {exc}") from exc
            self._model = model
        return self._model

    async def warm(self) -> None:
        """Load the model and run it once on silence (the first run is the slow one)."""
        model = await self._loaded()
        await self._pool.run(model.transcribe, bytes(SAMPLE_RATE))

    async def connect(self, config: SttConfig) -> WhisperSttSession:
        if config.sample_rate != SAMPLE_RATE:
            raise ConfigError(f"local-whisper: sample_rate must be {SAMPLE_RATE}, got {config.sample_rate}")
        if config.language != self.config.language:
            raise ConfigError(f"local-whisper: this model speaks {self.config.language!r}, not {config.language!r}")
        model = await self._loaded()
        return WhisperSttSession(model, self._pool, self.config)

    async def aclose(self) -> None:
        self._model = None
        if self._own_pool:
            await self._pool.aclose()


class WhisperSttSession(SessionBase[SttEvent]):
    def __init__(self, model: _Model, pool: InferencePool, config: WhisperConfig) -> None:
        super().__init__(name="local-whisper session")
        self._model = model
        self._pool = pool
        self._config = config
        self._buffer = bytearray()
        self._buffer_start = 0.0  # session seconds of the buffer's first sample
        self._received = 0  # bytes of audio ever sent
        self.dropped_seconds = 0.0  # audio cut off segments longer than the window
        self._jobs: Channel[tuple[bytes, float]] = Channel(_JOBS, name="local-whisper segments")
        self._scope = TaskScope("local-whisper session")
        self._scope.spawn(self._run(), name="transcribe")

    async def send_audio(self, pcm: bytes) -> None:
        self._check_open()
        if len(pcm) % 2:
            raise ConfigError(f"local-whisper: PCM16 audio must hold whole samples, got {len(pcm)} bytes")
        if not self._buffer:
            self._buffer_start = self._received / (2 * SAMPLE_RATE)
        self._buffer += pcm
        self._received += len(pcm)
        cap = 2 * round(self._config.max_segment_seconds * SAMPLE_RATE)
        if len(self._buffer) > cap:
            cut = len(self._buffer) - cap
            del self._buffer[:cut]
            self._buffer_start += cut / (2 * SAMPLE_RATE)
            self.dropped_seconds += cut / (2 * SAMPLE_RATE)

    async def finalize(self) -> None:
        self._check_open()
        segment, start = bytes(self._buffer), self._buffer_start
        self._buffer.clear()
        await self._jobs.send((segment, start))

    async def _shutdown(self) -> None:
        self._jobs.abort()
        await self._scope.aclose()

    async def _run(self) -> None:
        try:
            async for segment, start in self._jobs:
                await self._emit(await self._transcribe(segment, start))
        except ChannelClosed:
            return

    async def _transcribe(self, segment: bytes, start: float) -> SttEvent:
        seconds = len(segment) / (2 * SAMPLE_RATE)
        if seconds < self._config.min_segment_seconds:
            return Transcript(text="", is_final=True, from_finalize=True, start=start, end=start + seconds)
        try:
            result = await self._pool.run(self._model.transcribe, segment)
        except PoolFull:
            log.warning("local-whisper: a segment of %.1f s was refused: the inference pool is full", seconds)
            err = ProviderError("local-whisper", ProviderErrorKind.BUSY, "the inference pool is full")
            return SttError(error=err, fatal=False)
        except InferenceError as exc:
            log.warning("local-whisper: transcription failed: %s", exc)
            err = ProviderError("local-whisper", ProviderErrorKind.MODEL, f"transcription failed: {type(exc).__name__}")
            return SttError(error=err, fatal=False)
        return Transcript(
            text=result.text,
            is_final=True,
            from_finalize=True,
            start=start,
            end=start + seconds,
            confidence=result.confidence,
            language=self._config.language,
        )
