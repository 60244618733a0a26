"""Gemini streaming generateContent (``POST {base_url}/v1beta/models/{model}:streamGenerateContent?alt=sse``).

Request: ``x-goog-api-key`` header; leading system messages become
``systemInstruction``; ``contents`` alternate ``user`` and ``model``; an assistant message
becomes a ``model`` content with a text part and one ``functionCall`` part per call
(``{"name", "args", "id"?}``); the results of one assistant message become **the
``functionResponse`` parts of one ``user`` content** (``{"name", "response", "id"?}``), in
call order: a JSON-object result is the response itself, any other value is wrapped as
``{"output": value}``, an error result as ``{"error": value}``.  Tools are declared with
``parametersJsonSchema`` (the full JSON Schema; ``parameters`` takes only an OpenAPI
subset and refuses keywords such as ``additionalProperties``).

Thought signatures: a part may carry ``thoughtSignature`` (the first ``functionCall`` of
a response always does when thinking is on).  The signature of a call is kept as the
call's provider data ``{"gemini": {"thought_signature": ...}}``; a signature on a text
part becomes the response's provider data ``{"gemini": {"text_signature": ...}}``.  Both
are echoed on the same parts of the next request, as the API requires.

Stream: ``data: {GenerateContentResponse}`` events; text parts are spoken unless marked
``thought: true``; a ``functionCall`` arrives whole (one delta per call); the stream has no
end marker: it ends with the body, after a chunk that has ``finishReason``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import httpx

from brisvox.agent import AssistantMessage, SystemMessage, UserMessage
from brisvox.core.clock import Clock
from brisvox.core.secret import Secret
from brisvox.providers.cloud._http import HttpStreamer
from brisvox.providers.cloud._llm import (
    Results,
    SseLlm,
    conversation,
    json_event,
    parse_json_object,
    stream_error,
    vendor_data,
)
from brisvox.providers.cloud._sse import SseEvent
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.llm import (
    Done,
    FinishReason,
    LlmError,
    LlmEvent,
    LlmRequest,
    ProviderDataDelta,
    TextDelta,
    ToolCallDelta,
    ToolChoiceMode,
    Usage,
)
from brisvox.providers.resilient import DEFAULT_POLICY, ResiliencePolicy

__all__ = ["GeminiLlm", "GeminiOptions", "GeminiStreamDecoder", "build_gemini_body"]


@dataclass(frozen=True, slots=True, kw_only=True)
class GeminiOptions:
    model: str
    api_key: Secret = field(repr=False)
    base_url: str = "https://generativelanguage.googleapis.com"
    api_version: str = "v1beta"
    thinking_budget: int | None = None  # tokens; 0 turns thinking off on models that allow it; None: default
    placeholder: str = "(continue)"
    policy: ResiliencePolicy = DEFAULT_POLICY

    @classmethod
    def from_env(cls, *, model: str, var: str = "GEMINI_API_KEY", **kwargs: Any) -> GeminiOptions:
        return cls(model=model, api_key=Secret.from_env(var), **kwargs)


def _response_payload(content: str, is_error: bool) -> dict[str, Any]:
    value = parse_json_object(content)
    if is_error:
        return {"error": value}
    if isinstance(value, dict):
        return value
    return {"output": value}


def build_gemini_body(request: LlmRequest, options: GeminiOptions) -> dict[str, Any]:
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    leading = True
    for turn in conversation(request.messages):
        if isinstance(turn, SystemMessage):
            if leading:
                system.append(turn.text)
            else:
                contents.append({"role": "user", "parts": [{"text": turn.text}]})
            continue
        leading = False
        if isinstance(turn, UserMessage):
            contents.append({"role": "user", "parts": [{"text": turn.text}]})
        elif isinstance(turn, AssistantMessage):
            parts: list[dict[str, Any]] = []
            if turn.text:
                part: dict[str, Any] = {"text": turn.text}
                mine = vendor_data(turn.provider_data, "gemini")
                if mine is not None and isinstance(mine.get("text_signature"), str):
                    part["thoughtSignature"] = mine["text_signature"]
                parts.append(part)
            for call in turn.tool_calls:
                fc: dict[str, Any] = {"name": call.name, "args": call.arguments}
                if call.provider_id:
                    fc["id"] = call.provider_id
                part = {"functionCall": fc}
                sig = vendor_data(call.provider_data, "gemini")
                if sig is not None and isinstance(sig.get("thought_signature"), str):
                    part["thoughtSignature"] = sig["thought_signature"]
                parts.append(part)
            contents.append({"role": "model", "parts": parts})
        elif isinstance(turn, Results):
            responses = []
            for call, result in turn.pairs:
                fr: dict[str, Any] = {"name": call.name, "response": _response_payload(result.content, result.is_error)}
                if call.provider_id:
                    fr["id"] = call.provider_id
                responses.append({"functionResponse": fr})
            contents.append({"role": "user", "parts": responses})
    if not contents or contents[0]["role"] != "user":
        contents.insert(0, {"role": "user", "parts": [{"text": options.placeholder}]})
    body: dict[str, Any] = {"contents": contents}
    if system:
        body["systemInstruction"] = {"parts": [{"text": "\n\n".join(system)}]}
    if request.tools:
        body["tools"] = [{
            "functionDeclarations": [
                {"name": t.name, "description": t.description, "parametersJsonSchema": dict(t.parameters)}
                for t in request.tools
            ]
        }]
        choice = request.tool_choice
        mode = {"auto": "AUTO", "none": "NONE", "required": "ANY", "tool": "ANY"}[choice.mode.value]
        config: dict[str, Any] = {"mode": mode}
        if choice.mode is ToolChoiceMode.TOOL:
            config["allowedFunctionNames"] = [choice.name]
        body["toolConfig"] = {"functionCallingConfig": config}
    generation: dict[str, Any] = {}
    if request.max_tokens is not None:
        generation["maxOutputTokens"] = request.max_tokens
    if request.temperature is not None:
        generation["temperature"] = request.temperature
    if options.thinking_budget is not None:
        generation["thinkingConfig"] = {"thinkingBudget": options.thinking_budget}
    if generation:
        body["generationConfig"] = generation
    return body


_FINISH = {
    "STOP": FinishReason.STOP,
    "MAX_TOKENS": FinishReason.LENGTH,
    "SAFETY": FinishReason.CONTENT_FILTER,
    "RECITATION": FinishReason.CONTENT_FILTER,
    "BLOCKLIST": FinishReason.CONTENT_FILTER,
    "PROHIBITED_CONTENT": FinishReason.CONTENT_FILTER,
    "SPII": FinishReason.CONTENT_FILTER,
}


class GeminiStreamDecoder:
    """GenerateContentResponse chunks to deltas (pure; one instance per response)."""

    __slots__ = ("_calls", "_finish", "_provider", "_text_signature", "_usage", "done")

    def __init__(self, provider: str = "gemini") -> None:
        self._provider = provider
        self._calls = 0
        self._finish: str | None = None
        self._usage: Usage | None = None
        self._text_signature: str | None = None
        self.done: Done | None = None

    def feed(self, event: SseEvent) -> list[LlmEvent]:
        chunk = json_event(self._provider, event.data)
        if "error" in chunk:
            return [LlmError(error=stream_error(self._provider, chunk))]
        out: list[LlmEvent] = []
        usage = chunk.get("usageMetadata")
        if isinstance(usage, dict):
            self._usage = Usage(
                input_tokens=int(usage.get("promptTokenCount") or 0),
                output_tokens=int(usage.get("candidatesTokenCount") or 0) + int(usage.get("thoughtsTokenCount") or 0),
                cached_input_tokens=int(usage.get("cachedContentTokenCount") or 0),
            )
        feedback = chunk.get("promptFeedback")
        if isinstance(feedback, dict) and feedback.get("blockReason"):
            self._finish = "SAFETY"
        candidates = chunk.get("candidates") or ()
        for cand in candidates[:1]:
            if not isinstance(cand, dict):
                continue
            for part in (cand.get("content") or {}).get("parts") or ():
                out += self._part(part)
            reason = cand.get("finishReason")
            if isinstance(reason, str):
                self._finish = reason
        return out

    def _part(self, part: Any) -> list[LlmEvent]:
        if not isinstance(part, dict):
            return []
        sig = part.get("thoughtSignature")
        fc = part.get("functionCall")
        if isinstance(fc, dict):
            args = fc.get("args")
            data = {"gemini": {"thought_signature": sig}} if isinstance(sig, str) else None
            index = self._calls
            self._calls += 1
            return [ToolCallDelta(
                index=index,
                id=fc.get("id") or None,
                name=fc.get("name") or None,
                arguments_fragment=json.dumps(args if args is not None else {}, ensure_ascii=False),
                provider_data=data,
            )]
        if isinstance(sig, str) and self._text_signature is None:
            self._text_signature = sig
        text = part.get("text")
        if isinstance(text, str) and text and not part.get("thought"):
            return [TextDelta(text=text)]
        return []

    def end_of_body(self) -> list[LlmEvent]:
        if self._finish is None:
            raise ProviderError(self._provider, ProviderErrorKind.CLOSED, "the stream ended before a finishReason")
        finish = _FINISH.get(self._finish, FinishReason.OTHER)
        if finish is FinishReason.STOP and self._calls:
            finish = FinishReason.TOOL_CALLS
        out: list[LlmEvent] = []
        if self._text_signature is not None:
            out.append(ProviderDataDelta(data={"gemini": {"text_signature": self._text_signature}}))
        out.append(Done(finish_reason=finish, usage=self._usage))
        return out


class GeminiLlm(SseLlm):
    """Streaming Gemini generateContent."""

    provider_name = "gemini"

    def __init__(self, options: GeminiOptions, clock: Clock, client: httpx.AsyncClient | None = None) -> None:
        super().__init__(clock, options.policy, HttpStreamer(self.provider_name, clock, options.policy, client))
        self._options = options
        base = options.base_url.rstrip("/")
        self._url = f"{base}/{options.api_version}/models/{quote(options.model)}:streamGenerateContent?alt=sse"

    def __repr__(self) -> str:
        return f"GeminiLlm(model={self._options.model!r}, base_url={self._options.base_url!r})"

    def _endpoint(self, request: LlmRequest) -> tuple[str, dict[str, str], Any]:
        headers = {
            "x-goog-api-key": self._options.api_key.reveal(),
            "content-type": "application/json",
            "accept": "text/event-stream",
        }
        return self._url, headers, build_gemini_body(request, self._options)

    def _warm_endpoint(self) -> tuple[str, dict[str, str]] | None:
        o = self._options
        return f"{o.base_url.rstrip('/')}/{o.api_version}/models", {"x-goog-api-key": o.api_key.reveal()}

    def _decoder(self, request: LlmRequest) -> GeminiStreamDecoder:
        return GeminiStreamDecoder(self.provider_name)
