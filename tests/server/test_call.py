"""The engine endpoint in the real server stack (uvicorn, in-process) with mock providers.

About wiring: the call endpoint hands the transport's call to the engine, the engine's
events reach the client on the same socket after ``started``, the page's routes answer,
and the server drains after the call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import io
import json
import logging
import urllib.error
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from pydantic import BaseModel

import brisvox
from brisvox.agent.tools import DEFAULT_FILLER_TEXT, FillerConfig, FillerPolicy, Outcome, StaticClips
from brisvox.agent.turn import FixedSilence
from brisvox.audio.codec import AudioEncoding
from brisvox.audio.pcm import pcm16_to_array
from brisvox.audio.wav import WavAudio
from brisvox.core.clock import Clock, SimClock, SystemClock
from brisvox.core.errors import ConfigError, InvalidInput
from brisvox.core.frames import BusyStage, TurnEndReason
from brisvox.engine import Providers, SpeculationMode
from brisvox.engine import events as ev
from brisvox.inference.vad import VoiceActivityDetector, energy_vad
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.stt import SttConfig, SttProvider, SttSession
from brisvox.server.agent_file import load_agent_file, parse_agent_file
from brisvox.server.call import (
    EngineCall,
    EngineEndpoint,
    engine_config,
    engine_runner,
    event_message,
    filler_clips,
    metrics_listener,
    warm_request,
)
from brisvox.server.call_providers import CallProviders
from brisvox.server.demo import DEMO_AGENT_FILE, demo_tools
from brisvox.server.demo_llm import scripted_demo_llm
from brisvox.server.host import ServerParts, serve
from brisvox.server.lifecycle import StopRequests
from brisvox.server.metrics import ServerMetrics
from brisvox.server.page import page_routes
from brisvox.server.settings import Settings
from brisvox.server.tools import ToolSet
from brisvox.sim import Call, CallerScenario, MockStt, MockTts, Say, ScenarioBuilder, ScriptedLlm
from brisvox.transport import FailureKind, LoopbackTransport
from brisvox.transport.events import WireHangupOut
from brisvox.transport.websocket import ServerConfig
from brisvox.transport.websocket.client import ClientOptions, run


def get(url: str) -> tuple[int, str]:
    with urllib.request.urlopen(url, timeout=5) as r:
        return r.status, r.read().decode()


def test_the_engine_config_takes_the_agent_files_prompt_turn_policy_and_interruption_policy() -> None:
    agent = load_agent_file(DEMO_AGENT_FILE, available_tools=demo_tools())
    config = engine_config(agent)
    assert config.llm.system_prompt.startswith("You are the phone assistant of Lokanta Deniz")
    assert config.turn == agent.turn and config.interruption == agent.interruption
    assert config.speculation is SpeculationMode.OFF and config.llm.greeting == agent.greeting


def test_the_llms_temperature_and_max_tokens_options_reach_the_engines_llm_settings() -> None:
    text = ("[agent]\nname = \"a\"\nprompt = \"p\"\n\n[llm]\nprovider = \"ollama\"\n"
            "options = { model = \"qwen3\", temperature = 0, max_tokens = 120 }\n")
    config = engine_config(parse_agent_file(text))
    assert (config.llm.temperature, config.llm.max_tokens) == (0.0, 120)
    demo = engine_config(load_agent_file(DEMO_AGENT_FILE, available_tools=demo_tools()))
    assert (demo.llm.temperature, demo.llm.max_tokens) == (None, None)  # unset: the provider's own


@pytest.mark.parametrize(("section", "expected"), [
    ("", FillerConfig.DEFAULT),
    ("[filler]\nenabled = false\n", FillerConfig.OFF),
    ("[filler]\ndelay = 2.5\n", FillerConfig(delay=2.5)),
    ("[filler]\nper_tool = true\n", FillerConfig.PER_TOOL),
], ids=["default", "off", "delay", "per tool"])
def test_the_agent_files_filler_section_decides_the_engines_filler_policy(section: str, expected: FillerConfig) -> None:
    text = "[agent]\nname = \"a\"\nprompt = \"p\"\n\n" + section
    assert engine_config(parse_agent_file(text)).llm.filler == expected


def test_the_agent_files_filler_phrases_are_what_its_fillers_say_in_turn() -> None:
    text = ("[agent]\nname = \"a\"\nprompt = \"p\"\n\n[filler]\n"
            "phrases = [\"Bir saniye lütfen.\", \" Hemen bakıyorum. \"]\n")
    definition = parse_agent_file(text)
    policy = FillerPolicy.from_config(engine_config(definition).llm.filler)
    said = [choice.text for choice in (policy.choose("t") for _ in range(3)) if choice is not None]
    assert said == ["Bir saniye lütfen.", "Hemen bakıyorum.", "Bir saniye lütfen."]
    default = parse_agent_file("[agent]\nname = \"a\"\nprompt = \"p\"\n")
    first = FillerPolicy.from_config(engine_config(default).llm.filler).choose("t")
    assert first is not None and first.text == DEFAULT_FILLER_TEXT


def test_prerendered_fillers_name_their_clips_and_get_a_clip_cache_only_when_asked_and_enabled() -> None:
    base = "[agent]\nname = \"a\"\nprompt = \"p\"\n\n[filler]\nphrases = [\"One.\", \"Two.\"]\n"
    clock = SystemClock()
    for extra, cached in (("prerender = true\n", True), ("", False)):
        definition = parse_agent_file(base + extra)
        config = engine_config(definition)
        cache = filler_clips(config, MockTts(clock), clock)
        assert (cache is not None) is cached
        choice = FillerPolicy.from_config(config.llm.filler).with_clips(StaticClips(["filler-0", "filler-1"])).choose("t")
        assert choice is not None and choice.clip == ("filler-0" if cached else None)


def test_an_agent_file_that_enables_speculation_gets_speculative_starts(tmp_path: Path) -> None:
    text = DEMO_AGENT_FILE.read_text()
    assert "[speculation]" not in text
    path = tmp_path / "agent.toml"
    path.write_text(text + "\n[speculation]\nenabled = true\n")
    agent = load_agent_file(path, available_tools=demo_tools())
    assert engine_config(agent).speculation is SpeculationMode.AT_PAUSE


def scripted_providers(clock: Clock, scenario: CallerScenario, tts: MockTts) -> CallProviders:
    """The demo's scripted model with the mock STT hearing ``scenario`` and ``tts``."""
    return CallProviders(
        providers=Providers(stt=MockStt.for_scenario(clock, scenario), llm=scripted_demo_llm(clock), tts=tts,
                            vad=energy_vad),
        llm_label="scripted (test)", vad_label="energy",
    )


