from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from brisvox.agent import AssistantMessage, SystemMessage, ToolCall, ToolMessage, ToolSpec, UserMessage
from brisvox.core.errors import ConfigError
from brisvox.inference import model_path
from brisvox.inference.models import QWEN_CODER_0_5B
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.llm import (
    Done,
    FinishReason,
    LlmError,
    LlmEvent,
    LlmRequest,
    PrefixWarm,
    TextDelta,
    ToolCallDelta,
    ToolChoice,
)
from brisvox.providers.local.xllama import Backend, XLlamaConfig, XLlamaLlm, to_chat_messages

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
SYSTEM = SystemMessage(text="Be brief.")


class FakeBackend:
    """Streams scripted content pieces as llama.cpp's chunks; records requests and threads."""

    def __init__(
        self, pieces: Sequence[str], *, gate: threading.Event | None = None, finish: str = "stop", pace: float = 0.0
    ) -> None:
        self.pace = pace  # real seconds between chunks (a model's token rate)
        self.pieces = list(pieces)
        self.started = threading.Event()
        self.gate = gate
        self.finish = finish
        self.bodies: list[dict[str, Any]] = []
        self.threads: list[int] = []
        self.stopped_after: int | None = None

    def complete(self, body: dict[str, Any], on_chunk: Callable[[dict[str, Any]], bool]) -> None:
        self.bodies.append(body)
        self.threads.append(threading.get_ident())
        self.started.set()
        if self.gate is not None:
            assert self.gate.wait(10), "the test never opened the gate"
        for n, piece in enumerate(self.pieces, 1):
            if self.pace:
                threading.Event().wait(self.pace)
            if on_chunk({"choices": [{"delta": {"content": piece}, "finish_reason": None}]}):
                self.stopped_after = n
                return
        on_chunk({"choices": [{"delta": {}, "finish_reason": self.finish}],
                  "timings": {"prompt_n": 5, "cache_n": 40, "predicted_n": len(self.pieces)}})


def _llm(backend: FakeBackend, **config: Any) -> XLlamaLlm:
    def load(path: str, cfg: XLlamaConfig) -> Backend:
        return backend

    return XLlamaLlm(XLlamaConfig(**config), load=load, path="fake.gguf")


async def _events(llm: XLlamaLlm, request: LlmRequest) -> list[LlmEvent]:
    async with llm.stream(request) as stream:
        return [e async for e in stream]


def _ask(text: str = "Weather in Oslo?", **kw: Any) -> LlmRequest:
    return LlmRequest(messages=(SYSTEM, UserMessage(text=text)), **kw)


def test_the_context_maps_onto_the_chat_form_with_the_tools_section_after_the_system_prompt() -> None:
    call = ToolCall(id="t1.1", name="get_weather", arguments={"city": "Oslo"})
    msgs = to_chat_messages(
        (
            SYSTEM,
            UserMessage(text="Weather in Oslo?"),
            AssistantMessage(text="", tool_calls=(call,)),
            ToolMessage(call_id="t1.1", content='{"temp": 3}'),
        ),
        "TOOLS",
    )
    assert msgs == [
        {"role": "system", "content": "Be brief.\n\nTOOLS"},
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": '<call>{"name": "get_weather", "arguments": {"city": "Oslo"}}'},
        {"role": "tool", "tool_call_id": "t1.1", "content": '{"temp": 3}'},
    ]


async def test_a_text_reply_streams_as_text_deltas_then_done_with_the_cached_prefix_counted() -> None:
    llm = _llm(FakeBackend(["Sunny", " and mild."]))
    try:
        events = await _events(llm, _ask(tools=(WEATHER,)))
    finally:
        await llm.aclose()
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["Sunny", " and mild."]
    done = events[-1]
    assert isinstance(done, Done) and done.finish_reason is FinishReason.STOP
    assert done.usage is not None and (done.usage.input_tokens, done.usage.cached_input_tokens) == (45, 40)


async def test_a_call_comes_as_tool_call_deltas_never_as_content() -> None:
    backend = FakeBackend(['<call>{"name": "get_weather", ', '"arguments": {"city": "Oslo"}}'])
    llm = _llm(backend)
    try:
        events = await _events(llm, _ask(tools=(WEATHER,)))
    finally:
        await llm.aclose()
    assert not [e for e in events if isinstance(e, TextDelta)]
    named, argued = [e for e in events if isinstance(e, ToolCallDelta)]
    # The name as soon as it streamed (the first-token clock stops), the arguments at the end.
    assert (named.index, named.id, named.name, named.arguments_fragment) == (0, "call_0", "get_weather", "")
    assert (argued.index, argued.name, json.loads(argued.arguments_fragment)) == (0, None, {"city": "Oslo"})
    assert isinstance(events[-1], Done) and events[-1].finish_reason is FinishReason.TOOL_CALLS
    body = backend.bodies[0]
    assert "start: say | call" in body["grammar"] and "get_weather" in body["messages"][0]["content"]


