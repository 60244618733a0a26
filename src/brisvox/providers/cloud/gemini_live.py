"""Gemini Live over WebSocket (``BidiGenerateContent``, v1beta).

URL: ``{base_url}/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent``
with the key in the ``key`` query parameter (never logged: connect errors do not carry the URL).

We send:

* ``setup`` first: ``model`` (``models/<name>``), ``generationConfig.responseModalities
  ["AUDIO"]`` and the voice, ``systemInstruction``, the tools as
  ``functionDeclarations`` with the full JSON Schema in ``parametersJsonSchema``
  (``parameters`` takes only an OpenAPI subset and refuses ``additionalProperties``) and,
  when asked, ``behavior: "NON_BLOCKING"`` (the model keeps listening while a call runs);
  input and output audio transcription; ``realtimeInputConfig.activityHandling``
  ``NO_INTERRUPTION`` when our barge-in decides;
* ``realtimeInput.audio`` (base64 PCM16, ``audio/pcm;rate=<input_rate>``);
* ``toolResponse.functionResponses``: one message with every result of a ``toolCall``, in
  call order (``id``, ``name``, ``response``: a JSON object result as is, any other value as
  ``{"output": value}``, an error as ``{"error": value}``; a non-blocking result's
  ``scheduling`` inside ``response``);
* ``clientContent`` with a user turn of text and ``turnComplete`` false (a note, and the
  caller's typed words or key: Gemini has no system turn, so both are user text), and an
  empty ``clientContent`` with ``turnComplete`` true to ask for a turn (Gemini has no
  ``response.create``; after a ``toolResponse`` the model goes on by itself, so a
  ``request_response`` right after results sends nothing).

We read ``setupComplete`` (ready), ``serverContent`` (``modelTurn`` audio parts,
``inputTranscription`` / ``outputTranscription``, ``interrupted``, ``turnComplete`` (the end
of the interaction), ``toolCall.functionCalls`` (``id``, ``name``, ``args``; every call of
one response, so the calls are followed by an ``S2sResponseDone``),
``toolCallCancellation.ids`` and ``goAway`` (the server will close soon: a non-fatal
``closed`` error).

Truncation: Gemini Live has no truncate.  On ``interrupted`` the server already stops the
generation; the closest we offer is a note (``clientContent``, ``turnComplete`` false)
telling the model which words the caller heard.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from brisvox.core.clock import Clock
from brisvox.core.errors import InvalidInput
from brisvox.core.secret import Secret
from brisvox.providers.cloud._errors import vendor_text
from brisvox.providers.cloud._llm import parse_json_object
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
    S2sToolCall,
    S2sToolCallsCancelled,
    S2sToolResult,
    S2sTranscript,
    Speaker,
)

__all__ = [
    "GeminiLive",
    "GeminiLiveOptions",
    "GeminiLiveSession",
    "LiveDecoder",
    "build_setup",
    "tool_response",
]

PROVIDER = "gemini-live"
PATH = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"


@dataclass(frozen=True, slots=True, kw_only=True)
class GeminiLiveOptions:
    api_key: Secret = field(repr=False)
    model: str = "gemini-2.5-flash-native-audio-preview-09-2025"
    base_url: str = "wss://generativelanguage.googleapis.com"
    voice: str | None = None
    policy: ResiliencePolicy = DEFAULT_POLICY

    @classmethod
    def from_env(cls, var: str = "GEMINI_API_KEY", **kwargs: Any) -> GeminiLiveOptions:
        return cls(api_key=Secret.from_env(var), **kwargs)


def live_url(options: GeminiLiveOptions) -> str:
    return f"{options.base_url.rstrip('/')}{PATH}?{urlencode({'key': options.api_key.reveal()})}"


def build_setup(config: S2sConfig, options: GeminiLiveOptions) -> dict[str, Any]:
    generation: dict[str, Any] = {"responseModalities": ["AUDIO"]}
    voice = config.voice or options.voice
    if voice:
        generation["speechConfig"] = {"voiceConfig": {"prebuiltVoiceConfig": {"voiceName": voice}}}
    setup: dict[str, Any] = {
        "model": options.model if options.model.startswith("models/") else f"models/{options.model}",
        "generationConfig": generation,
    }
    if config.instructions:
        setup["systemInstruction"] = {"parts": [{"text": config.instructions}]}
    if config.tools:
        declarations = []
        for tool in config.tools:
            decl: dict[str, Any] = {
                "name": tool.name,
                "description": tool.description,
                "parametersJsonSchema": tool.parameters,
            }
            if config.non_blocking_tools:
                decl["behavior"] = "NON_BLOCKING"
            declarations.append(decl)
        setup["tools"] = [{"functionDeclarations": declarations}]
    if config.transcribe:
        setup["inputAudioTranscription"] = {}
        setup["outputAudioTranscription"] = {}
    handling = "START_OF_ACTIVITY_INTERRUPTS" if config.barge_in is BargeIn.MODEL else "NO_INTERRUPTION"
    setup["realtimeInputConfig"] = {"activityHandling": handling}
    return {"setup": setup}


def audio_message(pcm: bytes, rate: int) -> dict[str, Any]:
    data = base64.b64encode(pcm).decode("ascii")
    return {"realtimeInput": {"audio": {"data": data, "mimeType": f"audio/pcm;rate={rate}"}}}


def _response(result: S2sToolResult) -> dict[str, Any]:
    value = parse_json_object(result.content)
    response: dict[str, Any]
    if result.is_error:
        response = {"error": value}
    elif isinstance(value, dict):
        response = dict(value)
    else:
        response = {"output": value}
    if result.scheduling is not None:
        response["scheduling"] = result.scheduling.value
    return response


def tool_response(results: Sequence[S2sToolResult]) -> dict[str, Any]:
    """The results of one ``toolCall`` as one ``toolResponse``, in the order given (the call order)."""
    return {
        "toolResponse": {
            "functionResponses": [{"id": r.call_id, "name": r.name, "response": _response(r)} for r in results]
        }
    }


def text_turn(text: str, *, turn_complete: bool) -> dict[str, Any]:
    return {"clientContent": {"turns": [{"role": "user", "parts": [{"text": text}]}], "turnComplete": turn_complete}}


def heard_note(heard_ms: int) -> str:
    return f"NOTE: the caller interrupted you; they heard only the first {heard_ms} ms of your last reply."


class LiveDecoder:
    """Gemini Live server messages to S2S events (pure; bad messages become non-fatal protocol errors)."""

    def __call__(self, raw: str | bytes) -> list[S2sEvent]:
        msg = load_object(PROVIDER, raw)
        if isinstance(msg, S2sError):
            return [msg]
        events: list[S2sEvent] = []
        if "setupComplete" in msg:
            events.append(S2sReady())
        if "serverContent" in msg:
            events.extend(self._content(msg["serverContent"]))
        if "toolCall" in msg:
            events.extend(self._calls(msg["toolCall"]))
        if "toolCallCancellation" in msg:
            ids = msg["toolCallCancellation"].get("ids") if isinstance(msg["toolCallCancellation"], dict) else None
            if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
                events.append(protocol_error(PROVIDER, "a toolCallCancellation without its ids"))
            else:
                events.append(S2sToolCallsCancelled(tuple(ids)))
        if "goAway" in msg:
            events.append(S2sError(ProviderError(PROVIDER, ProviderErrorKind.CLOSED, "the server will close the session soon (goAway)")))
        if "error" in msg:
            err = msg["error"]
            text = vendor_text(err.get("message", "error") if isinstance(err, dict) else err)
            events.append(S2sError(ProviderError(PROVIDER, ProviderErrorKind.SERVER, text)))
        return events

    def _content(self, content: Any) -> list[S2sEvent]:
        if not isinstance(content, dict):
            return [protocol_error(PROVIDER, "serverContent is not an object")]
        events: list[S2sEvent] = []
        turn = content.get("modelTurn")
        if turn is not None:
            parts = turn.get("parts") if isinstance(turn, dict) else None
            if not isinstance(parts, list):
                return [protocol_error(PROVIDER, "a modelTurn without its parts")]
            for part in parts:
                events.extend(self._part(part))
        for key, speaker in (("inputTranscription", Speaker.CALLER), ("outputTranscription", Speaker.MODEL)):
            if key in content:
                text = content[key].get("text") if isinstance(content[key], dict) else None
                if not isinstance(text, str):
                    events.append(protocol_error(PROVIDER, f"{key} without its text"))
                else:
                    events.append(S2sTranscript(speaker, text))
        interrupted = content.get("interrupted") is True
        if interrupted:
            events.append(S2sInterrupted())
        if content.get("turnComplete") is True:
            events.append(S2sInteractionEnded(interrupted=interrupted))
        return events

    def _part(self, part: Any) -> list[S2sEvent]:
        if not isinstance(part, dict):
            return [protocol_error(PROVIDER, "a part is not an object")]
        inline = part.get("inlineData")
        if inline is None:
            return []  # text and thought parts: the transcripts carry what was said
        pcm = decode_pcm(PROVIDER, inline.get("data") if isinstance(inline, dict) else None)
        if isinstance(pcm, S2sError):
            return [pcm]
        return [S2sAudio(pcm)]

    def _calls(self, tool_call: Any) -> list[S2sEvent]:
        calls = tool_call.get("functionCalls") if isinstance(tool_call, dict) else None
        if not isinstance(calls, list):
            return [protocol_error(PROVIDER, "a toolCall without its functionCalls")]
        events: list[S2sEvent] = []
        for call in calls:
            if not isinstance(call, dict) or not isinstance(call.get("id"), str) or not isinstance(call.get("name"), str):
                events.append(protocol_error(PROVIDER, "a function call without id or name"))
                continue
            args = call.get("args", {})
            if args is None:
                args = {}
            if not isinstance(args, dict):
                events.append(S2sToolCall(call["id"], call["name"], {}, arguments_error="the arguments are not a JSON object"))
                continue
            events.append(S2sToolCall(call["id"], call["name"], args))
        # One toolCall carries every call of the model's response: say that the response is complete,
        # so a stage answers them together (Gemini sends no response-done message of its own).
        events.append(S2sResponseDone())
        return events


class GeminiLive(S2sWsProvider):
    """The Gemini Live speech-to-speech provider."""

    provider = PROVIDER
    _options: GeminiLiveOptions

    def __init__(self, options: GeminiLiveOptions, clock: Clock) -> None:
        super().__init__(options, clock)

    async def connect(self, config: S2sConfig) -> GeminiLiveSession:
        session = GeminiLiveSession(config.input_rate, self._clock, self._options.policy)
        await session._open(live_url(self._options), {}, [build_setup(config, self._options)])
        return session


class GeminiLiveSession(S2sWsSession):
    """One Gemini Live conversation."""

    def __init__(self, input_rate: int, clock: Clock, policy: ResiliencePolicy) -> None:
        super().__init__(PROVIDER, LiveDecoder(), clock, policy)
        self._input_rate = input_rate
        self._answer_implied = False  # a toolResponse was sent and no request_response has followed

    async def send_audio(self, pcm: bytes) -> None:
        await self._send(audio_message(pcm, self._input_rate))
        self._answer_implied = False

    async def send_tool_results(self, results: Sequence[S2sToolResult]) -> None:
        if results:
            await self._send(tool_response(results))
            self._answer_implied = True

    async def request_response(self) -> None:
        """After results nothing is sent (a toolResponse makes the model go on by itself); otherwise an
        empty ``clientContent`` with ``turnComplete`` asks for a turn (after a guard's note)."""
        if self._answer_implied:
            self._answer_implied = False
            return
        await self._send({"clientContent": {"turnComplete": True}})

    async def cancel_response(self) -> None:
        """Nothing to send: Gemini Live has no cancel; with our barge-in we stop playing its audio (docs/S2S.md)."""

    async def add_note(self, text: str) -> None:
        await self._send(text_turn(text, turn_complete=False))
        self._answer_implied = False

    async def add_user_text(self, text: str) -> None:
        await self.add_note(text)  # the same user turn: the response is asked for by request_response

    async def truncate(self, item_id: str | None, heard_ms: int) -> None:
        if heard_ms < 0:
            raise InvalidInput(f"gemini-live: heard_ms must not be negative, got {heard_ms}")
        await self.add_note(heard_note(heard_ms))