@pytest.mark.realtime
async def test_a_call_on_the_engine_endpoint_books_through_the_tools_and_its_events_follow_started() -> None:
    clock = SystemClock()
    tools = demo_tools()
    agent = load_agent_file(DEMO_AGENT_FILE, available_tools=tools)
    scenario = ScenarioBuilder().pause(0.4).say("a table for four tomorrow at seven").pause(3.0).build()
    providers = scripted_providers(clock, scenario, MockTts(clock))
    endpoint = EngineEndpoint(clock, ServerConfig(path="/ws"))
    metrics = ServerMetrics(tool_names=tools.names())
    parts = ServerParts(runner=engine_runner(agent, tools, clock, providers, metrics), call_endpoint=endpoint,
                        on_stop_calls=endpoint.close, extra_routes=tuple(page_routes(providers.page_info(agent))),
                        metrics=metrics)
    stops = StopRequests()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    out = io.StringIO()
    server = asyncio.ensure_future(serve(Settings(port=0, max_calls=2), parts, clock=clock, stops=stops,
                                         out=out, on_ready=ready.set_result))
    try:
        port = await asyncio.wait_for(ready, 20)
        base = f"http://127.0.0.1:{port}"
        loop = asyncio.get_running_loop()
        status, page = await loop.run_in_executor(None, get, f"{base}/")
        assert status == 200 and 'id="talk"' in page
        status, info = await loop.run_in_executor(None, get, f"{base}/agent.json")
        assert json.loads(info)["llm"] == "scripted (test)"
        status, script = await loop.run_in_executor(None, get, f"{base}/static/app.js")
        assert status == 200 and "AudioWorkletNode" in script
        audio = WavAudio(b"".join(scenario.frames(0.02)), scenario.sample_rate)
        result = await run(ClientOptions(url=f"ws://127.0.0.1:{port}/ws", audio=audio, linger=3.0), clock)
        _, exported = await loop.run_in_executor(None, get, f"{base}/metrics")
    finally:
        stops.request("test stop")
        code = await asyncio.wait_for(server, 30)
    assert result.ok, result.failure
    kinds = [e["kind"] for e in result.events]
    assert kinds[0] == "call_info"
    calls = [e for e in result.events if e["kind"] == "tool_call"]
    assert calls and calls[0]["name"] == "check_availability"
    assert json.loads(calls[0]["arguments"])["time"] == "19:00"
    reply = "".join(e["text"] for e in result.events if e["kind"] == "bot_text")
    assert "is free for 4" in reply
    assert len(result.recording) > 0
    assert code == 0
    turns = sum(1 for e in result.events if e["kind"] == "latency")
    assert f"brisvox_turns_total {float(turns)}" in exported
    assert 'brisvox_tool_calls_total{outcome="ok",tool="check_availability"} 1.0' in exported
    assert f'brisvox_turn_latency_seconds_count{{stage="voice_to_voice"}} {float(turns)}' in exported


