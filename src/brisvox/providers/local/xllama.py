"""Embedded language model: a GGUF through xllamacpp's prebuilt llama.cpp (the ``local-llm`` extra).

Nothing is compiled: ``xllamacpp`` ships manylinux CPU wheels of llama.cpp with its
OpenAI-compatible server API in-process.  The default model is Qwen2.5-Coder-0.5B-Instruct,
Q4_K_M (``brisvox models fetch qwen2_5_coder_0_5b_q4``; the default fetch leaves it out).

Off the event loop: one generation is one job on an :class:`~brisvox.inference.InferencePool`
of one thread (a thread, not a process: both kept a 20 ms asyncio ticker's p95 lateness
at 4 ms while the model generated, docs/DECISIONS.md), so the model serves one request at
a time and at most ``queue`` more wait (llama.cpp itself on one thread: two stall each
other on cores shared with the call's audio, docs/DECISIONS.md); a request beyond that is refused at once with a
:class:`ProviderError` of kind ``busy`` (the engine speaks its fallback line).  Tokens come
back to the loop through a bounded queue; closing the stream stops the request at the next
token, or during prompt evaluation at the end of the batch being evaluated (llama.cpp checks
a stop between batches: ``XLlamaConfig.prompt_batch`` tokens each, a progress chunk each).

Prefix cache: the system prompt and the tools' description (:func:`tools_prompt`, the same
bytes every turn) open every request, and llama.cpp's slot keeps what it evaluated, so a
turn pays only for the messages added since the last one.  :meth:`XLlamaLlm.warm_prefix`
evaluates that prefix once at server start (``brisvox serve`` passes the agent's prompt,
the date line and its tools), so the first turn of a call does not pay for it either:
every call of the agent begins with the same bytes, and the one slot keeps them.
:meth:`XLlamaLlm.prefill` does the same for the caller's words at a pause, before the turn
ends (the runner, on ``UserTurnTentative``): only when the model is idle, and a request
submitted meanwhile stops it at the end of the batch being evaluated (or its first generated
token), so the turn's request finds the words evaluated and pays only for the rest.

Tool calls: the output is constrained by :func:`tool_grammar` (text, or one call of an
offered tool whose arguments satisfy its schema), and :class:`ReplyParser` turns a call
into :class:`ToolCallDelta` events; a call is never spoken and never left as JSON text.

Each request logs one :class:`RequestStats` line (queue wait, prompt tokens evaluated and
cached, first token, tokens generated and their rate): where a turn's time went.
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from brisvox.agent import AssistantMessage, Message, SystemMessage, ToolMessage, UserMessage
from brisvox.core.clock import Clock, SystemClock
from brisvox.core.errors import ConfigError
from brisvox.inference import InferencePool, PoolConfig, model_path
from brisvox.inference.errors import InferenceError, PoolFull
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
from brisvox.providers.local._tool_grammar import (
    MalformedCall,
    ParsedCall,
    ReplyParser,
    ToolSchema,
    call_text,
    text_grammar,
    tool_grammar,
    tools_prompt,
)

__all__ = ["Backend", "RequestStats", "XLlamaConfig", "XLlamaLlm", "to_chat_messages"]

log = logging.getLogger(__name__)

PROVIDER = "local-llama"
_FINISH = {"stop": FinishReason.STOP, "length": FinishReason.LENGTH}
_END = None  # end of a generation's chunks (the job also resolves its future)


@dataclass(frozen=True, slots=True, kw_only=True)
class XLlamaConfig:
    model_path: str | os.PathLike[str] | None = None  # default: the fetched Qwen GGUF
    n_ctx: int = 4096
    # Generation on one thread: with two, llama.cpp's threads wait for each other at every
    # layer, and on two cores shared with Whisper, Silero and the TTS the generation fell
    # to 2 to 6 tokens a second in a call against 15 to 23 with one (docs/DEMO.md).
    threads: int = 1
    # The prompt (a caller's words, a tool's result) is evaluated as one batch on these; two
    # were slower in a call too (39 tokens in 2.6 s against 38 in 0.9 s with one, docs/DEMO.md).
    batch_threads: int = 1
    max_tokens: int = 160  # when the request sets none (a call of the demo's tools is about 50)
    temperature: float = 0.0  # when the request sets none: a small model decides best greedily
    queue: int = 2  # requests that may wait while one generates; more are refused (kind busy)
    # Prompt tokens evaluated per batch.  llama.cpp checks a request's stop only between
    # batches (a progress chunk each, ``return_progress``): with its default 2048 a closed
    # round (a hang-up, a barge-in) kept the slot until its whole prompt was evaluated, 20 s
    # for 1463 new tokens on the shared machine; with 64 it is let go within one batch
    # (docs/DEMO.md, "A closed round lets the slot go").
    prompt_batch: int = 64

    def __post_init__(self) -> None:
        if self.n_ctx < 256 or min(self.threads, self.batch_threads, self.max_tokens, self.queue, self.prompt_batch) < 1:
            raise ConfigError(
                "XLlamaConfig: n_ctx >= 256, threads >= 1, batch_threads >= 1, max_tokens >= 1, queue >= 1, "
                f"prompt_batch >= 1; got {self.n_ctx}, {self.threads}, {self.batch_threads}, {self.max_tokens}, "
                f"{self.queue}, {self.prompt_batch}"
            )


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestStats:
    """Where one request's time went (logged once per request: the line ``bench/demo_callers.py``
    and ``bench/local_llm_warm.py`` read).  Seconds on the loop's clock from the submission;
    token counts and the model's own times from llama.cpp's ``timings``."""

    queued_s: float  # submitted -> the model's thread took it (another request was generating)
    first_token_s: float | None  # submitted -> the first content piece reached the loop
    total_s: float  # submitted -> the last chunk
    prompt_evaluated: int  # prompt tokens this request evaluated
    prompt_cached: int  # prompt tokens taken from the slot's cache (the kept prefix)
    prompt_ms: float
    generated: int
    generate_ms: float

    def line(self) -> str:
        first = "-" if self.first_token_s is None else f"{self.first_token_s * 1000:.0f} ms"
        rate = self.generated / (self.generate_ms / 1000) if self.generate_ms > 0 else 0.0
        return (f"queued {self.queued_s * 1000:.0f} ms, prompt {self.prompt_evaluated} evaluated + "
                f"{self.prompt_cached} cached in {self.prompt_ms:.0f} ms, first token {first}, "
                f"{self.generated} tokens in {self.generate_ms:.0f} ms ({rate:.1f}/s), total {self.total_s * 1000:.0f} ms")


class Backend(Protocol):
    """A loaded model that completes chat requests (xllamacpp's ``Server``, or a fake in tests)."""

    def complete(self, body: dict[str, Any], on_chunk: Callable[[dict[str, Any]], bool]) -> None:
        """Run one streamed chat completion on this thread; ``on_chunk`` returns True to stop it."""
        ...


class _XLlamaBackend:
    def __init__(self, path: str, config: XLlamaConfig) -> None:
        import xllamacpp  # type: ignore[import-untyped, import-not-found, unused-ignore]

        params = xllamacpp.CommonParams()
        params.model.path = path
        params.n_ctx = config.n_ctx
        params.n_parallel = 1  # one slot: its KV cache is the conversation's prefix
        params.cpuparams.n_threads = config.threads
        params.cpuparams_batch.n_threads = config.batch_threads
        params.n_batch = config.prompt_batch  # a stop is honoured between batches (XLlamaConfig.prompt_batch)
        params.n_ubatch = config.prompt_batch
        self._server: Any = xllamacpp.Server(params)

    def complete(self, body: dict[str, Any], on_chunk: Callable[[dict[str, Any]], bool]) -> None:
        result = self._server.handle_chat_completions(body, on_chunk)
        if isinstance(result, dict) and "error" in result:
            raise RuntimeError(f"llama.cpp refused the request: {str(result['error'])[:200]}")


def load_xllamacpp(path: str, config: XLlamaConfig) -> Backend:
    return _XLlamaBackend(path, config)


def to_chat_messages(messages: tuple[Message, ...], tools_section: str | None) -> list[dict[str, Any]]:
    """The request's messages in the chat form, the tools' section appended to the system prompt.

    Earlier calls appear as the JSON the model writes (:func:`call_text`), so the history
    shows it its own format.
    """
    out: list[dict[str, Any]] = []
    for m in messages:
        match m:
            case SystemMessage(text=text):
                out.append({"role": "system", "content": text})
            case UserMessage(text=text):
                out.append({"role": "user", "content": text})
            case AssistantMessage():
                parts = [m.text] if m.text else []
                parts.extend(call_text(c.name, c.arguments) for c in m.tool_calls)
                out.append({"role": "assistant", "content": "\n".join(parts)})
            case ToolMessage():
                out.append({"role": "tool", "tool_call_id": m.call_id, "content": m.content})
    if tools_section is not None:
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": f"{out[0]['content'].rstrip()}\n\n{tools_section}"}
        else:
            out.insert(0, {"role": "system", "content": tools_section})
    return out


def _offered(request: LlmRequest) -> tuple[ToolSchema, ...]:
    if request.tool_choice.mode is ToolChoiceMode.NONE:
        return ()
    tools = request.tools
    if request.tool_choice.mode is ToolChoiceMode.TOOL:
        tools = tuple(t for t in tools if t.name == request.tool_choice.name)
    return tuple(ToolSchema(t.name, t.description, t.parameters) for t in tools)


def call_deltas(name: str | None, call: ParsedCall | None = None) -> LlmEvent:
    """The one call's tool-call events (the one place they are made): its name as soon as it
    streamed (the engine's first-token clock stops there), then its arguments whole."""
    if call is None:
        return ToolCallDelta(index=0, id="call_0", name=name)
    return ToolCallDelta(index=0, id="call_0", name=call.name if name is None else None, arguments_fragment=call.arguments)


class XLlamaLlm(LlmProvider):
    def __init__(
        self,
        config: XLlamaConfig = XLlamaConfig(),
        *,
        load: Callable[[str, XLlamaConfig], Backend] = load_xllamacpp,
        path: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self.config = config
        self._clock = clock or SystemClock()
        self._load = load
        self._path_override = path
        # One thread: llama.cpp's slot serves one request at a time; `queue` may wait.
        self._pool = InferencePool(PoolConfig(name="brisvox-llm", threads=1, jobs_per_thread=config.queue))
        self._backend: Backend | None = None
        self._loading = asyncio.Lock()
        self._requests = 0  # requests submitted and not yet ended (a prefill waits for none)
        self._prefilling: threading.Event | None = None  # the running prefill's stop flag

    @property
    def name(self) -> str:
        return PROVIDER

    def _model_file(self) -> str:
        if self._path_override is not None:
            return self._path_override
        path = model_path(QWEN_CODER_0_5B, self.config.model_path)
        if not path.is_file():
            raise ProviderError(
                self.name,
                ProviderErrorKind.MODEL,
                f"no GGUF at {path}; run `brisvox models fetch {QWEN_CODER_0_5B.name}` or set {QWEN_CODER_0_5B.path_env}",
            )
        return str(path)

    async def _loaded(self) -> Backend:
        async with self._loading:
            if self._backend is None:
                path = self._model_file()
                try:
                    self._backend = await self._pool.run(self._load, path, self.config)
                except InferenceError as exc:
                    raise ProviderError(self.name, ProviderErrorKind.MODEL, f"cannot load {path}: {exc}") from exc
            return self._backend

    async def warm(self) -> None:
        """Load the model (about 1 s); the first turn evaluates the system prompt, later turns reuse it."""
        await self._loaded()

    def _prompt_only(self, request: LlmRequest, stop: threading.Event | None) -> tuple[
            dict[str, Any], Callable[[dict[str, Any]], bool], dict[str, Any]]:
        """The body that evaluates ``request``'s prompt and generates one token, its chunk
        callback (stops at the first chunk once ``stop`` is set) and the timings it fills."""
        body = self._body(request, _offered(request))
        # The grammar stays: llguidance builds its view of the model's vocabulary on the
        # first constrained request of the process (0.7 to 1 s measured), so the first
        # call's first turn would pay it (docs/DEMO.md, "The local LLM's time").
        body["max_tokens"] = 1
        timings: dict[str, Any] = {}

        def on_chunk(chunk: dict[str, Any]) -> bool:  # on the model's thread
            found = chunk.get("timings")
            if isinstance(found, dict):
                timings.update(found)
            return stop is not None and stop.is_set()

        return body, on_chunk, timings

    async def warm_prefix(self, request: LlmRequest) -> None:
        """Evaluate ``request``'s prompt (one token generated) so the slot keeps it; logs what it cost."""
        backend = await self._loaded()
        body, on_chunk, timings = self._prompt_only(request, None)
        try:
            await self._pool.run(backend.complete, body, on_chunk)
        except PoolFull:
            raise ProviderError(self.name, ProviderErrorKind.BUSY, "the local model is busy; prefix not warmed") from None
        except InferenceError as exc:
            cause = exc.__cause__ or exc
            raise ProviderError(self.name, ProviderErrorKind.MODEL, f"warming the prefix failed: {cause}") from exc
        log.info("%s: prompt prefix of %s tokens evaluated in %.0f ms (kept for every call's first turn)",
                 self.name, timings.get("prompt_n", "?"), float(timings.get("prompt_ms", 0.0)))

    async def prefill(self, request: LlmRequest) -> bool:
        """Evaluate ``request``'s prompt while the model is idle (see the module docs); False:
        skipped (not loaded yet, a request running or waiting, another prefill running)."""
        if self._backend is None or self._requests or self._prefilling is not None:
            return False
        backend = self._backend
        stop = threading.Event()
        body, on_chunk, timings = self._prompt_only(request, stop)
        self._prefilling = stop
        submitted = self._clock.now()

        def evaluate() -> None:  # on the model's thread: a request submitted first skips it
            if not stop.is_set():
                backend.complete(body, on_chunk)

        try:
            await self._pool.run(evaluate)
        except PoolFull:
            return False
        except InferenceError as exc:
            # Only time is lost: the turn's own request evaluates the words and reports its failure.
            log.warning("%s: prefilling the caller's words failed", self.name, exc_info=exc)
            return False
        finally:
            if self._prefilling is stop:
                self._prefilling = None
        total = (self._clock.now() - submitted) * 1000
        if timings:
            log.info("%s: prefill %s evaluated + %s cached in %.0f ms, total %.0f ms", self.name,
                     timings.get("prompt_n", "?"), timings.get("cache_n", "?"), float(timings.get("prompt_ms", 0.0)), total)
        else:  # stopped at its first token: the request that came takes what it evaluated from the cache
            log.info("%s: prefill gave way to a request after %.0f ms", self.name, total)
        return True

    def stream(self, request: LlmRequest) -> GeneratorLlmStream:
        return GeneratorLlmStream(self.name, self._respond(request))

    async def aclose(self) -> None:
        await self._pool.aclose()
        self._backend = None

    def _body(self, request: LlmRequest, tools: tuple[ToolSchema, ...]) -> dict[str, Any]:
        # The prompt describes the agent's tools (stable bytes, a cached prefix); the grammar
        # holds the offer of this request (docs/TOOLS.md, "Offered now").  A round that offers
        # no tool (nothing the state allows, or ToolChoice.NONE) keeps the same section and is
        # held to text by the grammar: dropping the section changed the prompt ~600 tokens
        # before the conversation, so llama.cpp's slot re-evaluated all of it, and the next
        # round (tools back) all of it again.
        described = tuple(ToolSchema(t.name, t.description, t.parameters) for t in request.described)
        described = described or tools or tuple(ToolSchema(t.name, t.description, t.parameters) for t in request.tools)
        body: dict[str, Any] = {
            "messages": to_chat_messages(request.messages, tools_prompt(described) if described else None),
            "stream": True,
            "max_tokens": request.max_tokens or self.config.max_tokens,
            "temperature": self.config.temperature if request.temperature is None else request.temperature,
            "cache_prompt": True,
            # A chunk per evaluated batch: the chunk callback's stop is honoured there, so a
            # closed request lets the slot go during prompt evaluation too (not only at a token).
            "return_progress": True,
        }
        if tools:
            text_allowed = request.tool_choice.mode is ToolChoiceMode.AUTO
            body["grammar"] = tool_grammar(tools, allow_text=text_allowed)
        elif described:  # the section says how to call: the grammar says not now
            body["grammar"] = text_grammar()
        return body

    async def _respond(self, request: LlmRequest) -> AsyncGenerator[LlmEvent, None]:
        backend = await self._loaded()
        tools = _offered(request)
        body = self._body(request, tools)
        loop = asyncio.get_running_loop()
        # Bounded: one chunk per token plus the role, finish and usage chunks.
        chunks: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue(maxsize=body["max_tokens"] + 8)
        stop = threading.Event()

        def offer(item: dict[str, Any] | None) -> None:  # on the loop
            try:
                chunks.put_nowait(item)
            except asyncio.QueueFull:  # more chunks than tokens: stop it, report it
                stop.set()
                log.error("%s: more chunks than the token limit; generation stopped", self.name)

        def on_chunk(chunk: dict[str, Any]) -> bool:  # on the model's thread
            # A progress chunk (a batch of the prompt evaluated) carries nothing for the loop:
            # it is where a closed stream stops, and it stays off the token-bounded queue.
            if not stop.is_set() and "prompt_progress" not in chunk:
                loop.call_soon_threadsafe(offer, chunk)
            return stop.is_set()

        submitted = self._clock.now()
        started: list[float] = []  # when the model's thread took the job (loop time)
        first: float | None = None

        def generate() -> None:  # the job
            loop.call_soon_threadsafe(lambda: started.append(self._clock.now()))
            try:
                backend.complete(body, on_chunk)
            finally:
                loop.call_soon_threadsafe(offer, _END)

        if self._prefilling is not None:
            self._prefilling.set()  # a request goes first: the prefill stops at its first token
        try:
            job = self._pool.submit(generate, name="llm-generate")
        except PoolFull:
            raise ProviderError(
                self.name, ProviderErrorKind.BUSY, f"the local model is busy ({self.config.queue} requests waiting)"
            ) from None
        self._requests += 1
        parser = ReplyParser(frozenset(t.name for t in tools))
        named: str | None = None  # the call's name, once sent
        finish: str | None = None
        usage = Usage()
        timings: dict[str, Any] = {}
        try:
            while (chunk := await chunks.get()) is not _END:
                for choice in chunk.get("choices") or ():
                    finish = choice.get("finish_reason") or finish
                    content = (choice.get("delta") or {}).get("content")
                    if content:
                        first = self._clock.now() if first is None else first
                        text = parser.feed(content)
                        if text:
                            yield TextDelta(text=text)
                        elif named is None and (named := parser.call_name()) is not None:
                            yield call_deltas(named)
                if isinstance(chunk.get("timings"), dict):
                    timings = chunk["timings"]
                    usage = Usage(
                        input_tokens=int(timings.get("prompt_n", 0)) + int(timings.get("cache_n", 0)),
                        output_tokens=int(timings.get("predicted_n", 0)),
                        cached_input_tokens=int(timings.get("cache_n", 0)),
                    )
            try:
                await job
            except InferenceError as exc:
                cause = exc.__cause__ or exc
                raise ProviderError(self.name, ProviderErrorKind.MODEL, f"llama.cpp failed: {type(cause).__name__}") from exc
        finally:
            # A closed stream stops at the next token; a job still queued is skipped.
            self._requests -= 1
            stop.set()
            job.cancel()
            # Every request, a stopped one too (a dropped speculation, a barge-in): its cost.
            stats = _stats(submitted, started, first, self._clock.now(), timings)
            log.info("%s: %s%s", self.name, stats.line(), "" if timings else " (stopped before its end)")
        try:
            call = parser.finish()
        except MalformedCall as exc:
            cut = " (cut by the token limit)" if finish == "length" else ""
            raise ProviderError(self.name, ProviderErrorKind.PROTOCOL, f"{exc}{cut}") from None
        if call is not None:
            yield call_deltas(named, call)
        reason = FinishReason.TOOL_CALLS if call is not None else _FINISH.get(finish or "stop", FinishReason.OTHER)
        yield Done(finish_reason=reason, usage=usage)


def _stats(submitted: float, started: list[float], first: float | None, end: float, timings: dict[str, Any]) -> RequestStats:
    return RequestStats(
        queued_s=(started[0] if started else end) - submitted,
        first_token_s=None if first is None else first - submitted,
        total_s=end - submitted,
        prompt_evaluated=int(timings.get("prompt_n", 0)),
        prompt_cached=int(timings.get("cache_n", 0)),
        prompt_ms=float(timings.get("prompt_ms", 0.0)),
        generated=int(timings.get("predicted_n", 0)),
        generate_ms=float(timings.get("predicted_ms", 0.0)),
    )
