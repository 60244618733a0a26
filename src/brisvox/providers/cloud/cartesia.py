"""Cartesia text-to-speech over WebSocket (``/tts/websocket``), contexts and word timestamps.

Wire format (Cartesia's WebSocket API reference): one socket carries many contexts.  Each
piece of text is a generation request ``{"model_id", "transcript", "voice": {"mode": "id",
"id"}, "language", "context_id", "output_format": {"container": "raw", "encoding":
"pcm_s16le", "sample_rate"}, "add_timestamps": true, "continue": true}``; our flush sends an
empty transcript with ``"continue": false``; a barge-in sends ``{"context_id", "cancel":
true}``.  Cartesia answers per context with ``chunk`` (base64 PCM in ``data``),
``timestamps`` (``word_timestamps``: ``words``, ``start``, ``end`` in seconds from the
context's first sample), ``done`` (the context is finished), ``flush_done`` and ``error``.

Authentication: the ``X-API-Key`` header with the ``Cartesia-Version`` header.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from brisvox.core.clock import Clock
from brisvox.core.errors import ConfigError
from brisvox.core.frames import WordTiming
from brisvox.core.secret import Secret
from brisvox.providers.cloud._errors import vendor_text
from brisvox.providers.cloud._ws_tts import ContextState, WsTtsSession, decode_audio
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.resilient import DEFAULT_POLICY, ResiliencePolicy
from brisvox.providers.tts import TtsAudio, TtsConfig, TtsError, TtsEvent, TtsProvider, TtsWords

__all__ = ["CartesiaOptions", "CartesiaSession", "CartesiaTts"]

API_VERSION = "2025-04-16"
SAMPLE_RATES = (8_000, 16_000, 22_050, 24_000, 44_100, 48_000)


@dataclass(frozen=True, slots=True, kw_only=True)
class CartesiaOptions:
    api_key: Secret = field(repr=False)
    base_url: str = "wss://api.cartesia.ai"
    model: str = "sonic-2"
    voice: str = "694f9389-aac1-45b6-b726-9d9369183238"  # a stock English voice
    api_version: str = API_VERSION
    max_buffer_delay_ms: int | None = None  # Cartesia's own text buffering; None: its default
    policy: ResiliencePolicy = DEFAULT_POLICY

    @classmethod
    def from_env(cls, var: str = "CARTESIA_API_KEY", **kwargs: Any) -> CartesiaOptions:
        return cls(api_key=Secret.from_env(var), **kwargs)


class CartesiaTts(TtsProvider):
    def __init__(self, options: CartesiaOptions, clock: Clock) -> None:
        self._options = options
        self._clock = clock

    @property
    def name(self) -> str:
        return "cartesia"

    def __repr__(self) -> str:
        return f"CartesiaTts(model={self._options.model!r}, base_url={self._options.base_url!r})"

    async def connect(self, config: TtsConfig) -> CartesiaSession:
        if config.sample_rate not in SAMPLE_RATES:
            raise ConfigError(f"cartesia: sample_rate {config.sample_rate} is not one of {SAMPLE_RATES}")
        o = self._options
        url = f"{o.base_url.rstrip('/')}/tts/websocket?{urlencode({'cartesia_version': o.api_version})}"
        headers = {"X-API-Key": o.api_key.reveal(), "Cartesia-Version": o.api_version}
        session = CartesiaSession(url, headers, config, self._clock, o)
        await session._start()
        return session


class CartesiaSession(WsTtsSession):
    provider = "cartesia"

    def __init__(self, url: str, headers: dict[str, str], config: TtsConfig, clock: Clock, options: CartesiaOptions) -> None:
        super().__init__(url, headers, config, clock, options.policy)
        self._options = options
        self._rate = config.sample_rate

    def _request(self, ctx: ContextState, transcript: str, more: bool) -> dict[str, Any]:
        config = self._config
        message: dict[str, Any] = {
            "model_id": config.model or self._options.model,
            "transcript": transcript,
            "voice": {"mode": "id", "id": config.voice or self._options.voice},
            "language": config.language,
            "context_id": ctx.wire_id,
            "output_format": {"container": "raw", "encoding": "pcm_s16le", "sample_rate": self._rate},
            "add_timestamps": config.word_timestamps,
            "continue": more,
        }
        if config.speed != 1.0:
            message["generation_config"] = {"speed": config.speed}
        if self._options.max_buffer_delay_ms is not None:
            message["max_buffer_delay_ms"] = self._options.max_buffer_delay_ms
        return message

    def _text_messages(self, ctx: ContextState, text: str) -> list[dict[str, Any]]:
        return [self._request(ctx, text, True)]

    def _flush_messages(self, ctx: ContextState) -> list[dict[str, Any]]:
        return [self._request(ctx, "", False)]

    def _cancel_message(self, ctx: ContextState) -> dict[str, Any] | None:
        return {"context_id": ctx.wire_id, "cancel": True}

    def _parse(self, message: dict[str, Any]) -> tuple[ContextState | None, list[TtsEvent], bool]:
        ctx = self._lookup(message.get("context_id"))
        kind = message.get("type")
        if kind == "error":
            text = vendor_text(message.get("message") or message.get("error") or message.get("title") or "error")
            status = message.get("status_code")
            code = status if isinstance(status, int) else None
            kind_ = ProviderErrorKind.INVALID_REQUEST if code is not None and 400 <= code < 500 else ProviderErrorKind.SERVER
            error = ProviderError(self.provider, kind_, text, status=code)
            if ctx is None:
                raise error
            return ctx, [TtsError(error=error, context_id=ctx.id, fatal=False)], True
        if ctx is None:
            return None, [], False
        if kind == "chunk":
            pcm = decode_audio(self.provider, message.get("data"))
            return ctx, [TtsAudio(context_id=ctx.id, pcm=pcm, sample_rate=self._rate)] if pcm else [], bool(message.get("done"))
        if kind == "timestamps":
            stamps = message.get("word_timestamps") or {}
            words, starts, ends = stamps.get("words") or [], stamps.get("start") or [], stamps.get("end") or []
            if not (len(words) == len(starts) == len(ends)):
                raise ProviderError(self.provider, ProviderErrorKind.PROTOCOL, "word timestamps of unequal lengths")
            timings = tuple(WordTiming(word=str(w), start=float(s), end=float(e)) for w, s, e in zip(words, starts, ends, strict=True))
            return ctx, [TtsWords(context_id=ctx.id, words=timings)] if timings else [], False
        if kind == "done":
            return ctx, [], True
        return ctx, [], False
