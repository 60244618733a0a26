"""OpenAI Realtime over WebSocket (``wss://api.openai.com/v1/realtime?model=...``), GA event names.

We send (``Authorization: Bearer <key>``):

* ``session.update`` with ``session.type = "realtime"``, the instructions, PCM16 in and out
  (``audio/pcm`` at 24 kHz), server VAD (``interrupt_response`` false when our barge-in
  decides), input transcription, and the tools as ``{"type": "function", "name",
  "description", "parameters"}``;
* ``input_audio_buffer.append`` (base64 audio);
* one ``conversation.item.create`` of type ``function_call_output`` per result, in call
  order, then one ``response.create``;
* ``conversation.item.create`` of a system ``message`` for a note, of a user ``message``
  (``input_text``) for the caller's typed words or key, ``response.cancel``, and
  ``conversation.item.truncate`` (``item_id``, ``content_index`` 0, ``audio_end_ms``) at the
  heard position.

We read: ``session.updated`` (ready), ``response.output_audio.delta`` and
``response.output_audio_transcript.delta``/``.done`` (the beta names ``response.audio.*``
too), ``conversation.item.input_audio_transcription.delta``/``.completed``,
``input_audio_buffer.speech_started``/``speech_stopped``, ``response.output_item.done``
with a ``function_call`` item (whole: ``call_id``, ``name``, ``arguments``), ``response.done``
(``status`` ``cancelled`` means interrupted; a response without function calls ends the
interaction) and ``error``.  Everything else is ignored.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from brisvox.core.clock import Clock
from brisvox.core.errors import ConfigError, InvalidInput
from brisvox.core.secret import Secret
from brisvox.providers.cloud._errors import vendor_text
from brisvox.providers.cloud._s2s_ws import (
    S2sWsProvider,
    S2sWsSession,
    decode_pcm,
    load_object,
    protocol_error,
)
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.resilient import DEFAULT_POLICY, ResiliencePolicy
from brisvox.providers.s2s import (
    BargeIn,
    S2sAudio,
    S2sConfig,
    S2sError,
    S2sEvent,
    S2sInteractionEnded,
    S2sInterrupted,
    S2sReady,
    S2sResponseDone,
    S2sSpeechStarted,
    S2sSpeechStopped,
    S2sToolCall,
    S2sToolResult,
    S2sTranscript,
    Speaker,
)

__all__ = [
    "OpenAiRealtime",
    "OpenAiRealtimeOptions",
    "OpenAiRealtimeSession",
    "RealtimeDecoder",
    "build_session_update",
    "tool_output_events",
    "truncate_event",
]

PROVIDER = "openai-realtime"
RATE = 24_000  # audio/pcm is 24 kHz mono PCM16


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenAiRealtimeOptions:
    api_key: Secret = field(repr=False)
    model: str = "gpt-realtime"
    base_url: str = "wss://api.openai.com"
    voice: str = "marin"
    transcription_model: str = "gpt-4o-mini-transcribe"
    policy: ResiliencePolicy = DEFAULT_POLICY

    @classmethod
    def from_env(cls, var: str = "OPENAI_API_KEY", **kwargs: Any) -> OpenAiRealtimeOptions:
        return cls(api_key=Secret.from_env(var), **kwargs)


def realtime_url(options: OpenAiRealtimeOptions) -> str:
    return f"{options.base_url.rstrip('/')}/v1/realtime?{urlencode({'model': options.model})}"


def build_session_update(config: S2sConfig, options: OpenAiRealtimeOptions) -> dict[str, Any]:
    fmt = {"type": "audio/pcm", "rate": RATE}
    audio_in: dict[str, Any] = {
        "format": fmt,
        "turn_detection": {
            "type": "server_vad",
            "create_response": True,
            "interrupt_response": config.barge_in is BargeIn.MODEL,
        },
    }
    if config.transcribe:
        audio_in["transcription"] = {"model": options.transcription_model}
    tools = [
        {"type": "function", "name": t.name, "description": t.description, "parameters": t.parameters}
        for t in config.tools
    ]
    return {
        "type": "session.update",
        "session": {
            "type": "realtime",
            "instructions": config.instructions,
            "output_modalities": ["audio"],
            "audio": {"input": audio_in, "output": {"format": fmt, "voice": config.voice or options.voice}},
            "tools": tools,
            "tool_choice": "auto",
        },
    }


def audio_event(pcm: bytes) -> dict[str, Any]:
    return {"type": "input_audio_buffer.append", "audio": base64.b64encode(pcm).decode("ascii")}


def tool_output_events(results: Sequence[S2sToolResult]) -> list[dict[str, Any]]:
    """One ``function_call_output`` item per result, in the order given (the call order)."""
    return [
        {"type": "conversation.item.create", "item": {"type": "function_call_output", "call_id": r.call_id, "output": r.content}}
        for r in results
    ]


def note_event(text: str) -> dict[str, Any]:
    return message_event("system", text)


def message_event(role: str, text: str) -> dict[str, Any]:
    """A ``message`` item of ``role`` (``system``: a note; ``user``: the caller's typed words or key)."""
    return {
        "type": "conversation.item.create",
        "item": {"type": "message", "role": role, "content": [{"type": "input_text", "text": text}]},
    }


def truncate_event(item_id: str | None, heard_ms: int) -> dict[str, Any]:
    if not item_id:
        raise InvalidInput("openai-realtime: truncate needs the item id of the model's audio")
    if heard_ms < 0:
        raise InvalidInput(f"openai-realtime: heard_ms must not be negative, got {heard_ms}")
    return {"type": "conversation.item.truncate", "item_id": item_id, "content_index": 0, "audio_end_ms": heard_ms}


_AUDIO = ("response.output_audio.delta", "response.audio.delta")
_TEXT_DELTA = ("response.output_audio_transcript.delta", "response.audio_transcript.delta")
_TEXT_DONE = ("response.output_audio_transcript.done", "response.audio_transcript.done")


def _error_kind(err: dict[str, Any]) -> ProviderErrorKind:
    kind = str(err.get("type", ""))
    code = str(err.get("code", ""))
    if kind == "invalid_request_error":
        return ProviderErrorKind.INVALID_REQUEST
    if "rate_limit" in kind or "rate_limit" in code:
        return ProviderErrorKind.RATE_LIMITED
    if kind in ("authentication_error", "permission_error") or "api_key" in code:
        return ProviderErrorKind.AUTH
    return ProviderErrorKind.SERVER


def _str(msg: dict[str, Any], key: str) -> str | None:
    value = msg.get(key)
    return value if isinstance(value, str) else None


def _int(msg: dict[str, Any], key: str) -> int | None:
    value = msg.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class RealtimeDecoder:
    """OpenAI Realtime server events to S2S events (pure; bad events become non-fatal protocol errors)."""

    def __call__(self, raw: str | bytes) -> list[S2sEvent]:
        msg = load_object(PROVIDER, raw)
        if isinstance(msg, S2sError):
            return [msg]
        if not isinstance(msg.get("type"), str):
            return [protocol_error(PROVIDER, "an event without its type")]
        kind: str = msg["type"]
        if kind == "session.updated":
            return [S2sReady()]
        if kind in _AUDIO:
            return self._audio(msg)
        if kind in _TEXT_DELTA or kind in _TEXT_DONE:
            return self._text(msg, Speaker.MODEL, "delta" if kind in _TEXT_DELTA else "transcript", kind in _TEXT_DONE)
        if kind == "conversation.item.input_audio_transcription.delta":
            return self._text(msg, Speaker.CALLER, "delta", False)
        if kind == "conversation.item.input_audio_transcription.completed":
            return self._text(msg, Speaker.CALLER, "transcript", True)
        if kind == "input_audio_buffer.speech_started":
            return [S2sSpeechStarted(at_ms=_int(msg, "audio_start_ms"), item_id=_str(msg, "item_id"))]
        if kind == "input_audio_buffer.speech_stopped":
            return [S2sSpeechStopped(at_ms=_int(msg, "audio_end_ms"), item_id=_str(msg, "item_id"))]
        if kind == "response.output_item.done":
            return self._item(msg)
        if kind == "response.done":
            return self._done(msg)
        if kind == "error":
            err = msg.get("error")
            if not isinstance(err, dict):
                return [protocol_error(PROVIDER, "an error event without its error object")]
            text = vendor_text(err.get("message") or err.get("code") or "error")
            return [S2sError(ProviderError(PROVIDER, _error_kind(err), text), fatal=False)]
        return []

    def _audio(self, msg: dict[str, Any]) -> list[S2sEvent]:
        pcm = decode_pcm(PROVIDER, msg.get("delta"))
        if isinstance(pcm, S2sError):
            return [pcm]
        return [S2sAudio(pcm, item_id=_str(msg, "item_id"))]

    def _text(self, msg: dict[str, Any], speaker: Speaker, key: str, final: bool) -> list[S2sEvent]:
        text = _str(msg, key)
        if text is None:
            return [protocol_error(PROVIDER, f"a transcript event without its {key}")]
        return [S2sTranscript(speaker, text, final=final, item_id=_str(msg, "item_id"))]

    def _item(self, msg: dict[str, Any]) -> list[S2sEvent]:
        item = msg.get("item")
        if not isinstance(item, dict):
            return [protocol_error(PROVIDER, "an output item event without its item")]
        if item.get("type") != "function_call":
            return []
        call_id, name, raw = item.get("call_id"), item.get("name"), item.get("arguments", "")
        if not isinstance(call_id, str) or not call_id or not isinstance(name, str) or not isinstance(raw, str):
            return [protocol_error(PROVIDER, "a function call item without call_id, name or arguments")]
        return [_tool_call(call_id, name, raw)]

    def _done(self, msg: dict[str, Any]) -> list[S2sEvent]:
        response = msg.get("response")
        if not isinstance(response, dict):
            return [protocol_error(PROVIDER, "a response.done without its response")]
        interrupted = response.get("status") == "cancelled"
        output = response.get("output")
        calls = isinstance(output, list) and any(isinstance(o, dict) and o.get("type") == "function_call" for o in output)
        events: list[S2sEvent] = []
        if interrupted:
            events.append(S2sInterrupted())
        events.append(S2sResponseDone(interrupted=interrupted, response_id=_str(response, "id")))
        if not calls:  # a response that called tools continues after their results
            events.append(S2sInteractionEnded(interrupted=interrupted))
        return events


def _tool_call(call_id: str, name: str, raw: str) -> S2sToolCall:
    if not raw.strip():
        return S2sToolCall(call_id, name, {})
    try:
        args = json.loads(raw)
    except ValueError:
        return S2sToolCall(call_id, name, {}, arguments_error="the arguments are not valid JSON")
    if not isinstance(args, dict):
        return S2sToolCall(call_id, name, {}, arguments_error="the arguments are not a JSON object")
    return S2sToolCall(call_id, name, args)


class OpenAiRealtime(S2sWsProvider):
    """The OpenAI Realtime speech-to-speech provider."""

    provider = PROVIDER
    _options: OpenAiRealtimeOptions

    def __init__(self, options: OpenAiRealtimeOptions, clock: Clock) -> None:
        super().__init__(options, clock)

    async def connect(self, config: S2sConfig) -> OpenAiRealtimeSession:
        if config.input_rate != RATE or config.output_rate != RATE:
            raise ConfigError(f"openai-realtime: audio/pcm runs at {RATE} Hz in and out; resample before the session")
        session = OpenAiRealtimeSession(self._clock, self._options.policy)
        headers = {"Authorization": f"Bearer {self._options.api_key.reveal()}"}
        await session._open(realtime_url(self._options), headers, [build_session_update(config, self._options)])
        return session


class OpenAiRealtimeSession(S2sWsSession):
    """One OpenAI Realtime conversation."""

    def __init__(self, clock: Clock, policy: ResiliencePolicy) -> None:
        super().__init__(PROVIDER, RealtimeDecoder(), clock, policy)

    async def send_audio(self, pcm: bytes) -> None:
        await self._send(audio_event(pcm))

    async def send_tool_results(self, results: Sequence[S2sToolResult]) -> None:
        for event in tool_output_events(results):
            await self._send(event)

    async def request_response(self) -> None:
        await self._send({"type": "response.create"})

    async def cancel_response(self) -> None:
        await self._send({"type": "response.cancel"})

    async def add_note(self, text: str) -> None:
        await self._send(note_event(text))

    async def add_user_text(self, text: str) -> None:
        await self._send(message_event("user", text))

    async def truncate(self, item_id: str | None, heard_ms: int) -> None:
        await self._send(truncate_event(item_id, heard_ms))