def test_the_metrics_listener_counts_a_latency_as_a_turn_a_settled_tool_by_its_outcome_and_a_failure() -> None:
    metrics = ServerMetrics(tool_names=("book_table",))
    listen = metrics_listener(metrics)
    listen(ev.TurnLatency(epoch=1, at=2.0, speech_end_to_audio=0.64, speech_end_to_turn_end=None,
                          turn_end_to_audio=0.09, turn_end_to_first_token=None, turn_end_reason=TurnEndReason.MODEL))
    listen(ev.ToolCallSettled(epoch=1, at=2.0, call_id="t1", name="book_table",
                              outcome=Outcome.CONFIRMATION_REQUIRED, content="{}", is_error=False))
    listen(ev.BotText(epoch=1, at=2.0, round=0, text="hello"))
    listen(ev.EngineFailure(epoch=1, at=2.0, stage="llm-runner", error="KeyError", fatal=False))
    text = metrics.render().decode()
    assert "brisvox_turns_total 1.0" in text
    assert 'brisvox_turn_latency_seconds_sum{stage="voice_to_voice"} 0.64' in text
    assert 'brisvox_turn_latency_seconds_count{stage="turn_end_to_audio"} 1.0' in text
    assert 'stage="llm_first_token"' not in text  # not measured, not observed
    assert 'brisvox_tool_calls_total{outcome="confirmation_required",tool="book_table"} 1.0' in text
    assert 'brisvox_engine_failures_total{fatal="false",stage="llm-runner"} 1.0' in text


