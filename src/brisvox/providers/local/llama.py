"""Embedded language model: a GGUF through llama-cpp-python (the optional ``local-llm`` extra).

The default model is Qwen2.5-Coder-0.5B-Instruct, Q4_K_M (``brisvox models fetch
qwen2_5_coder_0_5b_q4``; the default fetch leaves it out).  Every call into llama.cpp runs
on an :class:`~brisvox.inference.InferencePool` thread (by default one of its own), one
job per streamed token, so the event loop never waits on the model and a closed stream
stops generating after the token in progress.  One model serves one stream at a time
(llama.cpp's context is not shareable); a second stream waits for the first.  llama.cpp
reuses its KV cache for the prompt prefix the next request shares with the last one, so
a conversation that only grows pays for its new messages only: keep the system prompt
short and stable.

Tool calls: with a forced tool choice llama-cpp-python constrains the output with a
grammar built from the tool's JSON Schema and streams it as a structured call.  In auto
mode the model writes calls as JSON text in its answer; :class:`ToolTextSplitter` takes
them out of the spoken text and accepts only declared tool names.  ``required`` with one
tool is forced to that tool; with several it runs as auto.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from typing import Any

from brisvox.agent import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage
from brisvox.core.errors import ConfigError
from brisvox.inference import InferenceError, InferencePool, PoolConfig, model_path
from brisvox.inference.models import QWEN_CODER_0_5B
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.llm import (
    Done,
    FinishReason,
    GeneratorLlmStream,
    LlmEvent,
    LlmProvider,
    LlmRequest,
    TextDelta,
    ToolCallDelta,
    ToolChoiceMode,
    Usage,
)
from brisvox.providers.local._tool_text import ToolTextSplitter

__all__ = ["LlamaConfig", "LlamaLlm", "to_chat_messages"]

log = logging.getLogger(__name__)

_END = object()
_FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH, "tool_calls": FinishReason.TOOL_CALLS}


@dataclass(frozen=True, slots=True, kw_only=True)
class LlamaConfig:
    model_path: str | os.PathLike[str] | None = None  # default: the fetched Qwen GGUF
    n_ctx: int = 4096
    threads: int = 2
    max_tokens: int = 256  # when the request sets none
    temperature: float = 0.2  # when the request sets none

    def __post_init__(self) -> None:
        if self.n_ctx < 256 or self.threads < 1 or self.max_tokens < 1:
            raise ConfigError(
                f"LlamaConfig: n_ctx >= 256, threads >= 1, max_tokens >= 1; got {self.n_ctx}, {self.threads}, {self.max_tokens}"
            )


def to_chat_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """The request's messages in the OpenAI chat form llama.cpp's chat templates read."""
    out: list[dict[str, Any]] = []
    for m in messages:
        match m:
            case SystemMessage(text=text):
                out.append({"role": "system", "content": text})
            case UserMessage(text=text):
                out.append({"role": "user", "content": text})
            case AssistantMessage():
                msg: dict[str, Any] = {"role": "assistant", "content": m.text}
                if m.tool_calls:
                    msg["tool_calls"] = [
                        {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                        for c in m.tool_calls
                    ]
                out.append(msg)
            case ToolMessage():
                out.append({"role": "tool", "tool_call_id": m.call_id, "content": m.content})
    return out


def _tools(request: LlmRequest) -> tuple[list[dict[str, Any]] | None, Any]:
    """(tools, tool_choice) in llama-cpp-python's form."""
    if not request.tools or request.tool_choice.mode is ToolChoiceMode.NONE:
        return None, None
    tools = [
        {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": dict(t.parameters)}}
        for t in request.tools
    ]
    forced = request.tool_choice.name
    if request.tool_choice.mode is ToolChoiceMode.REQUIRED and len(request.tools) == 1:
        forced = request.tools[0].name
    if forced is not None:
        return tools, {"type": "function", "function": {"name": forced}}
    return tools, "auto"


class _Model:
    """The loaded llama.cpp model; only ever used on the provider's pool thread."""

    def __init__(self, path: str, config: LlamaConfig) -> None:
        from llama_cpp import Llama  # type: ignore[import-not-found, unused-ignore]

        self.llm: Any = Llama(model_path=path, n_ctx=config.n_ctx, n_threads=config.threads, verbose=False)

    def start(self, kwargs: dict[str, Any]) -> Any:
        return iter(self.llm.create_chat_completion(stream=True, **kwargs))

    def context_tokens(self) -> int:
        return int(self.llm.n_tokens)


class LlamaLlm(LlmProvider):
    def __init__(self, config: LlamaConfig = LlamaConfig(), *, pool: InferencePool | None = None) -> None:
        self.config = config
        self._own_pool = pool is None
        self._pool = pool if pool is not None else InferencePool(PoolConfig(name="brisvox-llama", threads=1, jobs_per_thread=8))
        self._model: _Model | None = None
        self._loading = asyncio.Lock()
        self._busy = asyncio.Lock()
        self.rejected_calls = 0  # tool calls written as text that named no declared tool or did not parse

    @property
    def name(self) -> str:
        return "local-llama"

    def _path(self) -> str:
        path = model_path(QWEN_CODER_0_5B, self.config.model_path)
        if not path.is_file():
            raise ProviderError(
                self.name,
                ProviderErrorKind.MODEL,
                f"no GGUF at {path}; run `brisvox models fetch {QWEN_CODER_0_5B.name}` or set {QWEN_CODER_0_5B.path_env}",
            )
        return str(path)

    async def _loaded(self) -> _Model:
        async with self._loading:
            if self._model is None:
                path = self._path()
                try:
                    self._model = await self._pool.run(_Model, path, self.config)
                except InferenceError as exc:
                    raise ProviderError(self.name, ProviderErrorKind.MODEL, f"cannot load {path}: {exc}") from exc
            return self._model

    async def warm(self) -> None:
        """Load the model and evaluate a one-word prompt (the first evaluation is the slow one)."""
        request = LlmRequest(messages=(UserMessage(text="Hi"),), max_tokens=1)
        async with self.stream(request) as stream:
            async for _ in stream:
                pass

    def stream(self, request: LlmRequest) -> GeneratorLlmStream:
        return GeneratorLlmStream(self.name, self._respond(request))

    async def aclose(self) -> None:
        self._model = None
        if self._own_pool:
            await self._pool.aclose()

    async def _respond(self, request: LlmRequest) -> AsyncGenerator[LlmEvent, None]:
        model = await self._loaded()
        tools, choice = _tools(request)
        kwargs: dict[str, Any] = {
            "messages": to_chat_messages(request.messages),
            "max_tokens": request.max_tokens or self.config.max_tokens,
            "temperature": self.config.temperature if request.temperature is None else request.temperature,
        }
        if tools is not None:
            kwargs["tools"] = tools
            kwargs["tool_choice"] = choice
        splitter = ToolTextSplitter(frozenset(t["function"]["name"] for t in tools) if choice == "auto" and tools else frozenset())
        async with self._busy:
            chunks = await self._run(model.start, kwargs)
            produced = 0
            finish: str | None = None
            structured = False
            try:
                while (chunk := await self._run(next, chunks, _END)) is not _END:
                    produced += 1
                    choice0 = chunk["choices"][0]
                    finish = choice0.get("finish_reason") or finish
                    delta = choice0.get("delta") or {}
                    for call in delta.get("tool_calls") or ():
                        structured = True
                        fn = call.get("function") or {}
                        yield ToolCallDelta(
                            index=int(call.get("index", 0)),
                            id=call.get("id"),
                            name=fn.get("name"),
                            arguments_fragment=fn.get("arguments") or "",
                        )
                    if not delta.get("tool_calls") and delta.get("content"):
                        text = splitter.feed(delta["content"])
                        if text:
                            yield TextDelta(text=text)
            finally:
                # Stop generating; the next stream must not find this one's generator open.
                await self._run(chunks.close)
            rest, calls = splitter.finish()
            self.rejected_calls += splitter.rejected
            if rest:
                yield TextDelta(text=rest)
            for index, call in enumerate(calls):
                yield ToolCallDelta(index=index, id=f"call_{index}", name=call.name, arguments_fragment=call.arguments)
            used = await self._run(model.context_tokens)
        reason = FinishReason.TOOL_CALLS if calls or structured else _FINISH.get(finish or "stop", FinishReason.OTHER)
        yield Done(finish_reason=reason, usage=Usage(input_tokens=max(0, used - produced), output_tokens=produced))

    async def _run(self, fn: Any, *args: Any) -> Any:
        try:
            return await self._pool.run(fn, *args)
        except InferenceError as exc:
            cause = exc.__cause__ or exc
            raise ProviderError(self.name, ProviderErrorKind.MODEL, f"llama.cpp failed: {type(cause).__name__}: {cause}") from exc
