"""OpenAI-compatible chat completions, streaming (OpenAI, OpenRouter, Ollama, vLLM).

Request (``POST {base_url}/chat/completions``, ``Authorization: Bearer``): ``messages``
with ``system``/``user``/``assistant`` roles, an assistant's calls as ``tool_calls``
(``{"id", "type": "function", "function": {"name", "arguments": "<JSON text>"}}``) and
**one ``tool`` message per result** (``tool_call_id``), in call order; ``tools`` as
``{"type": "function", "function": {"name", "description", "parameters"}}``;
``stream: true`` with ``stream_options.include_usage``; ``reasoning_effort`` when set
(Ollama's preset sends ``"none"``: its thinking models otherwise spend the token budget
thinking before they say a word).

Stream: ``data: {chunk}`` lines, ``data: [DONE]`` at the end.  A chunk's
``choices[0].delta`` holds ``content`` (spoken text) and ``tool_calls`` fragments keyed by
``index`` (``id`` and ``function.name`` on the first fragment, ``function.arguments``
split anywhere); ``finish_reason`` closes the choice; a last chunk with empty ``choices``
carries ``usage``.  Reasoning text (``reasoning``/``reasoning_content``) is not spoken
and not kept; OpenRouter's ``reasoning_details`` (which carry the signatures some models
need back with their tool calls) are merged by ``index`` and become the response's provider
data ``{"openai_compat": {"reasoning_details": [...]}}``, echoed on the assistant message.  An ``error`` object inside the stream (OpenRouter) ends it with an error.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

import httpx

from brisvox.agent import AssistantMessage, SystemMessage, UserMessage
from brisvox.core.clock import Clock
from brisvox.core.errors import ConfigError
from brisvox.core.secret import Secret
from brisvox.providers.cloud._http import HttpStreamer
from brisvox.providers.cloud._llm import (
    Results,
    SseLlm,
    conversation,
    json_event,
    stream_error,
    vendor_data,
    wire_id,
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

__all__ = ["PRESETS", "OpenAiCompatLlm", "OpenAiCompatOptions", "OpenAiStreamDecoder", "build_openai_body"]


@dataclass(frozen=True, slots=True, kw_only=True)
class _Preset:
    base_url: str
    key_env: str | None
    key_required: bool
    max_tokens_field: str
    reasoning_effort: str | None = None


PRESETS: dict[str, _Preset] = {
    "openai": _Preset(
        base_url="https://api.openai.com/v1", key_env="OPENAI_API_KEY", key_required=True,
        max_tokens_field="max_completion_tokens",
    ),
    "openrouter": _Preset(
        base_url="https://openrouter.ai/api/v1", key_env="OPENROUTER_API_KEY", key_required=True,
        max_tokens_field="max_tokens",
    ),
    "ollama": _Preset(
        base_url="http://127.0.0.1:11434/v1", key_env=None, key_required=False,
        max_tokens_field="max_tokens", reasoning_effort="none",
    ),
    "vllm": _Preset(
        base_url="http://127.0.0.1:8000/v1", key_env="VLLM_API_KEY", key_required=False,
        max_tokens_field="max_tokens",
    ),
}


@dataclass(frozen=True, slots=True, kw_only=True)
class OpenAiCompatOptions:
    """Where and how to call an OpenAI-compatible endpoint.  Build with :meth:`preset`."""

    model: str
    base_url: str
    api_key: Secret | None = field(default=None, repr=False)
    reasoning_effort: str | None = None  # "none", "minimal", "low", "medium", "high"
    max_tokens_field: str = "max_tokens"
    parallel_tool_calls: bool | None = None  # None: the server's default
    extra_headers: tuple[tuple[str, str], ...] = ()
    policy: ResiliencePolicy = DEFAULT_POLICY
    preset_name: str = "custom"

    @classmethod
    def preset(cls, name: str, *, model: str, api_key: Secret | None = None, **overrides: Any) -> OpenAiCompatOptions:
        """Options for ``openai``, ``openrouter``, ``ollama`` or ``vllm``; the key comes from its env var."""
        if name not in PRESETS:
            raise ConfigError(f"unknown OpenAI-compatible preset {name!r}; known: {sorted(PRESETS)}")
        p = PRESETS[name]
        if api_key is None and p.key_env is not None:
            if p.key_required:
                api_key = Secret.from_env(p.key_env)
            else:
                import os

                value = os.environ.get(p.key_env, "")
                api_key = Secret(value) if value else None
        options = cls(
            model=model, base_url=p.base_url, api_key=api_key, reasoning_effort=p.reasoning_effort,
            max_tokens_field=p.max_tokens_field, preset_name=name,
        )
        return replace(options, **overrides) if overrides else options


def build_openai_body(request: LlmRequest, options: OpenAiCompatOptions) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for turn in conversation(request.messages):
        if isinstance(turn, SystemMessage):
            messages.append({"role": "system", "content": turn.text})
        elif isinstance(turn, UserMessage):
            messages.append({"role": "user", "content": turn.text})
        elif isinstance(turn, AssistantMessage):
            msg: dict[str, Any] = {"role": "assistant", "content": turn.text or None}
            mine = vendor_data(turn.provider_data, "openai_compat")
            if mine is not None and isinstance(mine.get("reasoning_details"), list):
                msg["reasoning_details"] = mine["reasoning_details"]
            if turn.tool_calls:
                msg["tool_calls"] = [
                    {
                        "id": wire_id(call),
                        "type": "function",
                        "function": {
                            "name": call.name,
                            "arguments": json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":")),
                        },
                    }
                    for call in turn.tool_calls
                ]
            messages.append(msg)
        elif isinstance(turn, Results):
            for call, result in turn.pairs:
                messages.append({"role": "tool", "tool_call_id": wire_id(call), "content": result.content})
    body: dict[str, Any] = {
        "model": options.model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)},
            }
            for t in request.tools
        ]
        choice = request.tool_choice
        if choice.mode is ToolChoiceMode.TOOL:
            body["tool_choice"] = {"type": "function", "function": {"name": choice.name}}
        else:
            body["tool_choice"] = choice.mode.value
        if options.parallel_tool_calls is not None:
            body["parallel_tool_calls"] = options.parallel_tool_calls
    if request.max_tokens is not None:
        body[options.max_tokens_field] = request.max_tokens
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if options.reasoning_effort is not None:
        body["reasoning_effort"] = options.reasoning_effort
    return body


_FINISH = {
    "stop": FinishReason.STOP,
    "tool_calls": FinishReason.TOOL_CALLS,
    "function_call": FinishReason.TOOL_CALLS,
    "length": FinishReason.LENGTH,
    "content_filter": FinishReason.CONTENT_FILTER,
}


class OpenAiStreamDecoder:
    """Chat-completion chunks to deltas (pure; one instance per response)."""

    __slots__ = ("_details", "_finish", "_provider", "_saw_call", "_usage", "done")

    def __init__(self, provider: str = "openai") -> None:
        self._provider = provider
        self._finish: FinishReason | None = None
        self._usage: Usage | None = None
        self._saw_call = False
        self._details: list[dict[str, Any]] = []  # OpenRouter's reasoning_details, merged by index
        self.done: Done | None = None

    def _reasoning(self, items: Any) -> None:
        for item in items if isinstance(items, list) else ():
            if not isinstance(item, dict):
                continue
            last = self._details[-1] if self._details else None
            same = (
                last is not None
                and "index" in item
                and last.get("index") == item.get("index")
                and last.get("type") == item.get("type")
            )
            if not same:
                self._details.append(dict(item))
                continue
            assert last is not None
            for key, value in item.items():
                if key in ("text", "summary") and isinstance(value, str):
                    last[key] = str(last.get(key) or "") + value
                elif value is not None:
                    last[key] = value

    def feed(self, event: SseEvent) -> list[LlmEvent]:
        data = event.data
        if data.strip() == "[DONE]":
            self.done = self._done()
            return self._trailing()
        chunk = json_event(self._provider, data)
        if "error" in chunk:
            return [LlmError(error=stream_error(self._provider, chunk))]
        out: list[LlmEvent] = []
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            details = usage.get("prompt_tokens_details") or {}
            self._usage = Usage(
                input_tokens=int(usage.get("prompt_tokens") or 0),
                output_tokens=int(usage.get("completion_tokens") or 0),
                cached_input_tokens=int(details.get("cached_tokens") or 0) if isinstance(details, dict) else 0,
            )
        for choice in chunk.get("choices") or ():
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue
            delta = choice.get("delta") or {}
            content = delta.get("content")
            if isinstance(content, str) and content:
                out.append(TextDelta(text=content))
            if "reasoning_details" in delta:
                self._reasoning(delta["reasoning_details"])
            for frag in delta.get("tool_calls") or ():
                fn = frag.get("function") or {}
                index = frag.get("index")
                if not isinstance(index, int):
                    raise ProviderError(self._provider, ProviderErrorKind.PROTOCOL, "a tool call fragment has no index")
                self._saw_call = True
                out.append(
                    ToolCallDelta(
                        index=index,
                        id=frag.get("id") or None,
                        name=fn.get("name") or None,
                        arguments_fragment=fn.get("arguments") or "",
                    )
                )
            reason = choice.get("finish_reason")
            if isinstance(reason, str):
                self._finish = _FINISH.get(reason, FinishReason.OTHER)
        return out

    def _done(self) -> Done:
        finish = self._finish
        if finish is None:
            finish = FinishReason.TOOL_CALLS if self._saw_call else FinishReason.STOP
        return Done(finish_reason=finish, usage=self._usage)

    def _trailing(self) -> list[LlmEvent]:
        if not self._details:
            return []
        return [ProviderDataDelta(data={"openai_compat": {"reasoning_details": self._details}})]

    def end_of_body(self) -> list[LlmEvent]:
        # Some servers end the body without [DONE]; a finish_reason proves the answer is whole.
        if self._finish is None:
            raise ProviderError(self._provider, ProviderErrorKind.CLOSED, "the stream ended before the response finished")
        return [*self._trailing(), self._done()]


class OpenAiCompatLlm(SseLlm):
    """Streaming chat completions against any OpenAI-compatible server."""

    def __init__(self, options: OpenAiCompatOptions, clock: Clock, client: httpx.AsyncClient | None = None) -> None:
        self.provider_name = f"openai-compatible:{options.preset_name}"
        super().__init__(clock, options.policy, HttpStreamer(self.provider_name, clock, options.policy, client))
        self._options = options
        self._url = options.base_url.rstrip("/") + "/chat/completions"

    def __repr__(self) -> str:
        o = self._options
        return f"OpenAiCompatLlm(preset={o.preset_name!r}, model={o.model!r}, base_url={o.base_url!r})"

    def _auth(self) -> dict[str, str]:
        headers = {}
        if self._options.api_key is not None:
            headers["authorization"] = f"Bearer {self._options.api_key.reveal()}"
        headers.update(self._options.extra_headers)
        return headers

    def _endpoint(self, request: LlmRequest) -> tuple[str, dict[str, str], Any]:
        headers = {"accept": "text/event-stream", "content-type": "application/json", **self._auth()}
        return self._url, headers, build_openai_body(request, self._options)

    def _warm_endpoint(self) -> tuple[str, dict[str, str]] | None:
        return self._options.base_url.rstrip("/") + "/models", self._auth()

    def _decoder(self, request: LlmRequest) -> OpenAiStreamDecoder:
        return OpenAiStreamDecoder(self.provider_name)
