"""A TTS provider that delivers the call's sample rate whatever rate its voice speaks.

:class:`ResamplingTts` wraps a provider that synthesizes at one ``native_rate`` (hibari and
OpenAI speech at 24 kHz, ElevenLabs at all but 48 kHz): a call at another rate gets the
audio converted (one resampler per context), so no audio is dropped for its rate.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from types import TracebackType
from typing import Self

from brisvox.audio.resample import ResampleStream
from brisvox.providers.tts import TtsAudio, TtsConfig, TtsEvent, TtsFlushed, TtsProvider, TtsSession

__all__ = ["ResamplingTts"]


class _ResamplingSession:
    """A TTS session whose audio is converted to ``rate`` (one resampler per context)."""

    def __init__(self, inner: TtsSession, rate: int) -> None:
        self._inner = inner
        self._rate = rate
        self._streams: dict[int, ResampleStream] = {}

    async def send_text(self, context_id: int, text: str) -> None:
        await self._inner.send_text(context_id, text)

    async def flush(self, context_id: int) -> None:
        await self._inner.flush(context_id)

    def cancel(self, context_id: int) -> None:
        self._streams.pop(context_id, None)
        self._inner.cancel(context_id)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> TtsEvent:
        while True:
            event = await self._inner.__anext__()
            if isinstance(event, TtsAudio) and event.sample_rate != self._rate:
                stream = self._streams.get(event.context_id)
                if stream is None or stream.in_rate != event.sample_rate:
                    stream = self._streams[event.context_id] = ResampleStream(event.sample_rate, self._rate)
                pcm = stream.process(event.pcm)
                if not pcm:
                    continue
                return TtsAudio(context_id=event.context_id, pcm=pcm, sample_rate=self._rate)
            if isinstance(event, TtsFlushed):
                self._streams.pop(event.context_id, None)  # the filter's few ms of tail are dropped
            return event

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()


class ResamplingTts:
    """A TTS provider that synthesizes at ``native_rate`` and delivers the call's rate.

    A call whose rate is ``native_rate`` or one of ``direct`` (rates the inner provider
    speaks itself) gets the inner session unchanged."""

    def __init__(self, inner: TtsProvider, native_rate: int, *, direct: Collection[int] = ()) -> None:
        self._inner = inner
        self._native = native_rate
        self._direct = frozenset(direct)

    @property
    def name(self) -> str:
        return self._inner.name

    async def warm(self) -> None:
        await self._inner.warm()

    async def connect(self, config: TtsConfig) -> TtsSession:
        if config.sample_rate in self._direct:
            return await self._inner.connect(config)
        session = await self._inner.connect(dataclasses.replace(config, sample_rate=self._native))
        return session if config.sample_rate == self._native else _ResamplingSession(session, config.sample_rate)
