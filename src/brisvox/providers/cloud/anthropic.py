"""Anthropic Messages, streaming (``POST {base_url}/v1/messages``).

Request: ``x-api-key`` and ``anthropic-version`` headers; the leading system messages
become ``system``; an assistant message becomes ``text`` and ``tool_use`` blocks
(``{"id", "name", "input": {...}}``), preceded by the thinking blocks it carried (their
signatures echoed verbatim, as the API requires when extended thinking is on); the results
of one assistant message become **the ``tool_result`` blocks of one user message**
(``tool_use_id``, ``content``, ``is_error``), in call order.  A later system message (a late
tool-result note) is sent as user text.  The request never ends with an assistant message
(Anthropic would treat it as a prefill and continue it) and never starts with one: a
short user placeholder is added where needed.

Stream events: ``message_start`` (input usage), ``content_block_start`` (``text``,
``tool_use`` with id and name, ``thinking``, ``redacted_thinking``),
``content_block_delta`` (``text_delta``, ``input_json_delta`` fragments of a call's input,
``thinking_delta``, ``signature_delta``), ``content_block_stop``, ``message_delta``
(``stop_reason``, output usage), ``message_stop``; ``ping`` is ignored and ``error``
(``overloaded_error``, ...) ends the stream with a typed error.  Thinking blocks are not
spoken: they come back whole as the response's provider data
``{"anthropic": {"thinking": [blocks]}}`` at the end, to be echoed on the next request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

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

__all__ = ["AnthropicLlm", "AnthropicOptions", "AnthropicStreamDecoder", "build_anthropic_body"]

API_VERSION = "2023-06-01"


@dataclass(frozen=True, slots=True, kw_only=True)
class AnthropicOptions:
    model: str
    api_key: Secret = field(repr=False)
    base_url: str = "https://api.anthropic.com"
    max_tokens: int = 1024  # required by the API; a request's own max_tokens wins
    thinking_budget: int | None = None  # extended thinking budget in tokens; None: off
    placeholder: str = "(continue)"  # user text where the API needs a user turn the context lacks
    policy: ResiliencePolicy = DEFAULT_POLICY

    @classmethod
    def from_env(cls, *, model: str, var: str = "ANTHROPIC_API_KEY", **kwargs: Any) -> AnthropicOptions:
        return cls(model=model, api_key=Secret.from_env(var), **kwargs)


def _result_block(call_id: str, content: str, is_error: bool) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": call_id, "content": content}
    if is_error:
        block["is_error"] = True
    return block


def build_anthropic_body(request: LlmRequest, options: AnthropicOptions) -> dict[str, Any]:
    system: list[str] = []
    messages: list[dict[str, Any]] = []
    leading = True
    for turn in conversation(request.messages):
        if isinstance(turn, SystemMessage):
            if leading:
                system.append(turn.text)
            else:
                messages.append({"role": "user", "content": [{"type": "text", "text": turn.text}]})
            continue
        leading = False
        if isinstance(turn, UserMessage):
            messages.append({"role": "user", "content": [{"type": "text", "text": turn.text}]})
        elif isinstance(turn, AssistantMessage):
            blocks: list[dict[str, Any]] = []
            mine = vendor_data(turn.provider_data, "anthropic")
            if mine is not None:
                blocks += [dict(b) for b in mine.get("thinking", ()) if isinstance(b, dict)]
            if turn.text:
                blocks.append({"type": "text", "text": turn.text})
            blocks += [
                {"type": "tool_use", "id": wire_id(c), "name": c.name, "input": c.arguments} for c in turn.tool_calls
            ]
            messages.append({"role": "assistant", "content": blocks})
        elif isinstance(turn, Results):
            messages.append({
                "role": "user",
                "content": [_result_block(wire_id(c), r.content, r.is_error) for c, r in turn.pairs],
            })
    if not messages or messages[0]["role"] != "user":
        messages.insert(0, {"role": "user", "content": [{"type": "text", "text": options.placeholder}]})
    if messages[-1]["role"] == "assistant":
        messages.append({"role": "user", "content": [{"type": "text", "text": options.placeholder}]})
    body: dict[str, Any] = {
        "model": options.model,
        "max_tokens": request.max_tokens or options.max_tokens,
        "messages": messages,
        "stream": True,
    }
    if system:
        body["system"] = "\n\n".join(system)
    if request.tools:
        body["tools"] = [
            {"name": t.name, "description": t.description, "input_schema": dict(t.parameters)} for t in request.tools
        ]
        mode = request.tool_choice.mode
        if mode is ToolChoiceMode.TOOL:
            body["tool_choice"] = {"type": "tool", "name": request.tool_choice.name}
        else:
            body["tool_choice"] = {"type": {"auto": "auto", "none": "none", "required": "any"}[mode.value]}
    if request.temperature is not None and options.thinking_budget is None:
        body["temperature"] = request.temperature
    if options.thinking_budget is not None:
        body["thinking"] = {"type": "enabled", "budget_tokens": options.thinking_budget}
    return body


_FINISH = {
    "end_turn": FinishReason.STOP,
    "stop_sequence": FinishReason.STOP,
    "tool_use": FinishReason.TOOL_CALLS,
    "max_tokens": FinishReason.LENGTH,
    "refusal": FinishReason.CONTENT_FILTER,
}


class AnthropicStreamDecoder:
    """Messages stream events to deltas (pure; one instance per response)."""

    __slots__ = ("_blocks", "_cached", "_calls", "_input", "_output", "_provider", "_stop", "_thinking", "done")

    def __init__(self, provider: str = "anthropic") -> None:
        self._provider = provider
        self._blocks: dict[int, dict[str, Any]] = {}  # open thinking blocks by block index
        self._thinking: list[dict[str, Any]] = []
        self._calls: dict[int, int] = {}  # block index -> call index
        self._input = 0
        self._cached = 0
        self._output = 0
        self._stop: str | None = None
        self.done: Done | None = None

    def _protocol(self, what: str) -> ProviderError:
        return ProviderError(self._provider, ProviderErrorKind.PROTOCOL, what)

    def feed(self, event: SseEvent) -> list[LlmEvent]:
        data = json_event(self._provider, event.data)
        kind = data.get("type", event.event)
        if kind == "content_block_delta":
            return self._delta(data)
        if kind == "content_block_start":
            return self._start(data)
        if kind == "message_start":
            usage = (data.get("message") or {}).get("usage") or {}
            self._cached = int(usage.get("cache_read_input_tokens") or 0)
            self._input = int(usage.get("input_tokens") or 0) + self._cached
            self._output = int(usage.get("output_tokens") or 0)
        elif kind == "message_delta":
            stop = (data.get("delta") or {}).get("stop_reason")
            if isinstance(stop, str):
                self._stop = stop
            usage = data.get("usage") or {}
            if "output_tokens" in usage:
                self._output = int(usage["output_tokens"] or 0)
        elif kind == "content_block_stop":
            block = self._blocks.pop(data.get("index", -1), None)
            if block is not None:
                self._thinking.append(block)
        elif kind == "message_stop":
            return self._finish()
        elif kind == "error":
            return [LlmError(error=stream_error(self._provider, data))]
        return []

    def _start(self, data: dict[str, Any]) -> list[LlmEvent]:
        index = data.get("index")
        block = data.get("content_block") or {}
        btype = block.get("type")
        if not isinstance(index, int):
            raise self._protocol("a content block has no index")
        if btype == "tool_use":
            call = len(self._calls)
            self._calls[index] = call
            out: list[LlmEvent] = [ToolCallDelta(index=call, id=block.get("id") or None, name=block.get("name") or None)]
            initial = block.get("input")
            if isinstance(initial, dict) and initial:
                out.append(ToolCallDelta(index=call, arguments_fragment=json.dumps(initial)))
            return out
        if btype == "thinking":
            self._blocks[index] = {"type": "thinking", "thinking": block.get("thinking") or "",
                                   "signature": block.get("signature") or ""}
        elif btype == "redacted_thinking":
            self._blocks[index] = {"type": "redacted_thinking", "data": block.get("data") or ""}
        elif btype == "text" and block.get("text"):
            return [TextDelta(text=block["text"])]
        return []

    def _delta(self, data: dict[str, Any]) -> list[LlmEvent]:
        index = data.get("index")
        delta = data.get("delta") or {}
        dtype = delta.get("type")
        if dtype == "text_delta":
            text = delta.get("text") or ""
            return [TextDelta(text=text)] if text else []
        if dtype == "input_json_delta":
            call = self._calls.get(index) if isinstance(index, int) else None
            if call is None:
                raise self._protocol("an input_json_delta for a block that is not a tool_use")
            return [ToolCallDelta(index=call, arguments_fragment=delta.get("partial_json") or "")]
        block = self._blocks.get(index) if isinstance(index, int) else None
        if block is not None:
            if dtype == "thinking_delta":
                block["thinking"] += delta.get("thinking") or ""
            elif dtype == "signature_delta":
                block["signature"] += delta.get("signature") or ""
        return []

    def _finish(self) -> list[LlmEvent]:
        out: list[LlmEvent] = []
        thinking = self._thinking + list(self._blocks.values())
        if thinking:
            out.append(ProviderDataDelta(data={"anthropic": {"thinking": thinking}}))
        finish = _FINISH.get(self._stop or "", FinishReason.OTHER)
        if self._stop is None:
            finish = FinishReason.TOOL_CALLS if self._calls else FinishReason.STOP
        usage = Usage(input_tokens=self._input, output_tokens=self._output, cached_input_tokens=self._cached)
        self.done = Done(finish_reason=finish, usage=usage)
        return out

    def end_of_body(self) -> list[LlmEvent]:
        raise ProviderError(self._provider, ProviderErrorKind.CLOSED, "the stream ended before message_stop")


class AnthropicLlm(SseLlm):
    """Streaming Anthropic Messages."""

    provider_name = "anthropic"

    def __init__(self, options: AnthropicOptions, clock: Clock, client: httpx.AsyncClient | None = None) -> None:
        super().__init__(clock, options.policy, HttpStreamer(self.provider_name, clock, options.policy, client))
        self._options = options
        self._url = options.base_url.rstrip("/") + "/v1/messages"

    def __repr__(self) -> str:
        return f"AnthropicLlm(model={self._options.model!r}, base_url={self._options.base_url!r})"

    def _endpoint(self, request: LlmRequest) -> tuple[str, dict[str, str], Any]:
        headers = {
            "x-api-key": self._options.api_key.reveal(),
            "anthropic-version": API_VERSION,
            "content-type": "application/json",
            "accept": "text/event-stream",
        }
        return self._url, headers, build_anthropic_body(request, self._options)

    def _warm_endpoint(self) -> tuple[str, dict[str, str]] | None:
        headers = {"x-api-key": self._options.api_key.reveal(), "anthropic-version": API_VERSION}
        return self._options.base_url.rstrip("/") + "/v1/models", headers

    def _decoder(self, request: LlmRequest) -> AnthropicStreamDecoder:
        return AnthropicStreamDecoder(self.provider_name)