async def test_forced_choice_drops_the_text_alternative_and_none_allows_only_text() -> None:
    backend = FakeBackend(["ok"])
    llm = _llm(backend)
    try:
        await _events(llm, _ask(tools=(WEATHER,), tool_choice=ToolChoice.tool("get_weather")))
        await _events(llm, _ask(tools=(WEATHER,), tool_choice=ToolChoice.NONE))
        await _events(llm, _ask())
    finally:
        await llm.aclose()
    forced, none, toolless = backend.bodies
    assert "start: call\n" in forced["grammar"]
    assert none["grammar"].startswith("%llguidance {}\nstart: say\n") and "call" not in none["grammar"]
    # An agent with no tools at all: no section, no grammar.
    assert "grammar" not in toolless and toolless["messages"][0]["content"] == "Be brief."


async def test_a_round_that_offers_no_tool_keeps_the_prompt_byte_identical_and_forbids_calls() -> None:
    # The prefix cache keeps the longest unchanged start of the prompt: a round with nothing
    # offered (the state allows no tool, or ToolChoice.NONE) dropped the tools section before,
    # so the slot re-evaluated the whole prompt that round and again the next.
    backend = FakeBackend(["ok"])
    llm = _llm(backend)
    try:
        await _events(llm, _ask(tools=(WEATHER,), described=(WEATHER,)))
        await _events(llm, _ask(tools=(), described=(WEATHER,)))
        await _events(llm, _ask(tools=(WEATHER,), tool_choice=ToolChoice.NONE))
    finally:
        await llm.aclose()
    offered, empty, none = backend.bodies
    prompt = json.dumps(offered["messages"])
    assert json.dumps(empty["messages"]) == prompt and json.dumps(none["messages"]) == prompt
    assert "- get_weather:" in offered["messages"][0]["content"]
    assert "start: say | call" in offered["grammar"]
    assert empty["grammar"] == none["grammar"] and "get_weather" not in empty["grammar"]


async def test_the_prompt_describes_the_agents_tools_while_the_grammar_holds_the_offer() -> None:
    backend = FakeBackend(["ok"])
    llm = _llm(backend)
    book = ToolSpec(name="book", description="Book a table",
                    parameters={"type": "object", "properties": {"day": {"type": "string"}}})
    fixed = ToolSpec(name="book", description="Book a table",
                     parameters={"type": "object", "properties": {"day": {"type": "string", "const": "fri"}}})
    try:
        await _events(llm, _ask(tools=(WEATHER,), described=(WEATHER, book)))
        await _events(llm, _ask(tools=(WEATHER, fixed), described=(WEATHER, book)))
    finally:
        await llm.aclose()
    before, after = backend.bodies
    # The same prompt bytes (a cached prefix) whatever the state offers; only the grammar changes.
    assert before["messages"][0] == after["messages"][0] and "- book: Book a table" in before["messages"][0]["content"]
    assert '"book"' not in before["grammar"] and '"const": "fri"' in after["grammar"]


async def test_a_call_cut_by_the_token_limit_is_a_protocol_error_not_spoken_json() -> None:
    llm = _llm(FakeBackend(['<call>{"name": "get_weather", "argu'], finish="length"))
    try:
        events = await _events(llm, _ask(tools=(WEATHER,)))
    finally:
        await llm.aclose()
    assert not [e for e in events if isinstance(e, TextDelta)]
    assert not "".join(e.arguments_fragment for e in events if isinstance(e, ToolCallDelta))
    assert isinstance(events[-1], LlmError) and events[-1].error.kind is ProviderErrorKind.PROTOCOL
    assert "token limit" in str(events[-1].error)


@pytest.mark.realtime
async def test_the_model_runs_on_its_own_thread_while_the_loop_keeps_running() -> None:
    # Real time: a running model job holds virtual time still (it costs none), so the
    # loop's timers firing while the model is blocked can only be seen on the real clock.
    gate = threading.Event()
    backend = FakeBackend(["Hi"], gate=gate)
    llm = _llm(backend)
    ticks = 0
    try:
        stream = llm.stream(_ask())
        reply = asyncio.ensure_future(_collect(stream))
        assert await asyncio.to_thread(backend.started.wait, 10)  # the model is now blocked on its thread
        for _ in range(5):  # and the loop still runs its timers
            await asyncio.sleep(0.02)
            ticks += 1
        gate.set()
        events = await reply
    finally:
        await llm.aclose()
    assert ticks == 5 and backend.threads[0] != threading.get_ident()
    assert isinstance(events[-1], Done)