def test_the_metrics_listener_counts_each_model_busy_event_by_stage() -> None:
    metrics = ServerMetrics()
    listen = metrics_listener(metrics)
    listen(ev.ModelBusy(epoch=1, at=2.0, stage=BusyStage.VAD, provider="vad"))
    listen(ev.ModelBusy(epoch=1, at=2.5, stage=BusyStage.STT, provider="local-whisper"))
    text = metrics.render().decode()
    assert 'brisvox_model_busy_total{stage="voice_activity"} 1.0' in text
    assert 'brisvox_model_busy_total{stage="speech_to_text"} 1.0' in text
    assert 'brisvox_model_busy_total{stage="text_to_speech"} 0.0' in text
    busy_vad = event_message(ev.ModelBusy(epoch=1, at=2.0, stage=BusyStage.VAD, provider="vad"))
    assert busy_vad is not None and busy_vad["code"] == "voice_activity_busy"


def test_each_engine_event_the_client_sees_has_its_documented_shape() -> None:
    def message(event: ev.EngineEvent) -> dict[str, object] | None:
        return event_message(event)

    assert message(ev.UserTranscript(epoch=2, at=1.23456, text="hi", final=True)) == {
        "type": "event", "kind": "user_transcript", "epoch": 2, "at": 1.235, "text": "hi", "final": True}
    assert message(ev.TurnStarted(epoch=3, at=1.0, barge_in=True)) == {
        "type": "event", "kind": "interrupted", "epoch": 3, "at": 1.0}
    assert message(ev.TurnStarted(epoch=3, at=1.0)) is None
    assert message(ev.FillerStarted(epoch=2, at=1.0, round=0, tool="")) == {
        "type": "event", "kind": "filler", "epoch": 2, "at": 1.0, "round": 0, "tool": ""}
    assert message(ev.ToolCallSettled(epoch=1, at=1.0, call_id="t1", name="book", outcome=Outcome.TIMED_OUT,
                                      content="x" * 600, is_error=True)) == {
        "type": "event", "kind": "tool_result", "epoch": 1, "at": 1.0, "id": "t1", "name": "book",
        "outcome": "timed_out", "content": "x" * 499 + "…"}
    latency = message(ev.TurnLatency(epoch=1, at=5.0, speech_end_to_audio=0.7, speech_end_to_turn_end=0.5,
                                     turn_end_to_audio=0.2, turn_end_to_first_token=None,
                                     turn_end_reason=TurnEndReason.SILENCE))
    assert latency == {"type": "event", "kind": "latency", "epoch": 1, "at": 5.0, "speech_end_to_audio_ms": 700.0,
                       "speech_end_to_turn_end_ms": 500.0, "turn_end_to_audio_ms": 200.0,
                       "turn_end_reason": "silence"}
    assert message(ev.BotAudible(epoch=1, at=5.0)) is None
    assert message(ev.ModelBusy(epoch=2, at=3.0, stage=BusyStage.STT, provider="local-whisper")) == {
        "type": "event", "kind": "error", "epoch": 2, "at": 3.0, "code": "speech_to_text_busy",
        "message": "local-whisper is at capacity: your words could not be transcribed"}
    busy_tts = message(ev.ModelBusy(epoch=2, at=3.0, stage=BusyStage.TTS, provider="local-hibari"))
    assert busy_tts is not None and busy_tts["code"] == "text_to_speech_busy"


def test_the_demo_agent_names_auto_and_auto_takes_a_configured_endpoint_first_and_the_scripted_host_last() -> None:
    from brisvox.server.call_providers import choose_llm

    agent = load_agent_file(DEMO_AGENT_FILE, available_tools=demo_tools())
    assert agent.llm.provider == "auto"
    clock = SystemClock()
    _, label = choose_llm(agent, clock, {"BRISVOX_LLM_BASE_URL": "http://127.0.0.1:9/v1", "BRISVOX_LLM_MODEL": "m",
                                         "OPENAI_API_KEY": "k"})
    assert label == "auto: openai (m at http://127.0.0.1:9/v1); BRISVOX_LLM_BASE_URL is set"
    _, label = choose_llm(agent, clock, {"OPENAI_API_KEY": "k"})
    assert label == "auto: openai (gpt-4o-mini); OPENAI_API_KEY is set"
    _, label = choose_llm(agent, clock, {"BRISVOX_LLM_SCRIPTED": "1"})
    assert label.startswith("auto: scripted (")


