"""A failure inside a call reaches the operator (one log line with its traceback and the
call's id), the client (an error and the end of the call) and the report."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator

import pytest

from brisvox.agent.context import AssistantMessage
from brisvox.agent.turn import FixedSilence
from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed
from brisvox.core.tasks import TaskScope, live_tasks, wait_for_task_baseline
from brisvox.engine import CallFailed, EngineConfig, LlmConfig, Providers, run_call
from brisvox.engine.events import CallObserver, EngineFailure
from brisvox.engine.playout import PlayoutBook, Released
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.llm import Done, GeneratorLlmStream, LlmEvent, LlmProvider, LlmRequest
from brisvox.providers.tts import TtsConfig
from brisvox.sim import MockStt, MockTts, MockTtsConfig, Say, ScenarioBuilder, ScriptedLlm
from brisvox.sim.mock_tts import MockTtsSession
from brisvox.transport import Heard, LoopbackTransport, TransportSession
from brisvox.transport.events import FailureKind, WireAudioOut, WireHangupOut
from tests.engine.harness import RATE, energy_vad, simulate


class CrashingSession(MockTtsSession):
    """A TTS session with a bug: ``send_text`` raises from its ``crash_at``-th context on."""

    crash_at = 2

    async def send_text(self, context_id: int, text: str) -> None:
        if context_id >= self.crash_at:
            raise RuntimeError("a bug in the provider")
        await super().send_text(context_id, text)


class CrashingTts(MockTts):
    async def connect(self, config: TtsConfig) -> MockTtsSession:
        session = CrashingSession(self._clock, self.config, config, "crashing-tts", self.config.latency.delays())
        self.sessions.append(session)
        return session


async def run(clock: SimClock, tts: MockTts, scenario_seconds: float = 12.0,
              observer: CallObserver | None = None) -> tuple[CallFailed | None, list[Heard], float]:
    """Two turns; returns the failure (if any), what the client heard, and when the call ended."""
    scenario = (ScenarioBuilder().pause(0.5).say("book a table").pause(3.0).say("for two please")
                .pause(scenario_seconds).build())
    llm = ScriptedLlm(clock, [[Say("Sure, for how many?")], [Say("Two, done.")]])
    providers = Providers(stt=MockStt.for_scenario(clock, scenario), llm=llm, tts=tts, vad=energy_vad)
    heard: list[Heard] = []
    baseline = live_tasks()
    async with LoopbackTransport(clock) as transport, TaskScope("sim") as scope:
        client = await transport.connect(metadata={"sample_rate": str(RATE)})
        session = await TransportSession.open(clock, await transport.accept())

        async def engine() -> CallFailed | None:
            try:
                await run_call(session, EngineConfig(turn=FixedSilence(silence=0.5)), providers, clock,
                               observer=observer)
            except CallFailed as exc:
                return exc
            return None

        call = scope.spawn(engine(), name="call")

        async def listen() -> None:
            with contextlib.suppress(ChannelClosed):
                while True:
                    heard.append(await client.recv())

        listener = scope.spawn(listen(), name="listener")
        start = clock.now()
        for i, pcm in enumerate(scenario.frames(0.02)):
            await clock.sleep_until(start + i * 0.02)
            if call.done():
                break
            await client.send_audio(pcm, RATE)
        if not call.done():
            await client.hangup()
        failed = await call
        ended = clock.now()
        await clock.sleep(0.1)  # what the call sent on its way out reaches the client
        listener.cancel()
    await wait_for_task_baseline(clock, baseline)
    return failed, heard, ended


async def test_a_tts_session_whose_send_text_raises_ends_the_call_with_an_error_the_client_and_the_log_see(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = SimClock()
    observer = CallObserver()
    with caplog.at_level(logging.DEBUG):
        failed, heard, ended = await run(clock, CrashingTts(clock, MockTtsConfig()), observer=observer)
    # The report says error, never ok.
    assert failed is not None
    failure = failed.report.failure
    assert failure is not None and failure.stage == "speak" and failure.error == "RuntimeError" and failure.fatal
    assert failed.report.failures == 1
    assert isinstance(failed.__cause__, RuntimeError)
    # One log line with the traceback and the call's id.
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1
    assert errors[0].exc_info is not None and "speak" in errors[0].getMessage()
    assert errors[0].getMessage().startswith("call loopback-")
    # The client hears why the call ends, right after the failure (not when it hangs up).
    [hangup] = [h.item for h in heard if isinstance(h.item, WireHangupOut)]
    assert isinstance(hangup, WireHangupOut) and hangup.failure is not None
    assert hangup.failure.kind is FailureKind.INTERNAL_ERROR  # a bug: no internals for the client
    assert failed.crashed  # the server counts the session as crashed
    second_turn_end = 0.5 + 1.0 + 3.0 + 1.5
    assert ended < second_turn_end + 2.0
    # The second reply never played: the context does not claim it was said.
    said = [m.text for m in failed.report.context.messages if isinstance(m, AssistantMessage)]
    assert said == ["Sure, for how many?"]
    assert any(isinstance(h.item, WireAudioOut) for h in heard)
    fatal = [e for e in iter(observer.try_get, None) if isinstance(e, EngineFailure)]
    assert [(e.stage, e.fatal) for e in fatal] == [("speak", True)]


async def test_a_call_whose_tts_cannot_connect_ends_with_an_error_for_the_client() -> None:
    clock = SimClock()
    failed, heard, _ = await run(clock, MockTts(clock, MockTtsConfig(fail_connect=ProviderErrorKind.CONNECT)),
                                 scenario_seconds=1.0)
    assert failed is not None and failed.report.failure is not None
    assert failed.report.failure.stage == "run_call" and failed.report.failure.error == "ProviderError"
    [hangup] = [h.item for h in heard if isinstance(h.item, WireHangupOut)]
    assert isinstance(hangup, WireHangupOut) and hangup.failure is not None
    assert hangup.failure.kind is FailureKind.CALL_FAILED and hangup.failure.message == "mock-tts: connect"
    assert not failed.crashed  # a provider's failure is an error, not a bug


class BuggyLlm(LlmProvider):
    """A model adapter with a bug: its stream raises something that is not a provider error."""

    @property
    def name(self) -> str:
        return "buggy-llm"

    def stream(self, request: LlmRequest) -> GeneratorLlmStream:
        async def events() -> AsyncGenerator[LlmEvent, None]:
            raise KeyError("a bug in the adapter")
            yield Done()  # pragma: no cover - makes this a generator

        return GeneratorLlmStream(self.name, events())


async def test_a_turn_whose_model_adapter_has_a_bug_gets_the_fallback_line_and_the_failure_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = SimClock()
    observer = CallObserver()
    scenario = ScenarioBuilder().pause(0.5).say("hello").pause(3.0).build()
    with caplog.at_level(logging.WARNING):
        result = await simulate(clock, scenario, BuggyLlm(), observer=observer)
    config = LlmConfig()
    assert [m.text for m in result.report.context.messages if isinstance(m, AssistantMessage)] == [
        config.fallback_line]
    assert result.report.failures == 1 and result.report.failure is None  # the call went on
    [logged] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert logged.exc_info is not None and "llm-runner" in logged.getMessage()
    failures = [e for e in iter(observer.try_get, None) if isinstance(e, EngineFailure)]
    assert [(e.stage, e.error, e.fatal) for e in failures] == [("llm-runner", "KeyError", False)]


class OnceTts(MockTts):
    """Connects once; its session drops mid-answer and every reconnect fails."""

    async def connect(self, config: TtsConfig) -> MockTtsSession:
        if self.sessions:
            raise ProviderError("once-tts", ProviderErrorKind.CONNECT, "gone for good")
        return await super().connect(config)


async def test_a_tts_that_drops_and_cannot_be_reopened_ends_the_call_with_an_error() -> None:
    clock = SimClock()
    failed, heard, ended = await run(clock, OnceTts(clock, MockTtsConfig(disconnect_after=0.5)))
    assert failed is not None and failed.report.failure is not None
    assert (failed.report.failure.stage, failed.report.failure.error) == ("tts-reader", "SpeechLost")
    [hangup] = [h.item for h in heard if isinstance(h.item, WireHangupOut)]
    assert isinstance(hangup, WireHangupOut) and hangup.failure is not None
    assert hangup.failure.kind is FailureKind.CALL_FAILED
    assert ended < 10.0  # not when the caller would have hung up (about 18 s)


async def test_a_bug_in_keeping_the_playout_record_ends_the_call_with_an_error_like_a_stage_failure(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Position reports reach TransportOut in the transport session's output task, outside the
    # pipeline: a bug there must still fail the call (logged once), not end the transport quietly.
    def broken(self: PlayoutBook, utterance: int, samples: int, sample_rate: int) -> Released:
        raise RuntimeError("a bug in the book")

    monkeypatch.setattr(PlayoutBook, "released", broken)
    clock = SimClock()
    with caplog.at_level(logging.DEBUG):
        failed, heard, _ = await run(clock, MockTts(clock, MockTtsConfig()))
    assert failed is not None and failed.crashed
    failure = failed.report.failure
    assert failure is not None and failure.stage == "transport-out" and failure.error == "RuntimeError"
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and errors[0].exc_info is not None
    [hangup] = [h.item for h in heard if isinstance(h.item, WireHangupOut)]
    assert isinstance(hangup, WireHangupOut) and hangup.failure is not None