async def _collect(stream: Any) -> list[LlmEvent]:
    async with stream:
        return [e async for e in stream]


async def test_a_request_beyond_the_queue_is_refused_at_once_with_kind_busy() -> None:
    gate = threading.Event()
    backend = FakeBackend(["Hi"], gate=gate)
    llm = _llm(backend, queue=1)
    try:
        await llm.warm()
        running = asyncio.ensure_future(_collect(llm.stream(_ask())))
        assert await asyncio.to_thread(backend.started.wait, 10)  # the first one generates
        waiting = asyncio.ensure_future(_collect(llm.stream(_ask())))
        for _ in range(10):  # it is queued (no time passes: the running job holds it)
            await asyncio.sleep(0)
        refused = await _collect(llm.stream(_ask()))
        gate.set()
        served = [await running, await waiting]
    finally:
        await llm.aclose()
    assert len(refused) == 1 and isinstance(refused[0], LlmError)
    assert refused[0].error.kind is ProviderErrorKind.BUSY and not refused[0].error.kind.retryable
    assert all(isinstance(events[-1], Done) for events in served)
    assert len(backend.bodies) == 2


async def test_warming_the_prefix_evaluates_the_requests_prompt_with_its_tools_and_generates_one_token() -> None:
    backend = FakeBackend(["Hi"])
    llm = _llm(backend)
    request = _ask("Hello.", tools=(WEATHER,))
    try:
        await llm.warm_prefix(request)
        await _events(llm, _ask("Weather in Oslo?", tools=(WEATHER,)))
    finally:
        await llm.aclose()
    warmed, turn = backend.bodies
    assert warmed["max_tokens"] == 1 and warmed["cache_prompt"]
    # The grammar too: llguidance sets itself up on the first constrained request, at start.
    assert warmed["grammar"] == turn["grammar"]
    # The turn begins with the very system message the warm-up evaluated (its tools' section included).
    assert warmed["messages"][0] == turn["messages"][0] and "get_weather" in warmed["messages"][0]["content"]
    assert isinstance(llm, PrefixWarm)


async def test_a_prefix_the_busy_model_cannot_take_is_refused_with_kind_busy() -> None:
    gate = threading.Event()
    backend = FakeBackend(["Hi"], gate=gate)
    llm = _llm(backend, queue=1)
    try:
        running = asyncio.ensure_future(_collect(llm.stream(_ask())))
        assert await asyncio.to_thread(backend.started.wait, 10)
        waiting = asyncio.ensure_future(_collect(llm.stream(_ask())))
        for _ in range(10):
            await asyncio.sleep(0)
        with pytest.raises(ProviderError) as refused:
            await llm.warm_prefix(_ask())
        gate.set()
        await running, await waiting
    finally:
        await llm.aclose()
    assert refused.value.kind is ProviderErrorKind.BUSY


async def test_a_prefill_evaluates_the_prompt_only_when_idle_and_is_skipped_while_a_request_runs() -> None:
    gate = threading.Event()
    backend = FakeBackend(["Hi"], gate=gate)
    llm = _llm(backend)
    try:
        assert not await llm.prefill(_ask())  # not loaded yet: nothing to warm
        await llm.warm()
        running = asyncio.ensure_future(_collect(llm.stream(_ask())))
        assert await asyncio.to_thread(backend.started.wait, 10)
        assert not await llm.prefill(_ask("Weather in Bergen?"))  # the model is busy: skipped
        gate.set()
        await running
        assert await llm.prefill(_ask("Weather in Bergen?", tools=(WEATHER,)))
    finally:
        await llm.aclose()
    assert len(backend.bodies) == 2
    prefilled = backend.bodies[1]
    assert prefilled["max_tokens"] == 1 and prefilled["messages"][-1]["content"] == "Weather in Bergen?"


