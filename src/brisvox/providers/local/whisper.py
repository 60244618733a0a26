"""Embedded speech-to-text: Whisper tiny.en through faster-whisper (CTranslate2), on CPU.

Whisper is not a streaming model, so the session works per utterance: it buffers the
audio it is sent and, on ``finalize()`` (which the engine calls when the VAD says the
caller stopped), answers with one final (``is_final`` and ``from_finalize``; an empty one
when the segment was too short): the transcript of the buffered segment up to
``WhisperConfig.trailing_quiet`` after its last sound (an energy gate; a segment with no
sound is transcribed whole).

The encoder, nearly all of a decode's cost, sees ``WhisperConfig.window_seconds`` (10 s) of
features, not Whisper's 30 s: a shorter segment is padded to the window, a longer one encoded
whole (0.49-0.58 -> 0.14 CPU-s a sentence, docs/MODELS.md).

Decoding while the caller speaks: every decode costs the whole window whatever the audio's
length, so decoding only the tail at the end would save little.  Instead the
session decodes the utterance *early*: as soon as ``trailing_quiet`` of quiet follows a
sound, before the VAD's stop arrives, and keeps the result; when ``finalize()`` finds the
same audio (no sound came after it), that result is the final, with no decode left to wait
for.  With ``partial_every`` set it also decodes every that many seconds of new sound while
the caller speaks and sends the text as interims (``SttConfig.interim_results``).  One
decode at a time per session; an early decode is dropped when the utterance it would cover
was finalized or grew meanwhile (the newest audio is taken when the worker is free), and a
finalized segment always goes before it.  Transcription runs on an
:class:`~brisvox.inference.InferencePool` (by default one of its own with one thread;
CTranslate2 itself uses ``threads`` cores), never on the event loop, so ``send_audio`` never
waits for the model.

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
import threading
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from brisvox.audio import pcm16_to_float
from brisvox.core.channel import Channel
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.tasks import TaskScope
from brisvox.inference import InferenceError, InferencePool, PoolConfig, PoolFull, model_path
from brisvox.inference.energy import EnergyScorer
from brisvox.inference.models import WHISPER_TINY_EN
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.session import SessionBase
from brisvox.providers.stt import SttConfig, SttError, SttEvent, SttProvider, Transcript

__all__ = ["WHISPER_DIR_ENV", "WhisperConfig", "WhisperStt", "WhisperSttSession"]

log = logging.getLogger(__name__)

WHISPER_DIR_ENV = "BRISVOX_WHISPER_DIR"
SAMPLE_RATE = 16_000
_JOBS = 4  # finalized segments waiting for the model, per session
# A sound, for the trailing-quiet gate: above the floor of a noise-suppressed microphone
# (about -60 dBFS), below soft speech.
SOUND_DBFS = -50.0
_HOP = 160  # samples per feature frame
_LEAD = 0.3  # seconds of quiet kept before a segment's first sound with a short encoder window
_FULL_WINDOW = 3000  # frames: Whisper's 30 s
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
    # The quiet kept after the segment's last sound, and the quiet after which the session
    # decodes the utterance early (before the VAD's stop; below Silero's 0.1 s hangover so
    # the early decode usually covers exactly what finalize() transcribes).  None: no gate,
    # no early decode (the whole buffer is transcribed at finalize, as before 2026-12-04).
    trailing_quiet: float | None = 0.08
    # The encoder's window: a segment shorter than this is padded to it, not to Whisper's 30 s
    # (a longer one is encoded whole).  The encoder is nearly all of a decode's cost and scales
    # with the window: tiny.en took 0.49-0.58 CPU-s a sentence at 30 s, 0.14 at 10 s, with fewer
    # word errors on the demo's sentences (bench/whisper_models.py --windows; below about 8 s the
    # decoder falls into repetition loops).  30.0 is Whisper's own.
    window_seconds: float = 10.0
    # Seconds of new sound between interim decodes while the caller speaks (None: none).
    # Each costs a whole decode: on a loaded machine one in flight when the caller stops
    # delays the final (docs/DEMO.md measures it), hence off by default.
    partial_every: float | None = None

    def __post_init__(self) -> None:
        if self.threads < 1:
            raise ConfigError(f"WhisperConfig.threads must be at least 1, got {self.threads}")
        if self.beam_size < 1:
            raise ConfigError(f"WhisperConfig.beam_size must be at least 1, got {self.beam_size}")
        if self.prompt is not None and not 0 < len(self.prompt) <= MAX_PROMPT_CHARS:
            raise ConfigError(f"WhisperConfig.prompt must hold 1 to {MAX_PROMPT_CHARS} characters, got {len(self.prompt)}")
        if self.trailing_quiet is not None and not 0.0 < self.trailing_quiet <= 1.0:
            raise ConfigError(f"WhisperConfig.trailing_quiet must be in (0, 1] s or None, got {self.trailing_quiet}")
        if self.partial_every is not None and not 0.2 <= self.partial_every <= 10.0:
            raise ConfigError(f"WhisperConfig.partial_every must be in [0.2, 10] s or None, got {self.partial_every}")
        if self.partial_every is not None and self.trailing_quiet is None:
            raise ConfigError("WhisperConfig.partial_every needs trailing_quiet (the gate that finds the sound)")
        if not 1.0 <= self.window_seconds <= 30.0:
            raise ConfigError(f"WhisperConfig.window_seconds must be in [1, 30], got {self.window_seconds}")
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
        # faster-whisper pads every segment's features to 30 s before the encoder; the wrapper
        # cuts them to the window (WhisperConfig.window_seconds), per call, on the decoding thread.
        self._frames = threading.local()
        self._window = 2 * math.ceil(config.window_seconds * SAMPLE_RATE / _HOP / 2)  # even: the encoder halves it
        self.encoded_frames = 0  # the last encoder input, in feature frames (100 a second)
        self.full_retries = 0  # decodes the window sent into a loop, done again in 30 s
        full_encode = self._model.encode

        def encode(features: Any) -> Any:
            cut = getattr(self._frames, "cut", _FULL_WINDOW)
            self.encoded_frames = min(cut, features.shape[-1])
            return full_encode(features[..., :cut])

        self._model.encode = encode

    def transcribe(self, pcm: bytes) -> _Result:
        audio = pcm16_to_float(pcm)
        if self._window < _FULL_WINDOW:
            # A segment is all the audio since the last stop: seconds of the caller's quiet
            # while the bot spoke, then the words.  In a short window that quiet crowds the words
            # and the decoder loops ("Yes. Yes. Yes. ..."), so the window starts just before them.
            audio = audio[_first_sound(audio) :]
        result = self._decode(audio, self._window)
        if self._window < _FULL_WINDOW and _loops(result.text):
            self.full_retries += 1  # the window misled the decoder: Whisper's own 30 s
            log.info("local-whisper: the decode of %.1f s looped in the short window; decoded again in 30 s",
                     len(audio) / SAMPLE_RATE)
            result = self._decode(audio, _FULL_WINDOW)
        return result

    def _decode(self, audio: np.ndarray, window: int) -> _Result:
        frames = len(audio) // _HOP
        if frames < window < _FULL_WINDOW:
            # Padded as audio, so the window's tail is the log-mel of quiet, as Whisper was
            # trained (faster-whisper pads the features with zeros, a level of its own).
            audio = np.pad(audio, (0, window * _HOP - len(audio)))
            frames = window
        self._frames.cut = min(_FULL_WINDOW, max(window, frames + frames % 2))
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


def _first_sound(audio: np.ndarray) -> int:
    """The sample ``_LEAD`` seconds before the first 20 ms window louder than ``SOUND_DBFS``
    (0 when there is none: a segment with no sound is decoded whole)."""
    win = SAMPLE_RATE // 50
    n = len(audio) // win
    if n == 0:
        return 0
    power = np.mean(np.square(audio[: n * win].reshape(n, win), dtype=np.float64), axis=1)
    loud = np.flatnonzero(power > 10.0 ** (SOUND_DBFS / 10.0))
    if len(loud) == 0:
        return 0
    return max(0, int(loud[0]) * win - round(_LEAD * SAMPLE_RATE))


def _loops(text: str) -> bool:
    """Whisper's own test for a decoder stuck repeating itself: the text compresses more than
    2.4 times (faster-whisper's ``compression_ratio_threshold``)."""
    raw = text.encode()
    return len(raw) > 24 and len(raw) / len(zlib.compress(raw)) > 2.4


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
        return WhisperSttSession(model, self._pool, self.config, interims=config.interim_results)

    async def aclose(self) -> None:
        self._model = None
        if self._own_pool:
            await self._pool.aclose()


@dataclass(frozen=True, slots=True)
class _Segment:
    """A finalized segment, in the order of the finalize calls."""

    audio: bytes
    start: float
    utterance: int


@dataclass(frozen=True, slots=True)
class _Early:
    """Decode the open utterance now (the worker takes its newest audio)."""

    utterance: int


@dataclass(frozen=True, slots=True)
class _Decoded:
    """The last early decode: the exact audio it covered and its result."""

    utterance: int
    audio: bytes
    result: _Result


class WhisperSttSession(SessionBase[SttEvent]):
    def __init__(self, model: _Model, pool: InferencePool, config: WhisperConfig, *, interims: bool = True) -> None:
        super().__init__(name="local-whisper session")
        self._model = model
        self._pool = pool
        self._config = config
        self._interims = interims and config.partial_every is not None
        self._buffer = bytearray()
        self._buffer_start = 0.0  # session seconds of the buffer's first sample
        self._received = 0  # bytes of audio ever sent
        self.dropped_seconds = 0.0  # audio cut off segments longer than the window
        self._gate = EnergyScorer(SAMPLE_RATE, threshold_dbfs=SOUND_DBFS) if config.trailing_quiet is not None else None
        self._quiet = 2 * round((config.trailing_quiet or 0.0) * SAMPLE_RATE)  # bytes
        self._every = 2 * round((config.partial_every or 0.0) * SAMPLE_RATE)  # bytes; 0: no interims
        self._sound_end = 0  # buffer bytes up to the end of the last sound; 0: no sound yet
        self._utterance = 0  # finalize() calls so far: the open utterance's number
        self._asked = 0  # buffer bytes the last early decode was asked at (0: none of this utterance)
        self._early_queued = False  # one early decode at a time per session
        self._decoded: _Decoded | None = None
        # Counters (tests, the bench): finals taken from an early decode, and early decodes run.
        self.finals = 0
        self.early_finals = 0
        self.early_decodes = 0
        # One job per finalized segment, plus room for the one early decode.
        self._jobs: Channel[_Segment | _Early] = Channel(_JOBS + 1, name="local-whisper segments")
        self._scope = TaskScope("local-whisper session")
        self._scope.spawn(self._run(), name="transcribe")

    async def send_audio(self, pcm: bytes) -> None:
        self._check_open()
        if len(pcm) % 2:
            raise ConfigError(f"local-whisper: PCM16 audio must hold whole samples, got {len(pcm)} bytes")
        if not self._buffer:
            self._buffer_start = self._received / (2 * SAMPLE_RATE)
        offset = len(self._buffer)
        self._buffer += pcm
        self._received += len(pcm)
        cap = 2 * round(self._config.max_segment_seconds * SAMPLE_RATE)
        if len(self._buffer) > cap:
            cut = len(self._buffer) - cap
            del self._buffer[:cut]
            self._buffer_start += cut / (2 * SAMPLE_RATE)
            self.dropped_seconds += cut / (2 * SAMPLE_RATE)
            offset -= cut
            self._sound_end = max(0, self._sound_end - cut)
            self._asked = 0  # the prefix changed: an earlier decode covers other audio
        if self._gate is not None:
            self._note_sound(pcm, offset)
            self._maybe_decode_early()

    def _note_sound(self, pcm: bytes, offset: int) -> None:
        gate = self._gate
        assert gate is not None
        samples = np.frombuffer(pcm, dtype=np.int16)
        win = gate.window_samples
        for end in range(len(samples), 0, -win):  # the last sound of the chunk, scanning back
            if gate.score(samples[max(0, end - win) : end]) > 0.0:
                self._sound_end = max(0, offset + 2 * end)
                return

    def _span(self) -> int:
        """Bytes of the buffer a final would transcribe now: up to ``trailing_quiet`` after the
        last sound; the whole buffer when there was no sound or no gate."""
        if self._gate is None or self._sound_end == 0:
            return len(self._buffer)
        return min(len(self._buffer), self._sound_end + self._quiet)

    def _maybe_decode_early(self) -> None:
        if self._early_queued or self._sound_end == 0:
            return
        span = self._span()
        settled = len(self._buffer) >= self._sound_end + self._quiet and span != self._asked
        speaking = self._every > 0 and self._sound_end - self._asked >= self._every
        if (settled or speaking) and self._jobs.try_send(_Early(self._utterance)):
            self._early_queued = True
            self._asked = span

    async def finalize(self) -> None:
        self._check_open()
        segment, start = bytes(self._buffer[: self._span()]), self._buffer_start
        self._buffer.clear()
        self._sound_end = self._asked = 0
        utterance, self._utterance = self._utterance, self._utterance + 1
        await self._jobs.send(_Segment(segment, start, utterance))

    async def _shutdown(self) -> None:
        self._jobs.abort()
        await self._scope.aclose()
        log.info("local-whisper session: %d finals, %d of them from an early decode (%d early decodes)",
                 self.finals, self.early_finals, self.early_decodes)

    async def _run(self) -> None:
        try:
            async for job in self._jobs:
                if isinstance(job, _Early):
                    await self._decode_early(job)
                else:
                    await self._emit(await self._final(job))
        except ChannelClosed:
            return

    async def _decode_early(self, job: _Early) -> None:
        self._early_queued = False
        if job.utterance != self._utterance:
            return  # finalized meanwhile: its segment is decoded on its own
        audio = bytes(self._buffer[: self._span()])  # the newest audio, not the audio at the request
        self._asked = len(audio)
        if len(audio) < 2 * round(self._config.min_segment_seconds * SAMPLE_RATE):
            return
        try:
            result = await self._pool.run(self._model.transcribe, audio)
        except (PoolFull, InferenceError) as exc:
            # Not the caller's final: finalize() decodes the segment again and reports a failure there.
            log.info("local-whisper: an early decode was not run: %s", type(exc).__name__)
            return
        self.early_decodes += 1
        self._decoded = _Decoded(job.utterance, audio, result)
        if self._interims and result.text and job.utterance == self._utterance:
            start = self._buffer_start
            await self._emit(Transcript(text=result.text, is_final=False, start=start,
                                        end=start + len(audio) / (2 * SAMPLE_RATE), language=self._config.language))

    async def _final(self, job: _Segment) -> SttEvent:
        self.finals += 1
        decoded, self._decoded = self._decoded, None
        if decoded is not None and decoded.utterance == job.utterance and decoded.audio == job.audio:
            self.early_finals += 1  # decoded while the VAD was still waiting for its stop
            return self._transcript(decoded.result, job)
        if decoded is not None and decoded.utterance > job.utterance:
            self._decoded = decoded  # a later utterance's: keep it for its own final
        return await self._transcribe(job)

    def _transcript(self, result: _Result, job: _Segment) -> Transcript:
        return Transcript(
            text=result.text,
            is_final=True,
            from_finalize=True,
            start=job.start,
            end=job.start + len(job.audio) / (2 * SAMPLE_RATE),
            confidence=result.confidence,
            language=self._config.language,
        )

    async def _transcribe(self, job: _Segment) -> SttEvent:
        segment, start = job.audio, job.start
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
        return self._transcript(result, job)
