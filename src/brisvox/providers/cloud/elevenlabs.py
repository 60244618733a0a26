"""ElevenLabs multi-context text-to-speech over WebSocket (``/v1/text-to-speech/{voice}/multi-stream-input``).

Wire format (ElevenLabs' multi-context WebSocket reference): the query names the model and
``output_format=pcm_<rate>``; the ``xi-api-key`` header authenticates.  A context opens
with its first text message ``{"text", "context_id", "voice_settings"?}``; more text follows
as ``{"text", "context_id"}`` (each piece ends with a space, as the API asks); our flush
sends ``{"context_id", "flush": true}`` and then ``{"context_id", "close_context": true}``,
after which the server finishes the context's audio and sends ``{"isFinal": true,
"contextId"}``; a barge-in sends ``close_context`` alone.  The socket ends with
``{"close_socket": true}``.

Audio messages carry ``audio`` (base64 PCM), ``contextId`` and an ``alignment`` (the
characters of the text we sent, with ``charStartTimesMs`` and ``charDurationsMs`` relative to
that audio chunk) and a ``normalizedAlignment`` (the same for the text as the model read it,
numbers spelled out).  Word timings come from ``alignment`` (falling back to the normalized
one): characters are grouped into words at whitespace, across chunk boundaries, and shifted
by the context's audio so far, so they count from the context's first sample.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlencode

from brisvox.core.clock import Clock
from brisvox.core.errors import ConfigError
from brisvox.core.frames import WordTiming
from brisvox.core.secret import Secret
from brisvox.providers.cloud._errors import vendor_text
from brisvox.providers.cloud._ws_tts import ContextState, WsTtsSession, decode_audio
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.resilient import DEFAULT_POLICY, ResiliencePolicy
from brisvox.providers.tts import TtsAudio, TtsConfig, TtsEvent, TtsProvider, TtsWords

__all__ = ["ElevenLabsOptions", "ElevenLabsSession", "ElevenLabsTts", "WordAligner"]

SAMPLE_RATES = (8_000, 16_000, 22_050, 24_000, 44_100)


@dataclass(frozen=True, slots=True, kw_only=True)
class ElevenLabsOptions:
    api_key: Secret = field(repr=False)
    base_url: str = "wss://api.elevenlabs.io"
    model: str = "eleven_flash_v2_5"
    voice: str = "21m00Tcm4TlvDq8ikWAM"  # a stock voice
    stability: float | None = None
    similarity_boost: float | None = None
    inactivity_timeout: int = 60  # seconds the server keeps an idle context
    policy: ResiliencePolicy = DEFAULT_POLICY

    @classmethod
    def from_env(cls, var: str = "ELEVENLABS_API_KEY", **kwargs: Any) -> ElevenLabsOptions:
        return cls(api_key=Secret.from_env(var), **kwargs)


class WordAligner:
    """Groups per-character alignment into word timings across audio chunks (pure)."""

    __slots__ = ("_end", "_start", "_word")

    def __init__(self) -> None:
        self._word = ""
        self._start = 0.0
        self._end = 0.0

    def feed(self, alignment: Any, offset: float) -> list[WordTiming]:
        """Words completed by one chunk's alignment; times shifted by ``offset`` seconds."""
        if not isinstance(alignment, dict):
            return []
        chars = alignment.get("chars") or []
        starts = alignment.get("charStartTimesMs") or []
        durations = alignment.get("charDurationsMs") or alignment.get("charsDurationsMs") or []
        if not (len(chars) == len(starts) == len(durations)):
            raise ProviderError("elevenlabs", ProviderErrorKind.PROTOCOL, "alignment arrays of unequal lengths")
        out: list[WordTiming] = []
        for ch, start_ms, dur_ms in zip(chars, starts, durations, strict=True):
            start = offset + float(start_ms) / 1000.0
            end = start + float(dur_ms) / 1000.0
            if not isinstance(ch, str) or ch.isspace():
                out += self._close()
                continue
            if not self._word:
                self._start = start
            self._word += ch
            self._end = end
        return out

    def _close(self) -> list[WordTiming]:
        if not self._word:
            return []
        word = WordTiming(word=self._word, start=self._start, end=self._end)
        self._word = ""
        return [word]

    def finish(self) -> list[WordTiming]:
        return self._close()


