"""Deepgram live speech-to-text over WebSocket (``/v1/listen``).

Wire format (Deepgram's streaming API reference):

* we send binary frames of raw PCM16 mono (``encoding=linear16``, ``sample_rate``,
  ``channels=1`` in the query) and text control messages ``{"type": "KeepAlive"}``,
  ``{"type": "Finalize"}`` and ``{"type": "CloseStream"}``;
* Deepgram sends ``Results`` messages (``is_final``, ``speech_final``, ``from_finalize``,
  ``start``/``duration`` in seconds of stream audio, ``channel.alternatives[0]`` with the
  transcript and its confidence) and also ``Metadata``, ``SpeechStarted`` and
  ``UtteranceEnd``, which carry nothing we map.

Authentication is the ``Authorization: Token <key>`` header.  A ``KeepAlive`` goes out when
no audio was sent for ``keepalive_interval`` seconds (Deepgram closes an idle stream after
10 s).  When the connection drops the session reconnects with backoff (bounded by the
policy): it reports a non-fatal ``SttError`` (the utterance in progress may be lost),
drops audio sent while it reconnects, and keeps transcript times continuous across
connections.  Empty interims are not reported; finals are, even empty (a ``from_finalize``
final with no words still tells the engine the utterance is complete).
"""

from __future__ import annotations

import contextlib
import json
import logging
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from websockets.asyncio.client import ClientConnection
from websockets.exceptions import ConnectionClosed

from brisvox.core.clock import Clock
from brisvox.core.errors import ConfigError
from brisvox.core.secret import Secret
from brisvox.core.tasks import TaskScope
from brisvox.providers.cloud._errors import vendor_text
from brisvox.providers.cloud._ws import close_error, close_ws, open_ws
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.resilient import DEFAULT_POLICY, ResiliencePolicy, guarded
from brisvox.providers.session import SessionBase
from brisvox.providers.stt import SttConfig, SttError, SttEvent, SttProvider, Transcript

__all__ = ["DeepgramOptions", "DeepgramSession", "DeepgramStt"]

log = logging.getLogger(__name__)

SAMPLE_RATES = (8_000, 16_000, 24_000, 44_100, 48_000)


@dataclass(frozen=True, slots=True, kw_only=True)
class DeepgramOptions:
    """How to reach Deepgram and what to ask of it."""

    api_key: Secret = field(repr=False)
    base_url: str = "wss://api.deepgram.com"
    model: str = "nova-3"
    endpointing_ms: int | None = 300  # silence that makes Deepgram set speech_final; None: off
    smart_format: bool = True
    keepalive_interval: float = 4.0
    policy: ResiliencePolicy = DEFAULT_POLICY

    @classmethod
    def from_env(cls, var: str = "DEEPGRAM_API_KEY", **kwargs: Any) -> DeepgramOptions:
        return cls(api_key=Secret.from_env(var), **kwargs)


def listen_url(options: DeepgramOptions, config: SttConfig) -> str:
    query: dict[str, str] = {
        "model": config.model or options.model,
        "encoding": "linear16",
        "sample_rate": str(config.sample_rate),
        "channels": "1",
        "language": config.language,
        "interim_results": "true" if config.interim_results else "false",
        "punctuate": "true",
        "smart_format": "true" if options.smart_format else "false",
        "endpointing": str(options.endpointing_ms) if options.endpointing_ms is not None else "false",
    }
    return f"{options.base_url.rstrip('/')}/v1/listen?{urlencode(query)}"


def parse_message(raw: str | bytes, offset: float) -> Transcript | ProviderError | None:
    """One Deepgram message as a transcript (times shifted by ``offset``), an error, or nothing."""
    try:
        msg = json.loads(raw)
    except ValueError:
        return ProviderError("deepgram", ProviderErrorKind.PROTOCOL, "a message is not JSON")
    if not isinstance(msg, dict):
        return ProviderError("deepgram", ProviderErrorKind.PROTOCOL, "a message is not a JSON object")
    kind = msg.get("type")
    if kind == "Error" or "err_code" in msg:
        text = vendor_text(msg.get("description") or msg.get("err_msg") or msg.get("message") or "error")
        return ProviderError("deepgram", ProviderErrorKind.SERVER, text)
    if kind != "Results":
        return None
    try:
        alt = msg["channel"]["alternatives"][0]
        text = str(alt.get("transcript", ""))
        start = float(msg.get("start", 0.0))
        duration = float(msg.get("duration", 0.0))
    except (KeyError, IndexError, TypeError, ValueError):
        return ProviderError("deepgram", ProviderErrorKind.PROTOCOL, "a Results message lacks its transcript")
    is_final = bool(msg.get("is_final", False))
    if not text and not is_final:
        return None
    confidence = alt.get("confidence")
    languages = alt.get("languages")
    return Transcript(
        text=text,
        is_final=is_final,
        speech_final=bool(msg.get("speech_final", False)),
        from_finalize=bool(msg.get("from_finalize", False)),
        start=offset + start,
        end=offset + start + duration,
        confidence=float(confidence) if isinstance(confidence, int | float) else None,
        language=languages[0] if isinstance(languages, list) and languages else None,
    )


