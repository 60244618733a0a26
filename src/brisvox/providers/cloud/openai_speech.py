"""OpenAI speech over HTTP streaming (``POST {base_url}/audio/speech``, ``response_format: "pcm"``).

Each text segment of a context is one request ``{"model", "input", "voice",
"response_format": "pcm", "speed", "instructions"?}``; the response body streams raw PCM16
little-endian mono at 24 kHz as it is synthesized (chunked transfer).  Segments play in
the order they were sent, one request at a time; a flush yields ``TtsFlushed`` after the
context's last audio.  There are no word timestamps (the engine estimates what was heard).

A cancel drops the context's queued segments and aborts its request in flight.  Each
request runs under the resilience policy: connect and first audio deadlines, idle between
chunks, retried only before any audio arrived and only for failures that prove the request
was not processed.  Works with OpenAI-compatible speech servers (``base_url``).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from typing import Any

import httpx

from brisvox.core.channel import Channel
from brisvox.core.clock import Clock
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.secret import Secret
from brisvox.core.tasks import TaskScope
from brisvox.providers.cloud._http import HttpStreamer, StreamState
from brisvox.providers.errors import ProviderError
from brisvox.providers.resilient import DEFAULT_POLICY, ResiliencePolicy, guarded, retry_before_effect
from brisvox.providers.tts import TtsAudio, TtsConfig, TtsError, TtsFlushed, TtsProvider, TtsSessionBase

__all__ = ["OpenAiSpeechOptions", "OpenAiSpeechSession", "OpenAiSpeechTts"]

SAMPLE_RATE = 24_000
_INPUT_CAPACITY = 32


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenAiSpeechOptions:
    api_key: Secret | None = field(default=None, repr=False)
    base_url: str = "https://api.openai.com/v1"
    model: str = "gpt-4o-mini-tts"
    voice: str = "alloy"
    instructions: str | None = None  # speaking style (gpt-4o-mini-tts)
    policy: ResiliencePolicy = DEFAULT_POLICY

    @classmethod
    def from_env(cls, var: str = "OPENAI_API_KEY", **kwargs: Any) -> OpenAiSpeechOptions:
        return cls(api_key=Secret.from_env(var), **kwargs)


@dataclass(frozen=True, slots=True)
class _Segment:
    context_id: int
    text: str | None  # None: the context's flush


class OpenAiSpeechTts(TtsProvider):
    def __init__(self, options: OpenAiSpeechOptions, clock: Clock, client: httpx.AsyncClient | None = None) -> None:
        self._options = options
        self._clock = clock
        self._http = HttpStreamer("openai-speech", clock, options.policy, client)

    @property
    def name(self) -> str:
        return "openai-speech"

    def __repr__(self) -> str:
        return f"OpenAiSpeechTts(model={self._options.model!r}, base_url={self._options.base_url!r})"

    async def connect(self, config: TtsConfig) -> OpenAiSpeechSession:
        if config.sample_rate != SAMPLE_RATE:
            raise ConfigError(f"openai-speech: sample_rate must be {SAMPLE_RATE} (its PCM output), got {config.sample_rate}")
        if not 0.25 <= config.speed <= 4.0:
            raise ConfigError(f"openai-speech: speed must be within 0.25..4.0, got {config.speed}")
        return OpenAiSpeechSession(self._options, config, self._clock, self._http)

    async def aclose(self) -> None:
        await self._http.aclose()


class OpenAiSpeechSession(TtsSessionBase):
    def __init__(self, options: OpenAiSpeechOptions, config: TtsConfig, clock: Clock, http: HttpStreamer) -> None:
        super().__init__(name="openai-speech tts")
        self._options = options
        self._config = config
        self._clock = clock
        self._http = http
        self._url = options.base_url.rstrip("/") + "/audio/speech"
        self._input: Channel[_Segment] = Channel(_INPUT_CAPACITY, name="openai-speech text")
        self._scope = TaskScope("openai-speech")
        self._current: tuple[int, asyncio.Task[None]] | None = None
        self._failed: set[int] = set()  # contexts whose speech failed: the rest of them is skipped
        self.requests = 0
        self._scope.spawn(guarded("openai-speech", self._run(), self._fatal), name="synthesize")

    async def _fatal(self, error: ProviderError) -> None:
        await self._emit(TtsError(error=error, fatal=True))
        self._finish()

    async def send_text(self, context_id: int, text: str) -> None:
        self._check_open()
        if not self.is_cancelled(context_id) and text.strip():
            await self._input.send(_Segment(context_id, text))

    async def flush(self, context_id: int) -> None:
        self._check_open()
        if not self.is_cancelled(context_id):
            await self._input.send(_Segment(context_id, None))

    def _on_cancel(self, context_id: int) -> None:
        self._input.purge(lambda seg: seg.context_id == context_id)
        current = self._current
        if current is not None and current[0] == context_id:
            current[1].cancel()

    async def _shutdown(self) -> None:
        self._input.abort()
        self._scope.cancel()
        with contextlib.suppress(Exception):
            await self._scope.aclose()

    async def _run(self) -> None:
        try:
            async for seg in self._input:
                if self.is_cancelled(seg.context_id) or seg.context_id in self._failed:
                    if seg.text is None:
                        self._failed.discard(seg.context_id)
                    continue
                if seg.text is None:
                    await self._emit(TtsFlushed(context_id=seg.context_id))
                    continue
                task = self._scope.spawn(self._speak(seg.context_id, seg.text), name=f"speak {seg.context_id}")
                self._current = (seg.context_id, task)
                try:
                    await task
                except asyncio.CancelledError:
                    if not task.cancelled():
                        raise
                    current = asyncio.current_task()
                    if current is not None and current.cancelling():
                        raise
                finally:
                    self._current = None
        except ChannelClosed:
            return

    def _body(self, text: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": self._config.model or self._options.model,
            "input": text,
            "voice": self._config.voice or self._options.voice,
            "response_format": "pcm",
        }
        if self._config.speed != 1.0:
            body["speed"] = self._config.speed
        if self._options.instructions:
            body["instructions"] = self._options.instructions
        return body

    async def _speak(self, context_id: int, text: str) -> None:
        headers = {"content-type": "application/json"}
        if self._options.api_key is not None:
            headers["authorization"] = f"Bearer {self._options.api_key.reveal()}"
        state = StreamState(started_at=self._clock.now())
        body = self._body(text)

        async def attempt() -> httpx.Response:
            self.requests += 1
            return await self._http.open(self._url, headers, body, state)

        carry = b""
        try:
            response = await retry_before_effect(self._clock, self._options.policy, attempt)
            chunks = self._http.chunks(response, state)
            try:
                async for chunk in chunks:
                    data = carry + chunk
                    cut = len(data) - (len(data) % 2)  # whole samples only
                    carry = data[cut:]
                    if cut:
                        state.got_first = True
                        await self._emit(TtsAudio(context_id=context_id, pcm=data[:cut], sample_rate=SAMPLE_RATE))
            finally:
                await chunks.aclose()
        except ProviderError as exc:
            self._failed.add(context_id)
            await self._emit(TtsError(error=exc, context_id=context_id, fatal=False))