async def test_a_request_stops_a_running_prefill_at_its_first_token_and_a_queued_one_never_runs() -> None:
    gate = threading.Event()
    backend = FakeBackend(["Hi", " there"], gate=gate)
    llm = _llm(backend)
    try:
        await llm.warm()
        prefill = asyncio.ensure_future(llm.prefill(_ask("Weather in")))
        assert await asyncio.to_thread(backend.started.wait, 10)
        answer = asyncio.ensure_future(_collect(llm.stream(_ask("Weather in Oslo?"))))
        for _ in range(10):
            await asyncio.sleep(0)
        gate.set()
        assert await prefill
        assert backend.stopped_after == 1  # the prefill gave way at its first chunk
        await answer
    finally:
        await llm.aclose()
    assert [b["max_tokens"] for b in backend.bodies] == [1, XLlamaConfig().max_tokens]


async def test_closing_the_stream_stops_the_generation_at_the_next_token() -> None:
    backend = FakeBackend(["word "] * 20, pace=0.02)
    llm = _llm(backend)
    try:
        async with llm.stream(_ask()) as stream:
            first = await anext(stream)
        # The next request runs only after the first one stopped (one slot).
        await _events(llm, _ask())
    finally:
        await llm.aclose()
    assert isinstance(first, TextDelta)
    assert backend.stopped_after is not None and backend.stopped_after < 20


@pytest.mark.realtime  # the model's thread is real: its wait is measured on the real clock
async def test_each_request_logs_its_queue_wait_prompt_tokens_first_token_and_rate(
    caplog: pytest.LogCaptureFixture,
) -> None:
    gate = threading.Event()
    backend = FakeBackend(["Hi"], gate=gate)
    llm = _llm(backend)
    caplog.set_level(logging.INFO, logger="brisvox.providers.local.xllama")
    try:
        running = asyncio.ensure_future(_collect(llm.stream(_ask())))
        assert await asyncio.to_thread(backend.started.wait, 10)
        waiting = asyncio.ensure_future(_collect(llm.stream(_ask())))
        await asyncio.sleep(0.2)  # the second request waits this long behind the first
        gate.set()
        await running, await waiting
    finally:
        await llm.aclose()
    lines = [r.getMessage() for r in caplog.records if "queued" in r.getMessage()]
    assert len(lines) == 2
    assert all("prompt 5 evaluated + 40 cached" in line and "1 tokens in" in line for line in lines)
    queued = [int(line.split("queued ")[1].split(" ms")[0]) for line in lines]
    assert queued[0] < 100 <= queued[1]  # the second one's wait for the model is counted
    assert all("first token -" not in line for line in lines)


def _model_or_skip() -> XLlamaLlm:
    # Loading 491 MB and generating costs 20-30 s on a busy 2-core machine: opt in.
    if os.environ.get("BRISVOX_LOCAL_LLM_TESTS") != "1":
        pytest.skip("set BRISVOX_LOCAL_LLM_TESTS=1 to run the local LLM (local-llm extra, fetched GGUF)")
    pytest.importorskip("xllamacpp", reason="the local-llm extra (xllamacpp) is not installed")
    if not model_path(QWEN_CODER_0_5B).is_file():
        pytest.skip(f"the GGUF is not fetched (brisvox models fetch {QWEN_CODER_0_5B.name})")
    return XLlamaLlm()


async def _events(llm: XLlamaLlm, request: LlmRequest) -> list[LlmEvent]:
    async with llm.stream(request) as stream:
        return [e async for e in stream]


@pytest.mark.slow
async def test_the_local_llm_answers_in_text_and_a_forced_tool_call_is_valid_json() -> None:
    llm = _model_or_skip()
    try:
        system = SystemMessage(text="You are a helpful assistant. Answer in one short sentence.")
        await llm.warm_prefix(LlmRequest(messages=(system, UserMessage(text="Hi."))))  # kept in the slot
        text_events = await _events(llm, LlmRequest(messages=(system, UserMessage(text="Say hello.")), max_tokens=8, temperature=0.0))
        forced = LlmRequest(
            messages=(system, UserMessage(text="What is the weather in Paris?")),
            tools=(WEATHER,),
            tool_choice=ToolChoice.tool("get_weather"),
            max_tokens=32,
            temperature=0.0,
        )
        call_events = await _events(llm, forced)
    finally:
        await llm.aclose()
    assert not any(isinstance(e, LlmError) for e in text_events + call_events), text_events + call_events
    assert "".join(e.text for e in text_events if isinstance(e, TextDelta)).strip()
    done = text_events[-1]
    assert isinstance(done, Done) and done.usage is not None and done.usage.output_tokens > 0
    assert (done.usage.cached_input_tokens or 0) > 10  # the warmed system prompt came from the cache
    deltas = [e for e in call_events if isinstance(e, ToolCallDelta)]
    assert {d.name for d in deltas if d.name} == {"get_weather"} and {d.index for d in deltas} == {0}
    args = json.loads("".join(d.arguments_fragment for d in deltas))
    assert isinstance(args, dict) and isinstance(args.get("city"), str)
    assert isinstance(call_events[-1], Done) and call_events[-1].finish_reason is FinishReason.TOOL_CALLS