async def test_prerendered_fillers_render_in_the_first_call_and_play_as_clips_in_the_next(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = SimClock()
    tools = ToolSet()

    @tools.read_only
    async def lookup() -> object:
        """Look something up."""
        await clock.sleep(3.0)
        return {"found": True}

    agent = parse_agent_file('[agent]\nname = "a"\nprompt = "p"\ntools = ["lookup"]\n\n'
                             '[filler]\nphrases = ["Un momento."]\nprerender = true\n', available_tools={"lookup"})
    scenario = ScenarioBuilder().pause(0.4).say("look it up please").pause(7.0).build()
    llm = ScriptedLlm(clock, [[Call(name="lookup", arguments={})], [Say("Found it.")]] * 2)
    providers = CallProviders(
        providers=Providers(stt=MockStt.for_scenario(clock, scenario), llm=llm, tts=MockTts(clock), vad=energy_vad),
        llm_label="scripted (test)", vad_label="energy",
    )
    runner = engine_runner(agent, tools, clock, providers)

    async def no_text(_: str) -> None:
        return None

    caplog.set_level(logging.INFO, logger="brisvox.server.call")
    async with LoopbackTransport(clock) as transport:
        for _ in range(2):
            client = await transport.connect(metadata={"sample_rate": "16000"})
            call = asyncio.ensure_future(runner(EngineCall(await transport.accept(), no_text), asyncio.Event()))
            for pcm in scenario.frames(0.02):
                await client.send_audio(pcm)
                await clock.sleep(0.02)
            await client.hangup()
            await call
    ended = [r.getMessage() for r in caplog.records if "ended" in r.getMessage()]
    assert len(ended) == 2
    assert "1 fillers (0 clips)" in ended[0] and "1 fillers (1 clips)" in ended[1]


# --- failures reach the caller; every rate works; the server's keys win -------------------------

SHORT_AGENT = ('[agent]\nname = "a"\nprompt = "p"\ngreeting = "Hello there."\n\n'
               '[turn]\npolicy = "fixed_silence"\nsilence = 0.5\n')


class Unreachable:
    """An STT whose connect fails as told (a provider down at call start, or a bug)."""

    name = "unreachable-stt"

    def __init__(self, error: Exception) -> None:
        self.error = error

    async def warm(self) -> None:
        return None

    async def connect(self, config: SttConfig) -> SttSession:
        raise self.error


class Only16k:
    """An STT that takes 16 kHz only, as the local Whisper does."""

    name = "only-16k-stt"

    def __init__(self, inner: MockStt) -> None:
        self.inner = inner
        self.rates: list[int] = []

    async def warm(self) -> None:
        return None

    async def connect(self, config: SttConfig) -> SttSession:
        self.rates.append(config.sample_rate)
        if config.sample_rate != 16000:
            raise ConfigError(f"only-16k-stt: sample_rate must be 16000, got {config.sample_rate}")
        return await self.inner.connect(config)


def vad_8k_16k(rate: int) -> VoiceActivityDetector:
    """A VAD that reads 8 or 16 kHz only, as Silero does."""
    if rate not in (8000, 16000):
        raise ConfigError(f"the VAD runs at 16000 or 8000 Hz, got {rate}")
    return energy_vad(rate)


@contextlib.asynccontextmanager
async def serving(stt: SttProvider, *, max_calls: int = 2) -> AsyncIterator[tuple[str, ServerMetrics]]:
    """``serve`` on 127.0.0.1 with the engine endpoint, SHORT_AGENT and ``stt``; yields the base URL."""
    clock = SystemClock()
    agent = parse_agent_file(SHORT_AGENT)
    providers = CallProviders(
        providers=Providers(stt=stt, llm=ScriptedLlm(clock, [[Say("Sure.")]] * 4), tts=MockTts(clock),
                            vad=vad_8k_16k),
        llm_label="scripted (test)", vad_label="energy",
    )
    endpoint = EngineEndpoint(clock, ServerConfig(path="/ws"))
    metrics = ServerMetrics()
    parts = ServerParts(runner=engine_runner(agent, ToolSet(), clock, providers, metrics), call_endpoint=endpoint,
                        on_stop_calls=endpoint.close, metrics=metrics)
    stops = StopRequests()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(serve(Settings(port=0, max_calls=max_calls), parts, clock=clock, stops=stops,
                                         out=io.StringIO(), on_ready=ready.set_result))
    try:
        port = await asyncio.wait_for(ready, 20)
        yield f"127.0.0.1:{port}", metrics
    finally:
        stops.request("test stop")
        await asyncio.wait_for(server, 30)


def peak(pcm: bytearray) -> int:
    return int(abs(pcm16_to_array(bytes(pcm)).astype("int32")).max()) if pcm else 0


async def readyz(base: str) -> dict[str, object]:
    loop = asyncio.get_running_loop()

    def fetch() -> dict[str, object]:
        try:
            with urllib.request.urlopen(f"http://{base}/readyz", timeout=5) as r:
                return dict(json.loads(r.read()))
        except urllib.error.HTTPError as exc:
            return dict(json.loads(exc.read()))

    return await loop.run_in_executor(None, fetch)


# Each test raises an error of its own: an instance made at import would keep its traceback (the
# failed call's frames, its engine and turn machine) alive for the rest of the session.
@pytest.mark.realtime
@pytest.mark.parametrize(("error", "code", "outcome"), [
    (lambda: ProviderError("deepgram", ProviderErrorKind.CONNECT, "refused (token sk-secret)"), "call_failed", "error"),
    (lambda: RuntimeError("a bug"), "internal_error", "crashed"),
], ids=["provider-unreachable", "crash"])
async def test_a_call_whose_session_fails_at_its_start_hears_why_and_is_closed_with_1011_and_counted(
    error: Callable[[], Exception], code: str, outcome: str,
) -> None:
    async with serving(Unreachable(error())) as (base, metrics):
        audio = WavAudio(bytes(3200), 16000)
        result = await asyncio.wait_for(
            run(ClientOptions(url=f"ws://{base}/ws", audio=audio, realtime=False, linger=5.0), SystemClock()), 15)
        assert [e["code"] for e in result.errors] == [code]
        assert "sk-secret" not in json.dumps(result.errors)  # a vendor's text stays in the log
        assert (result.stop_reason, result.close_code) == ("error", 1011)
        for _ in range(100):
            ready = await readyz(base)
            if ready["active"] == 0:
                break
            await asyncio.sleep(0.02)
        assert (ready["active"], ready["reserved"]) == (0, 0)
        assert f'brisvox_calls_ended_total{{outcome="{outcome}"}} 1.0' in metrics.render().decode()


@pytest.mark.realtime
@pytest.mark.parametrize(("rate", "encoding"), [
    (8000, AudioEncoding.MULAW), (8000, AudioEncoding.PCM16), (24000, AudioEncoding.PCM16),
    (48000, AudioEncoding.MULAW),
], ids=["8k-mulaw", "8k-pcm16", "24k-pcm16", "48k-mulaw"])
async def test_a_call_at_every_documented_rate_and_encoding_works_with_a_16khz_only_stt_and_vad(
    rate: int, encoding: AudioEncoding,
) -> None:
    clock = SystemClock()
    scenario = ScenarioBuilder(sample_rate=rate).pause(2.0).say("a table for two").pause(1.5).build()
    stt = Only16k(MockStt.for_scenario(clock, scenario))
    async with serving(stt) as (base, _):
        audio = WavAudio(b"".join(scenario.frames(0.02)), rate)
        result = await asyncio.wait_for(
            run(ClientOptions(url=f"ws://{base}/ws", audio=audio, encoding=encoding, linger=1.5), clock), 30)
    assert result.ok and not result.errors, (result.failure, result.errors)
    assert stt.rates == [16000]
    assert result.sample_rate == rate and peak(result.recording) > 1000
    said = [e["text"] for e in result.events if e["kind"] == "user_turn"]
    assert said == ["a table for two"]


@pytest.mark.realtime
async def test_a_clients_output_sample_rate_cannot_change_the_rate_the_bot_speaks_at() -> None:
    async with serving(Only16k(MockStt(SystemClock()))) as (base, _):
        audio = WavAudio(bytes(32000 * 2), 16000)
        result = await asyncio.wait_for(run(ClientOptions(
            url=f"ws://{base}/ws", audio=audio, realtime=False, linger=1.5,
            metadata={"output_sample_rate": "8000", "sample_rate": "48000"}), SystemClock()), 15)
    assert result.ok and not result.errors, (result.failure, result.errors)
    assert peak(result.recording) > 1000  # the greeting, at the call's rate


async def test_a_malformed_rate_in_the_calls_metadata_ends_the_call_with_an_error_naming_it() -> None:
    clock = SimClock()
    agent = parse_agent_file(SHORT_AGENT)
    providers = CallProviders(
        providers=Providers(stt=MockStt(clock), llm=ScriptedLlm(clock, []), tts=MockTts(clock), vad=energy_vad),
        llm_label="scripted (test)", vad_label="energy",
    )
    runner = engine_runner(agent, ToolSet(), clock, providers)

    async def no_text(_: str) -> None:
        return None

    async with LoopbackTransport(clock) as transport:
        client = await transport.connect(metadata={"sample_rate": "fast"})
        call = asyncio.ensure_future(runner(EngineCall(await transport.accept(), no_text), asyncio.Event()))
        heard = await client.read_until_hangup(within=5.0)
        with pytest.raises(InvalidInput):
            await call
    hangup = heard[-1].item
    assert isinstance(hangup, WireHangupOut) and hangup.failure is not None
    assert hangup.failure.kind is FailureKind.CALL_FAILED and "sample_rate='fast'" in hangup.failure.message


@pytest.mark.realtime
async def test_a_client_that_vanishes_mid_call_gives_its_slot_back_once_its_session_ended() -> None:
    from websockets.asyncio.client import connect

    async with serving(Only16k(MockStt(SystemClock())), max_calls=1) as (base, metrics):
        ws = await connect(f"ws://{base}/ws", compression=None)
        await ws.send(json.dumps({"type": "start", "encoding": "pcm16", "sample_rate": 16000}))
        assert json.loads(await ws.recv())["type"] == "started"
        assert (await readyz(base))["active"] == 1
        ws.transport.abort()  # no close frame: the client is gone
        for _ in range(200):
            ready = await readyz(base)
            if ready["active"] == 0:
                break
            await asyncio.sleep(0.02)
        assert (ready["active"], ready["reserved"], ready["ready"]) == (0, 0, True)
        assert 'brisvox_calls_ended_total{outcome="ok"} 1.0' in metrics.render().decode()


async def test_a_call_that_fails_ends_the_session_as_an_error_and_is_counted_in_the_metrics() -> None:
    from brisvox.engine import CallFailed
    from brisvox.providers.errors import ProviderErrorKind
    from brisvox.sim import MockTtsConfig
    from brisvox.transport import LoopbackTransport

    clock = SimClock()
    tools = demo_tools()
    agent = load_agent_file(DEMO_AGENT_FILE, available_tools=tools)
    scenario = ScenarioBuilder().pause(0.4).say("hello").pause(1.0).build()
    providers = scripted_providers(clock, scenario, MockTts(clock, MockTtsConfig(fail_connect=ProviderErrorKind.CONNECT)))
    metrics = ServerMetrics()
    runner = engine_runner(agent, tools, clock, providers, metrics)
    sent: list[str] = []

    async def send_text(text: str) -> None:
        sent.append(text)

    async with LoopbackTransport(clock) as transport:
        client = await transport.connect(metadata={"sample_rate": "16000"})
        link = await transport.accept()
        with pytest.raises(CallFailed, match="failed in run_call"):
            await runner(EngineCall(link, send_text), asyncio.Event())
        heard = await client.read_until_hangup(within=1.0)
    hangup = heard[-1].item
    assert isinstance(hangup, WireHangupOut) and hangup.failure is not None
    assert (hangup.failure.kind, hangup.failure.message) == (FailureKind.CALL_FAILED, "mock-tts: connect")
    assert 'brisvox_engine_failures_total{fatal="true",stage="run_call"} 1.0' in metrics.render().decode()
    assert any('"kind":"engine_failure"' in text for text in sent)


async def test_a_served_call_hands_its_tools_the_transports_screen_and_the_calls_description() -> None:
    class Shown:
        def __init__(self) -> None:
            self.actions: list[object] = []

        def dispatch(self, action: BaseModel, /) -> None:
            self.actions.append(action)

    class ShowMenu(BaseModel):
        section: str

    seen: list[brisvox.ToolContext] = []

    @brisvox.tool.read_only
    async def show_menu(section: str, ctx: brisvox.ToolContext) -> str:
        """Put a section of the menu on the caller's screen."""
        seen.append(ctx)
        ctx.dispatch(ShowMenu(section=section))
        return "shown"

    agent = brisvox.Agent(name="host", prompt="p", tools=[show_menu])
    clock = SimClock()
    llm = ScriptedLlm(clock, [[Call(name="show_menu", arguments={"section": "desserts"})], [Say("On your screen.")]])
    providers = CallProviders(providers=Providers(stt=MockStt(clock), llm=llm, tts=MockTts(clock), vad=energy_vad),
                              llm_label="scripted (test)", vad_label="energy")
    runner = engine_runner(agent.definition(), agent.toolset(), clock, providers)
    screen = Shown()

    async def no_text(_: str) -> None:
        return None

    async with LoopbackTransport(clock) as transport:
        client = await transport.connect(metadata={"sample_rate": "16000", "customer": "c-7"})
        call = asyncio.ensure_future(runner(EngineCall(await transport.accept(), no_text, ui=screen),
                                            asyncio.Event()))
        await client.send_text("show me the desserts")
        for _ in range(200):  # ten seconds of call time
            if screen.actions:
                break
            await clock.sleep(0.05)
        await client.hangup()
        await call
    assert screen.actions == [ShowMenu(section="desserts")]
    (ctx,) = seen
    assert (ctx.meta.agent, ctx.meta.transport, ctx.meta.parameters["customer"]) == ("host", "loopback", "c-7")
async def test_the_warm_request_begins_exactly_as_the_engines_first_request_for_the_demo_agent() -> None:
    from tests.engine.harness import simulate

    clock = SimClock()
    tools = demo_tools()
    definition = load_agent_file(DEMO_AGENT_FILE, available_tools=tools)
    llm = ScriptedLlm(clock, [[Say("Hello!")]])
    scenario = ScenarioBuilder().pause(0.5).say("hello").pause(2.0).build()
    config = dataclasses.replace(engine_config(definition), turn=FixedSilence(silence=0.5), listen_rate=None)
    await simulate(clock, scenario, llm, config=config,
                   tools=tools.registry(definition.tools, definition.confirm_tools))
    warm = warm_request(definition, tools, clock.wall().date())
    assert warm is not None
    first = llm.requests[-1]
    assert warm.messages[0] == first.messages[0]  # the prompt with the date line: the same bytes
    assert warm.tools == first.tools and warm.described == first.described  # the prompt describes the same tools
