"""Scripted LLM responses rendered in each vendor's streaming wire format.

A script says what the "model" does (text pieces, tool-call fragments, pauses, a cut);
``render_openai``/``render_anthropic``/``render_gemini`` turn it into the server-sent
events that vendor's API reference documents.  ``VendorFake`` serves one script per
request over a loopback HTTP server and records every request body.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from brisvox.agent import AssistantMessage, Context, ToolCall
from brisvox.providers.llm import Done, LlmError, LlmEvent, ProviderDataDelta, TextDelta, ToolCallDelta

from ._fake_http import FakeHttpServer, RecordedRequest, Response


@dataclass(frozen=True)
class T:
    text: str


@dataclass(frozen=True)
class C:
    """One fragment of call ``index``; ``id``/``name`` on its first fragment."""

    index: int
    frag: str
    id: str | None = None
    name: str | None = None
    last: bool = False  # the call's final fragment (Gemini emits the whole call there)


@dataclass(frozen=True)
class Pause:
    seconds: float


@dataclass(frozen=True)
class Cut:
    pass


@dataclass
class Script:
    steps: Sequence[T | C | Pause | Cut]
    tool_use: bool = False  # the response stops to have tools run
    thinking: str | None = None  # Anthropic: a thinking block with this signature first
    signature: str | None = None  # Gemini: thought signature on the first call


def call(index: int, cid: str, name: str, args: dict[str, Any], pieces: int = 3) -> list[C]:
    """A call's fragments: the JSON text cut into ``pieces`` parts anywhere."""
    text = json.dumps(args)
    step = max(1, len(text) // pieces)
    cuts = [text[i : i + step] for i in range(0, len(text), step)]
    out = [C(index, cuts[0], id=cid, name=name)]
    out += [C(index, c) for c in cuts[1:]]
    last = out[-1]
    out[-1] = C(last.index, last.frag, last.id, last.name, last=True)
    return out


def interleave(*calls: list[C]) -> list[C]:
    out: list[C] = []
    longest = max(len(c) for c in calls)
    for i in range(longest):
        for c in calls:
            if i < len(c):
                out.append(c[i])
    return out


Event = tuple[str | None, Any]  # (SSE event name, data) or a Pause/Cut marker


# --- OpenAI chat completions ------------------------------------------------------------


def render_openai(script: Script) -> list[Any]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> Event:
        return (None, {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})

    out: list[Any] = [chunk({"role": "assistant", "content": ""})]
    for step in script.steps:
        if isinstance(step, T):
            out.append(chunk({"content": step.text}))
        elif isinstance(step, C):
            frag: dict[str, Any] = {"index": step.index, "function": {"arguments": step.frag}}
            if step.id:
                frag["id"] = step.id
                frag["type"] = "function"
            if step.name:
                frag["function"]["name"] = step.name
            out.append(chunk({"tool_calls": [frag]}))
        else:
            out.append(step)
    out.append(chunk({}, "tool_calls" if script.tool_use else "stop"))
    out.append((None, {"id": "chatcmpl-1", "choices": [], "usage": {
        "prompt_tokens": 11, "completion_tokens": 7, "prompt_tokens_details": {"cached_tokens": 3}}}))
    out.append((None, "[DONE]"))
    return out


# --- Anthropic Messages -----------------------------------------------------------------


def render_anthropic(script: Script) -> list[Any]:
    out: list[Any] = [("message_start", {"type": "message_start", "message": {
        "id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "m",
        "stop_reason": None, "usage": {"input_tokens": 8, "output_tokens": 1, "cache_read_input_tokens": 3}}})]
    block = 0
    if script.thinking is not None:
        out += [
            ("content_block_start", {"type": "content_block_start", "index": 0,
                                     "content_block": {"type": "thinking", "thinking": "", "signature": ""}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "thinking_delta", "thinking": "Let me think."}}),
            ("content_block_delta", {"type": "content_block_delta", "index": 0,
                                     "delta": {"type": "signature_delta", "signature": script.thinking}}),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        ]
        block = 1
    text_block: int | None = None
    call_blocks: dict[int, int] = {}
    open_blocks: list[int] = []
    out.append(("ping", {"type": "ping"}))
    for step in script.steps:
        if isinstance(step, T):
            if text_block is None or call_blocks:
                text_block = block
                block += 1
                open_blocks.append(text_block)
                out.append(("content_block_start", {"type": "content_block_start", "index": text_block,
                                                    "content_block": {"type": "text", "text": ""}}))
            out.append(("content_block_delta", {"type": "content_block_delta", "index": text_block,
                                                "delta": {"type": "text_delta", "text": step.text}}))
        elif isinstance(step, C):
            if step.index not in call_blocks:
                call_blocks[step.index] = block
                open_blocks.append(block)
                out.append(("content_block_start", {"type": "content_block_start", "index": block,
                                                    "content_block": {"type": "tool_use", "id": step.id,
                                                                      "name": step.name, "input": {}}}))
                block += 1
            out.append(("content_block_delta", {"type": "content_block_delta", "index": call_blocks[step.index],
                                                "delta": {"type": "input_json_delta", "partial_json": step.frag}}))
        else:
            out.append(step)
    for b in open_blocks:
        out.append(("content_block_stop", {"type": "content_block_stop", "index": b}))
    out.append(("message_delta", {"type": "message_delta",
                                  "delta": {"stop_reason": "tool_use" if script.tool_use else "end_turn"},
                                  "usage": {"output_tokens": 7}}))
    out.append(("message_stop", {"type": "message_stop"}))
    return out


