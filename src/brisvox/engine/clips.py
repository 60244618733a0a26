"""Pre-rendered filler clips: a phrase's audio played without asking the TTS provider.

A :class:`FillerClip` is PCM16 mono at one rate with its word timings; a
:class:`FillerClipStore` maps clip keys to clips and is read-only once built.  The store is
also the filler policy's clip cache (:class:`~brisvox.agent.tools.FillerClips`), so a
phrase's key reaches the runner's choice only when the store holds it.  The speak stage
plays a cued clip (``LlmResponseStarted.clip``) as the round's utterance when the clip is
at the call's output rate; otherwise the phrase goes to the provider as text.

:func:`render_clips` makes a store once per process from a TTS provider, so every call's
fillers play without a provider round trip; :class:`ClipCache` does it once per output
rate, in the background of the first call at that rate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from brisvox.audio.pcm import duration_of
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import ConfigError
from brisvox.core.frames import WordTiming
from brisvox.core.tasks import TaskScope
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.tts import TtsAudio, TtsConfig, TtsError, TtsFlushed, TtsProvider, TtsWords

__all__ = ["ClipCache", "FillerClip", "FillerClipStore", "render_clips"]

_TIMING_SLACK = 0.05  # seconds a word may end past the audio (providers round their timings)

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, repr=False)
class FillerClip:
    pcm: bytes
    sample_rate: int
    words: tuple[WordTiming, ...]

    def __post_init__(self) -> None:
        if self.sample_rate <= 0:
            raise ConfigError(f"FillerClip.sample_rate must be positive, got {self.sample_rate}")
        if not self.pcm or len(self.pcm) % 2:
            raise ConfigError(f"FillerClip.pcm must hold whole PCM16 samples, got {len(self.pcm)} bytes")
        late = [w for w in self.words if w.end > self.duration + _TIMING_SLACK or w.start > w.end]
        if late:
            raise ConfigError(
                f"FillerClip: {len(late)} word timing(s) fall outside the clip's {self.duration:.3f} s"
            )

    @property
    def duration(self) -> float:
        return duration_of(self.pcm, self.sample_rate)

    @classmethod
    def with_spread_words(cls, text: str, pcm: bytes, sample_rate: int) -> FillerClip:
        """A clip rendered without timings: its words spread over the audio by their length."""
        duration = cls(pcm, sample_rate, ()).duration  # checks the audio first
        words = text.split()
        total = sum(len(w) for w in words) or 1
        timings, at = [], 0.0
        for w in words:
            end = at + duration * len(w) / total
            timings.append(WordTiming(w, at, end))
            at = end
        return cls(pcm, sample_rate, tuple(timings))

    def __repr__(self) -> str:
        return f"FillerClip({self.duration:.3f} s at {self.sample_rate} Hz, {len(self.words)} words)"


class FillerClipStore:
    """Clips by key, built once; also the filler policy's clip cache."""

    __slots__ = ("_clips",)

    def __init__(self, clips: Mapping[str, FillerClip]) -> None:
        self._clips = dict(clips)

    def has_clip(self, key: str) -> bool:
        return key in self._clips

    def get(self, key: str, sample_rate: int) -> FillerClip | None:
        """The clip of ``key`` at ``sample_rate``; None when there is none or it is at another rate."""
        clip = self._clips.get(key)
        return clip if clip is not None and clip.sample_rate == sample_rate else None

    def __len__(self) -> int:
        return len(self._clips)


async def render_clips(
    provider: TtsProvider, config: TtsConfig, phrases: Mapping[str, str], clock: Clock, timeout: float = 10.0
) -> FillerClipStore:
    """Speak each phrase (by clip key) once through ``provider`` at ``config.sample_rate``.

    Raises DeadlineExceeded when the whole rendering takes longer than ``timeout`` seconds,
    and ProviderError naming the key whose phrase the provider refused.
    """
    return FillerClipStore(await bounded(clock, timeout, _render(provider, config, phrases),
                                         f"rendering {len(phrases)} filler clip(s)"))


async def _render(provider: TtsProvider, config: TtsConfig, phrases: Mapping[str, str]) -> dict[str, FillerClip]:
    clips: dict[str, FillerClip] = {}
    async with await provider.connect(config) as session:
        events = aiter(session)
        for context_id, (key, text) in enumerate(phrases.items(), start=1):
            await session.send_text(context_id, text)
            await session.flush(context_id)
            pcm, words = bytearray(), list[WordTiming]()
            while True:
                try:
                    event = await anext(events)
                except StopAsyncIteration:
                    raise ProviderError(
                        provider.name, ProviderErrorKind.CLOSED, f"the session ended while rendering filler clip {key!r}"
                    ) from None
                if isinstance(event, TtsError) and event.context_id in (None, context_id):
                    err = event.error
                    raise ProviderError(err.provider, err.kind, f"rendering filler clip {key!r} failed") from err
                if event.context_id != context_id:
                    continue
                if isinstance(event, TtsAudio):
                    pcm += event.pcm
                elif isinstance(event, TtsWords):
                    words.extend(event.words)
                elif isinstance(event, TtsFlushed):
                    break
            if words:
                end = duration_of(pcm, config.sample_rate)
                words = [WordTiming(w.word, min(w.start, end), min(w.end, end)) for w in words]  # rounding
                clips[key] = FillerClip(bytes(pcm), config.sample_rate, tuple(words))
            else:
                clips[key] = FillerClip.with_spread_words(text, bytes(pcm), config.sample_rate)
    return clips


class ClipCache:
    """Filler clips rendered once per output rate, shared by every call of a process.

    ``start(rate, scope)`` renders the phrases at ``rate`` in a task of ``scope`` (a call's),
    unless they are rendered, rendering, or failed at that rate before (a failure is logged
    once and not retried: the phrases go to the provider as text).  ``store(rate)`` is the
    finished store or None, so the first call at a rate speaks its fillers as text.  A
    rendering cancelled with its call starts again with the next call.
    """

    def __init__(self, provider: TtsProvider, config: TtsConfig, phrases: Mapping[str, str], clock: Clock,
                 timeout: float = 10.0) -> None:
        self._provider, self._config, self._phrases = provider, config, dict(phrases)
        self._clock, self._timeout = clock, timeout
        self._stores: dict[int, FillerClipStore] = {}
        self._busy: set[int] = set()
        self._failed: set[int] = set()

    def store(self, sample_rate: int) -> FillerClipStore | None:
        return self._stores.get(sample_rate)

    def start(self, sample_rate: int, scope: TaskScope) -> asyncio.Task[None] | None:
        """The rendering task it started, or None when there is nothing to do."""
        if sample_rate in self._stores or sample_rate in self._busy or sample_rate in self._failed:
            return None
        self._busy.add(sample_rate)
        return scope.spawn(self._render(sample_rate), name=f"filler-clips-{sample_rate}")

    async def _render(self, rate: int) -> None:
        config = dataclasses.replace(self._config, sample_rate=rate)
        try:
            self._stores[rate] = await render_clips(self._provider, config, self._phrases, self._clock, self._timeout)
            log.info("filler clips rendered at %d Hz: %d phrase(s)", rate, len(self._phrases))
        except Exception as exc:  # a rendering never fails the call that started it
            self._failed.add(rate)
            log.warning("filler clips at %d Hz failed (fillers stay text): %s: %s", rate, type(exc).__name__, exc)
        finally:
            self._busy.discard(rate)