class DeepgramStt(SttProvider):
    """The Deepgram live STT provider."""

    def __init__(self, options: DeepgramOptions, clock: Clock) -> None:
        self._options = options
        self._clock = clock

    @property
    def name(self) -> str:
        return "deepgram"

    def __repr__(self) -> str:
        return f"DeepgramStt(model={self._options.model!r}, base_url={self._options.base_url!r})"

    async def connect(self, config: SttConfig) -> DeepgramSession:
        if config.sample_rate not in SAMPLE_RATES:
            raise ConfigError(f"deepgram: sample_rate {config.sample_rate} is not one of {SAMPLE_RATES}")
        session = DeepgramSession(self._options, config, self._clock)
        await session._start()
        return session


class DeepgramSession(SessionBase[SttEvent]):
    """One live recognition stream (reconnects on a dropped connection)."""

    def __init__(self, options: DeepgramOptions, config: SttConfig, clock: Clock) -> None:
        super().__init__(name="deepgram stt")
        self._options = options
        self._config = config
        self._clock = clock
        self._url = listen_url(options, config)
        self._ws: ClientConnection | None = None
        self._scope = TaskScope("deepgram")
        self._bytes_per_second = 2 * config.sample_rate
        self._sent_bytes = 0  # audio sent on the current connection
        self._offset = 0.0  # seconds of audio sent on earlier connections
        self._last_send = 0.0
        self.reconnects = 0
        self.dropped_audio_bytes = 0

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Token {self._options.api_key.reveal()}"}

    async def _start(self) -> None:
        self._ws = await open_ws("deepgram", self._url, self._headers(), self._clock, self._options.policy)
        self._last_send = self._clock.now()
        self._scope.spawn(guarded("deepgram", self._run(), self._fatal), name="reader")
        self._scope.spawn(guarded("deepgram", self._keepalive(), self._fatal), name="keepalive")

    async def _fatal(self, error: ProviderError) -> None:
        await self._emit(SttError(error=error, fatal=True))
        self._finish()

    async def send_audio(self, pcm: bytes) -> None:
        self._check_open()
        ws = self._ws
        if ws is None:
            self.dropped_audio_bytes += len(pcm)
            return
        try:
            await ws.send(pcm)
        except ConnectionClosed:
            self.dropped_audio_bytes += len(pcm)
            return
        self._sent_bytes += len(pcm)
        self._last_send = self._clock.now()

    async def finalize(self) -> None:
        self._check_open()
        await self._send_control("Finalize")

    async def _send_control(self, kind: str) -> None:
        ws = self._ws
        if ws is None:
            return
        with contextlib.suppress(ConnectionClosed):
            await ws.send(json.dumps({"type": kind}))
            self._last_send = self._clock.now()

    async def _keepalive(self) -> None:
        interval = self._options.keepalive_interval
        while True:
            await self._clock.sleep_until(self._last_send + interval)
            if self._clock.now() >= self._last_send + interval:
                await self._send_control("KeepAlive")

    async def _run(self) -> None:
        policy = self._options.policy
        while True:
            ws = self._ws
            assert ws is not None
            try:
                async for raw in ws:
                    item = parse_message(raw, self._offset)
                    if item is None:
                        continue
                    if isinstance(item, ProviderError):
                        await self._emit(SttError(error=item, fatal=False))
                        continue
                    await self._emit(item)
                # A clean close from Deepgram ends the stream (after CloseStream, or its own end).
                self._finish()
                return
            except ConnectionClosed as exc:
                error = close_error("deepgram", exc)
            except (ValueError, TypeError, KeyError) as exc:
                # A message we could not map: end the session visibly instead of leaving the reader dead.
                error = ProviderError("deepgram", ProviderErrorKind.PROTOCOL, f"unreadable message ({type(exc).__name__})")
            self._ws = None
            await close_ws(ws, self._clock, policy)
            if not error.retryable:
                await self._emit(SttError(error=error, fatal=True))
                self._finish()
                return
            if not await self._reconnect(error, policy):
                return

    async def _reconnect(self, error: ProviderError, policy: ResiliencePolicy) -> bool:
        self._offset += self._sent_bytes / self._bytes_per_second
        self._sent_bytes = 0
        if self.reconnects >= policy.max_reconnects:
            await self._emit(SttError(error=error, fatal=True))
            self._finish()
            return False
        await self._emit(SttError(error=error, fatal=False))
        last: ProviderError = error
        for attempt in range(2, policy.max_attempts + 1):
            await self._clock.sleep(policy.backoff(attempt))
            try:
                self._ws = await open_ws("deepgram", self._url, self._headers(), self._clock, policy)
            except ProviderError as exc:
                last = exc
                if not exc.retryable:
                    break
                continue
            self.reconnects += 1
            log.info("deepgram: reconnected after %s (attempt %d)", error.kind.value, attempt)
            return True
        await self._emit(SttError(error=last, fatal=True))
        self._finish()
        return False

    async def _shutdown(self) -> None:
        ws = self._ws
        self._ws = None
        if ws is not None:
            with contextlib.suppress(Exception):
                await ws.send(json.dumps({"type": "CloseStream"}))
        self._scope.cancel()
        with contextlib.suppress(Exception):
            await self._scope.aclose()
        if ws is not None:
            await close_ws(ws, self._clock, self._options.policy)