# --- Gemini streamGenerateContent -------------------------------------------------------


def render_gemini(script: Script) -> list[Any]:
    def chunk(parts: list[dict[str, Any]], finish: str | None = None) -> Event:
        cand: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        body: dict[str, Any] = {"candidates": [cand], "modelVersion": "m"}
        if finish:
            cand["finishReason"] = finish
            body["usageMetadata"] = {"promptTokenCount": 11, "candidatesTokenCount": 7,
                                     "cachedContentTokenCount": 3, "totalTokenCount": 18}
        return (None, body)

    out: list[Any] = []
    args: dict[int, str] = {}
    names: dict[int, tuple[str | None, str | None]] = {}
    first_call = True
    complete: set[int] = set()
    emitted = 0
    for step in script.steps:
        if isinstance(step, T):
            out.append(chunk([{"text": step.text}]))
        elif isinstance(step, C):
            args[step.index] = args.get(step.index, "") + step.frag
            if step.name:
                names[step.index] = (step.id, step.name)
            if step.last:
                complete.add(step.index)
            # Gemini sends whole calls, in call order: emit each once it and those before it are complete.
            while emitted in complete:
                _cid, name = names[emitted]
                part: dict[str, Any] = {"functionCall": {"name": name, "args": json.loads(args[emitted])}}
                if first_call and script.signature:
                    part["thoughtSignature"] = script.signature
                first_call = False
                out.append(chunk([part]))
                emitted += 1
        else:
            out.append(step)
    out.append(chunk([{"text": ""}], "STOP"))
    return out


RENDERERS: dict[str, Callable[[Script], list[Any]]] = {
    "openai": render_openai,
    "anthropic": render_anthropic,
    "gemini": render_gemini,
}


@dataclass
class VendorFake:
    """Serves ``scripts[i]`` to the i-th request; a status int instead of a script answers an error."""

    vendor: str
    scripts: list[Script | int]
    server: FakeHttpServer = field(init=False)

    def __post_init__(self) -> None:
        self.server = FakeHttpServer(self._handle)

    @property
    def requests(self) -> list[RecordedRequest]:
        return self.server.requests

    def bodies(self) -> list[Any]:
        return [r.json() for r in self.server.requests]

    async def _handle(self, req: RecordedRequest, resp: Response) -> None:
        script = self.scripts[len(self.server.requests) - 1]
        if isinstance(script, int):
            await resp.json_error(script, {"error": {"type": "overloaded_error", "message": "try again"}})
            return
        await resp.start(200)
        for item in RENDERERS[self.vendor](script):
            if isinstance(item, Pause):
                await resp.sleep(item.seconds)
            elif isinstance(item, Cut):
                resp.cut()
                return
            else:
                event, data = item
                await resp.sse(data, event)

    async def __aenter__(self) -> VendorFake:
        await self.server.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.server.__aexit__(*exc)


# --- a minimal assembler for the tests (the agent's own lands separately) -----------------


@dataclass
class Collected:
    text: str
    calls: list[dict[str, Any]]
    response_data: Any
    terminal: Done | LlmError


def collect(events: list[LlmEvent]) -> Collected:
    text = []
    calls: dict[int, dict[str, Any]] = {}
    data = None
    terminal: Done | LlmError | None = None
    for e in events:
        if isinstance(e, TextDelta):
            text.append(e.text)
        elif isinstance(e, ToolCallDelta):
            slot = calls.setdefault(e.index, {"id": None, "name": None, "args": "", "provider_data": None})
            slot["id"] = slot["id"] or e.id
            slot["name"] = slot["name"] or e.name
            slot["args"] += e.arguments_fragment
            if e.provider_data is not None:
                slot["provider_data"] = e.provider_data
        elif isinstance(e, ProviderDataDelta):
            data = e.data
        else:
            assert terminal is None, "events after the terminal event"
            terminal = e
    assert terminal is not None, "no terminal event"
    return Collected("".join(text), [calls[i] for i in sorted(calls)], data, terminal)


def assistant_message(ctx: Context, epoch: int, got: Collected) -> AssistantMessage:
    ids = ctx.next_tool_call_ids(epoch, len(got.calls))
    calls = tuple(
        ToolCall(id=i, name=c["name"], arguments=json.loads(c["args"] or "{}"), provider_id=c["id"],
                 provider_data=c["provider_data"])
        for i, c in zip(ids, got.calls, strict=True)
    )
    return AssistantMessage(text=got.text, tool_calls=calls, provider_data=got.response_data)
