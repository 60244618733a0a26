"""The resilience wrappers around any provider, driven by the simulator's mocks."""

from __future__ import annotations

import pytest

from brisvox.agent import Context
from brisvox.core.clock import SimClock
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.llm import Done, FinishReason, LlmError, LlmEvent, LlmRequest, TextDelta
from brisvox.providers.resilient import ResiliencePolicy
from brisvox.providers.resilient_wrap import ResilientLlm, ResilientStt, ResilientTts
from brisvox.providers.stt import SttConfig, SttError, SttEvent
from brisvox.providers.tts import TtsAudio, TtsConfig, TtsError, TtsFlushed
from brisvox.sim import (
    Fail,
    Finish,
    Hang,
    MockStt,
    MockSttConfig,
    MockTts,
    MockTtsConfig,
    Pause,
    Say,
    ScriptedLlm,
)


def request() -> LlmRequest:
    ctx = Context()
    ctx.push_user("hello")
    return LlmRequest(messages=ctx.messages)


async def collect(llm: ResilientLlm) -> list[LlmEvent]:
    async with llm.stream(request()) as stream:
        return [e async for e in stream]


async def test_a_request_refused_before_any_event_is_retried_and_then_streams() -> None:
    clock = SimClock()
    inner = ScriptedLlm(clock, [[Fail(ProviderErrorKind.RATE_LIMITED)], [Say("hi there"), Finish(FinishReason.STOP)]])
    events = await collect(ResilientLlm(inner, clock))
    assert "".join(e.text for e in events if isinstance(e, TextDelta)).strip() == "hi there"
    assert isinstance(events[-1], Done)
    assert len(inner.requests) == 2


async def test_a_failure_after_the_first_delta_is_never_retried() -> None:
    clock = SimClock()
    inner = ScriptedLlm(clock, [[Say("partial"), Fail(ProviderErrorKind.CONNECT)], [Say("again")]])
    events = await collect(ResilientLlm(inner, clock))
    assert isinstance(events[-1], LlmError) and events[-1].error.kind is ProviderErrorKind.CONNECT
    assert len(inner.requests) == 1


async def test_a_model_that_never_answers_hits_the_first_token_deadline() -> None:
    clock = SimClock()
    inner = ScriptedLlm(clock, [[Hang()]])
    t0 = clock.now()
    events = await collect(ResilientLlm(inner, clock))
    assert clock.now() - t0 == pytest.approx(8.0)
    assert isinstance(events[-1], LlmError) and events[-1].error.kind is ProviderErrorKind.TIMEOUT
    assert inner.closed_streams == 1


async def test_a_stall_after_text_hits_the_idle_deadline() -> None:
    clock = SimClock()
    inner = ScriptedLlm(clock, [[Say("hello"), Pause(30.0), Say("late"), Finish(FinishReason.STOP)]])
    t0 = clock.now()
    events = await collect(ResilientLlm(inner, clock))
    assert clock.now() - t0 == pytest.approx(15.0, abs=0.01)
    assert isinstance(events[-1], LlmError) and events[-1].error.kind is ProviderErrorKind.TIMEOUT


async def test_stt_connect_retries_retryable_failures_only() -> None:
    clock = SimClock()
    with pytest.raises(ProviderError) as info:
        await ResilientStt(MockStt(clock, MockSttConfig(fail_connect=ProviderErrorKind.AUTH)), clock).connect(SttConfig())
    assert info.value.kind is ProviderErrorKind.AUTH
    t0 = clock.now()
    with pytest.raises(ProviderError):
        await ResilientStt(MockStt(clock, MockSttConfig(fail_connect=ProviderErrorKind.CONNECT)), clock,
                           ResiliencePolicy(max_attempts=3, backoff_initial=1.0)).connect(SttConfig())
    assert clock.now() - t0 == pytest.approx(1.0 + 2.0)


async def test_an_stt_session_that_drops_is_reopened_and_reports_a_non_fatal_error() -> None:
    clock = SimClock()
    inner = MockStt(clock, MockSttConfig(disconnect_after=0.5))
    stt = ResilientStt(inner, clock)
    async with await stt.connect(SttConfig(sample_rate=16_000)) as session:
        for _ in range(40):  # 0.8 s of audio in 20 ms frames
            await session.send_audio(b"\x00\x00" * 320)
        event = await anext(session)
        assert isinstance(event, SttError) and not event.fatal and event.error.kind is ProviderErrorKind.CLOSED
        for _ in range(100):
            if session.reconnects:  # type: ignore[attr-defined]
                break
            await clock.sleep(0.01)
        assert session.reconnects == 1  # type: ignore[attr-defined]
    assert len(inner.sessions) == 2


async def test_a_tts_session_that_drops_fails_the_context_in_flight_and_serves_the_next() -> None:
    clock = SimClock()
    inner = MockTts(clock, MockTtsConfig(disconnect_after=0.3))
    tts = ResilientTts(inner, clock)
    async with await tts.connect(TtsConfig(sample_rate=16_000)) as session:
        await session.send_text(1, "a sentence long enough to outlast the connection")
        await session.flush(1)
        events = []
        while not any(isinstance(e, TtsError) for e in events):
            events.append(await anext(session))
        err = events[-1]
        assert isinstance(err, TtsError) and err.context_id == 1 and not err.fatal
        await session.send_text(2, "ok")
        await session.flush(2)
        rest = []
        while not any(isinstance(e, TtsFlushed) for e in rest):
            rest.append(await anext(session))
    assert any(isinstance(e, TtsAudio) and e.context_id == 2 for e in rest)
    assert all(getattr(e, "context_id", 2) == 2 for e in rest)
    assert len(inner.sessions) == 2


class _BrokenSession:
    """An STT session whose iteration fails with a bug (not a provider error)."""

    async def send_audio(self, pcm: bytes) -> None:
        return None

    async def finalize(self) -> None:
        return None

    async def aclose(self) -> None:
        return None

    def __aiter__(self) -> _BrokenSession:
        return self

    async def __anext__(self) -> SttEvent:
        raise RuntimeError("bug in the inner session")

    async def __aenter__(self) -> _BrokenSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None


class _BrokenStt:
    name = "broken"

    async def connect(self, config: SttConfig) -> _BrokenSession:
        return _BrokenSession()

    async def warm(self) -> None:
        return None


async def test_an_inner_session_that_breaks_ends_the_wrapped_session_with_a_fatal_error() -> None:
    clock = SimClock()
    stt = ResilientStt(_BrokenStt(), clock)  # type: ignore[arg-type]
    async with await stt.connect(SttConfig()) as session:
        events = [e async for e in session]
    assert isinstance(events[-1], SttError) and events[-1].fatal
    assert events[-1].error.kind is ProviderErrorKind.PROTOCOL