class ElevenLabsTts(TtsProvider):
    def __init__(self, options: ElevenLabsOptions, clock: Clock) -> None:
        self._options = options
        self._clock = clock

    @property
    def name(self) -> str:
        return "elevenlabs"

    def __repr__(self) -> str:
        return f"ElevenLabsTts(model={self._options.model!r}, base_url={self._options.base_url!r})"

    async def connect(self, config: TtsConfig) -> ElevenLabsSession:
        if config.sample_rate not in SAMPLE_RATES:
            raise ConfigError(f"elevenlabs: sample_rate {config.sample_rate} is not one of {SAMPLE_RATES}")
        o = self._options
        query = {
            "model_id": config.model or o.model,
            "output_format": f"pcm_{config.sample_rate}",
            "inactivity_timeout": str(o.inactivity_timeout),
            "sync_alignment": "true",
        }
        if config.language:
            query["language_code"] = config.language
        voice = quote(config.voice or o.voice, safe="")
        url = f"{o.base_url.rstrip('/')}/v1/text-to-speech/{voice}/multi-stream-input?{urlencode(query)}"
        session = ElevenLabsSession(url, {"xi-api-key": o.api_key.reveal()}, config, self._clock, o)
        await session._start()
        return session


class ElevenLabsSession(WsTtsSession):
    provider = "elevenlabs"

    def __init__(self, url: str, headers: dict[str, str], config: TtsConfig, clock: Clock, options: ElevenLabsOptions) -> None:
        super().__init__(url, headers, config, clock, options.policy)
        self._options = options
        self._rate = config.sample_rate

    def _text_messages(self, ctx: ContextState, text: str) -> list[dict[str, Any]]:
        if not text[-1:].isspace():
            text += " "
        message: dict[str, Any] = {"text": text, "context_id": ctx.wire_id}
        if not ctx.opened:
            ctx.scratch = WordAligner()
            settings: dict[str, Any] = {}
            if self._options.stability is not None:
                settings["stability"] = self._options.stability
            if self._options.similarity_boost is not None:
                settings["similarity_boost"] = self._options.similarity_boost
            if self._config.speed != 1.0:
                settings["speed"] = self._config.speed
            if settings:
                message["voice_settings"] = settings
        return [message]

    def _flush_messages(self, ctx: ContextState) -> list[dict[str, Any]]:
        return [{"context_id": ctx.wire_id, "flush": True}, {"context_id": ctx.wire_id, "close_context": True}]

    def _cancel_message(self, ctx: ContextState) -> dict[str, Any] | None:
        return {"context_id": ctx.wire_id, "close_context": True}

    def _close_socket_message(self) -> dict[str, Any] | None:
        return {"close_socket": True}

    def _parse(self, message: dict[str, Any]) -> tuple[ContextState | None, list[TtsEvent], bool]:
        if "error" in message and "contextId" not in message:
            text = vendor_text(message.get("message") or message.get("error"))
            raise ProviderError(self.provider, ProviderErrorKind.SERVER, text)
        ctx = self._lookup(message.get("contextId", message.get("context_id")))
        if ctx is None:
            return None, [], False
        aligner = ctx.scratch if isinstance(ctx.scratch, WordAligner) else WordAligner()
        ctx.scratch = aligner
        events: list[TtsEvent] = []
        audio = message.get("audio")
        words: list[WordTiming] = []
        if audio:
            pcm = decode_audio(self.provider, audio)
            if self._config.word_timestamps:
                alignment = message.get("alignment") or message.get("normalizedAlignment")
                words = aligner.feed(alignment, ctx.audio_seconds)
            if pcm:
                events.append(TtsAudio(context_id=ctx.id, pcm=pcm, sample_rate=self._rate))
        done = bool(message.get("isFinal"))
        if done and self._config.word_timestamps:
            words += aligner.finish()
        if words:
            events.insert(0, TtsWords(context_id=ctx.id, words=tuple(words)))
        return ctx, events, done