@pytest.mark.slow
async def test_in_auto_mode_the_real_model_calls_the_tool_through_the_grammar_and_speaks_no_json() -> None:
    llm = _model_or_skip()
    try:
        request = LlmRequest(
            messages=(SystemMessage(text="You are a phone assistant."), UserMessage(text="What is the weather in Paris?")),
            tools=(WEATHER,),
            max_tokens=48,
            temperature=0.0,
        )
        events = await _events(llm, request)
    finally:
        await llm.aclose()
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    assert [d.name for d in deltas if d.name] == ["get_weather"] and {d.index for d in deltas} == {0}
    assert json.loads("".join(d.arguments_fragment for d in deltas)) == {"city": "Paris"}
    assert not "".join(e.text for e in events if isinstance(e, TextDelta)).strip()
    assert isinstance(events[-1], Done) and events[-1].finish_reason is FinishReason.TOOL_CALLS


def test_the_model_generates_and_evaluates_on_one_thread_by_default() -> None:
    # Two threads wait for each other at every layer: on two cores shared with the call's
    # Whisper, Silero and TTS, generation fell to 2 to 6 tokens a second (docs/DEMO.md).
    config = XLlamaConfig()
    assert (config.threads, config.batch_threads) == (1, 1)
    with pytest.raises(ConfigError, match="batch_threads"):
        XLlamaConfig(batch_threads=0)


class PromptBackend(FakeBackend):
    """Evaluates the prompt in ``batches`` (a progress chunk each, as llama.cpp with
    ``return_progress``), then streams its pieces; records where a stop landed."""

    def __init__(self, pieces: Sequence[str], *, batches: int, pace: float = 0.0) -> None:
        super().__init__(pieces, pace=pace)
        self.batches = batches
        self.stopped_in_prompt: int | None = None  # the batch after which the stop came

    def complete(self, body: dict[str, Any], on_chunk: Callable[[dict[str, Any]], bool]) -> None:
        self.bodies.append(body)
        self.started.set()
        for n in range(1, self.batches + 1):
            if self.pace:
                threading.Event().wait(self.pace)
            progress = {"total": self.batches * 64, "cache": 0, "processed": n * 64, "time_ms": 0}
            if on_chunk({"choices": [{"delta": {"role": "assistant", "content": None}, "finish_reason": None}],
                         "prompt_progress": progress}):
                self.stopped_in_prompt = n
                return
        self.bodies.pop()
        super().complete(body, on_chunk)


@pytest.mark.realtime  # the model's thread is real
async def test_closing_the_stream_during_prompt_evaluation_lets_the_slot_go_at_the_next_batch() -> None:
    # llama.cpp honours a stop only where it calls back: at a token, or (asked for progress)
    # after each batch of the prompt.  Without progress chunks a hang-up during a long prompt
    # held the one slot until the whole prompt was evaluated (20 s measured, docs/DEMO.md).
    backend = PromptBackend(["Hello."], batches=200, pace=0.01)
    llm = _llm(backend)
    try:
        async def consume() -> None:
            await _events(llm, _ask())

        task = asyncio.create_task(consume())
        assert await asyncio.get_running_loop().run_in_executor(None, backend.started.wait, 5)
        await asyncio.sleep(0.05)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert backend.stopped_in_prompt is None or backend.stopped_in_prompt < 200
        await _events(llm, _ask("next"))  # the slot is free: the next request runs
    finally:
        await llm.aclose()
    assert backend.bodies[0]["return_progress"] is True
    assert backend.stopped_in_prompt is not None and backend.stopped_in_prompt < 200


async def test_progress_chunks_do_not_count_against_the_token_bounded_queue() -> None:
    # 300 batches of prompt and a 4-token reply: the progress chunks stay on the model's
    # thread, so the queue (max_tokens + 8) never overflows into "generation stopped".
    backend = PromptBackend(["Sunny", " and", " mild."], batches=300)
    llm = _llm(backend)
    try:
        events = await _events(llm, _ask(max_tokens=4))
    finally:
        await llm.aclose()
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Sunny and mild."
    assert isinstance(events[-1], Done) and backend.stopped_in_prompt is None
