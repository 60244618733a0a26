"""The providers ``brisvox serve`` builds from an agent file: which adapter each stage gets.

Construction only: building a cloud adapter opens no connection, so no network is needed.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from brisvox.agent import SystemMessage, UserMessage
from brisvox.core.clock import SystemClock
from brisvox.core.errors import ConfigError
from brisvox.engine import Providers
from brisvox.inference.vad import VadParams, energy_vad
from brisvox.providers.cloud.cartesia import CartesiaTts
from brisvox.providers.cloud.deepgram import DeepgramStt
from brisvox.providers.cloud.openai_compat import OpenAiCompatLlm
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.llm import LlmProvider, LlmRequest, LlmStream
from brisvox.providers.resampling import ResamplingTts
from brisvox.providers.tts import TtsConfig, TtsProvider, TtsSession
from brisvox.server.agent_file import AgentDefinition, parse_agent_file
from brisvox.server.call_providers import CallProviders, build_call_providers, choose_llm, close_all
from brisvox.sim import MockStt, MockTts

BASE = """\
[agent]
name = "front-desk"
prompt = "You answer the phone."
"""

CLOUD = BASE + """
[stt]
provider = "deepgram"
api_key_env = "DG_KEY"
options = { model = "nova-2", endpointing_ms = 250 }

[tts]
provider = "cartesia"
api_key_env = "CARTESIA_KEY"

[tts.options]
model = "sonic-turbo"
voice = "a-voice-id"
"""

KEYS = {"DG_KEY": "dg-secret", "CARTESIA_KEY": "ca-secret", "EL_KEY": "el-secret", "OA_KEY": "oa-secret"}
NO_LLM = {"BRISVOX_LLM_SCRIPTED": "1"}


def agent(text: str) -> AgentDefinition:
    return parse_agent_file(text, source=Path("agent.toml"), environ=KEYS)


@pytest.fixture
def built() -> Iterator[list[CallProviders]]:
    out: list[CallProviders] = []
    yield out
    import asyncio

    for providers in out:
        asyncio.run(providers.aclose())


def build(text: str, built: list[CallProviders]) -> CallProviders:
    providers = build_call_providers(agent(text), SystemClock(), NO_LLM)
    built.append(providers)
    return providers


def tts_section(provider: str, key_env: str, options: str = "") -> str:
    return BASE + f'\n[tts]\nprovider = "{provider}"\napi_key_env = "{key_env}"\n{options}'


def test_an_agent_with_deepgram_and_cartesia_gets_those_adapters_with_its_options(built: list[CallProviders]) -> None:
    p = build(CLOUD, built)
    stt, tts = p.providers.stt, p.providers.tts
    assert isinstance(stt, DeepgramStt) and isinstance(tts, CartesiaTts)
    assert "nova-2" in repr(stt) and "sonic-turbo" in repr(tts)
    assert "dg-secret" not in repr(stt) and "ca-secret" not in repr(tts)


def test_the_page_reports_the_stt_and_tts_the_agent_runs(built: list[CallProviders]) -> None:
    info = build(CLOUD, built).page_info(agent(CLOUD))
    assert (info["stt"], info["tts"]) == ("deepgram", "cartesia")


def test_a_cloud_agent_is_built_without_the_local_models(built: list[CallProviders],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "brisvox.providers.local", None)  # importing it now fails
    p = build(CLOUD, built)
    assert isinstance(p.providers.stt, DeepgramStt)


def test_elevenlabs_and_openai_speech_are_built_from_their_options(built: list[CallProviders]) -> None:
    el = build(tts_section("elevenlabs", "EL_KEY", "options = { voice = \"v1\", stability = 1 }\n"), built)
    oa = build(tts_section("openai", "OA_KEY", "options = { voice = \"nova\", instructions = \"calm\" }\n"), built)
    assert (el.providers.tts.name, oa.providers.tts.name) == ("elevenlabs", "openai-speech")
    assert isinstance(oa.providers.tts, ResamplingTts)


def test_openai_speech_without_a_key_is_built_for_a_compatible_server(built: list[CallProviders]) -> None:
    text = BASE + '\n[tts]\nprovider = "openai"\noptions = { base_url = "http://127.0.0.1:9/v1" }\n'
    assert build(text, built).providers.tts.name == "openai-speech"


def test_the_llms_base_url_and_model_reach_the_openai_compatible_adapter_but_not_its_request_options() -> None:
    text = BASE + """
[llm]
provider = "vllm"

[llm.options]
model = "qwen3-8b"
base_url = "http://10.0.0.5:8000/v1"
temperature = 0.4
max_tokens = 200
"""
    llm, label = choose_llm(agent(text), SystemClock(), {})
    assert isinstance(llm, OpenAiCompatLlm) and label == "vllm (qwen3-8b at http://10.0.0.5:8000/v1)"
    assert repr(llm) == "OpenAiCompatLlm(preset='vllm', model='qwen3-8b', base_url='http://10.0.0.5:8000/v1')"


def test_an_anthropic_llm_takes_its_adapter_options_and_its_key() -> None:
    text = BASE + """
[llm]
provider = "anthropic"
api_key_env = "AN_KEY"
options = { model = "claude-x", base_url = "http://127.0.0.1:9", thinking_budget = 2048 }
"""
    definition = parse_agent_file(text, source=Path("agent.toml"), environ={"AN_KEY": "an-secret"})
    llm, label = choose_llm(definition, SystemClock(), {})
    assert label == "anthropic (claude-x at http://127.0.0.1:9)" and "an-secret" not in repr(llm)
    without_key = parse_agent_file(text, source=Path("agent.toml"))
    with pytest.raises(ConfigError, match=r"llm provider 'anthropic' needs its key in the environment variable AN_KEY"):
        choose_llm(without_key, SystemClock(), {})


def test_local_stt_and_tts_stay_the_default(built: list[CallProviders]) -> None:
    p = build(BASE, built)
    assert (p.providers.stt.name, p.providers.tts.name) == ("local-whisper", "local-hibari")
    assert (p.page_info(agent(BASE))["stt"], p.page_info(agent(BASE))["tts"]) == ("local-whisper", "local-hibari")


def test_a_missing_transport_library_names_the_extra_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "brisvox.providers.cloud.cartesia", None)
    with pytest.raises(ConfigError, match=r"tts provider 'cartesia' needs the 'cartesia' extra"):
        build_call_providers(agent(CLOUD), SystemClock(), NO_LLM)


def test_a_cloud_provider_checked_without_its_key_is_refused() -> None:
    definition = parse_agent_file(CLOUD, source=Path("agent.toml"))  # no environment: no key read
    with pytest.raises(ConfigError, match=r"stt provider 'deepgram' needs its key in the environment variable DG_KEY"):
        build_call_providers(definition, SystemClock(), NO_LLM)


class _Recording:
    """A TTS provider that records the rate each session was asked for."""

    def __init__(self) -> None:
        self.inner = MockTts(SystemClock())
        self.rates: list[int] = []

    @property
    def name(self) -> str:
        return "recording"

    async def warm(self) -> None:
        return None

    async def connect(self, config: TtsConfig) -> TtsSession:
        self.rates.append(config.sample_rate)
        return await self.inner.connect(config)


async def test_a_resampling_tts_passes_a_rate_its_provider_speaks_straight_through() -> None:
    inner = _Recording()
    tts: TtsProvider = ResamplingTts(inner, 24_000, direct=(8_000, 16_000))
    for rate in (16_000, 48_000):
        session = await tts.connect(TtsConfig(sample_rate=rate))
        await session.aclose()
    assert inner.rates == [16_000, 24_000]


def test_a_named_llm_runs_as_named_whatever_llm_variables_the_environment_holds() -> None:
    env = {"OPENAI_API_KEY": "sk-env-0123456789", "ANTHROPIC_API_KEY": "an-env", "BRISVOX_LLM_BASE_URL": "http://x/v1"}
    scripted = agent(BASE + '\n[llm]\nprovider = "scripted"\n')
    llm, label = choose_llm(scripted, SystemClock(), env)
    assert not isinstance(llm, OpenAiCompatLlm) and label.startswith("scripted (")
    # No [llm] section: the documented default (scripted), not what the environment offers.
    llm, label = choose_llm(agent(BASE), SystemClock(), env)
    assert not isinstance(llm, OpenAiCompatLlm) and label.startswith("scripted (")


def test_a_named_vllm_without_api_key_env_sends_no_key_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VLLM_API_KEY", "vllm-env-0123456789")
    llm, _ = choose_llm(agent(BASE + '\n[llm]\nprovider = "vllm"\n'), SystemClock(), {"VLLM_API_KEY": "x"})
    assert isinstance(llm, OpenAiCompatLlm) and llm._options.api_key is None  # no Authorization header


def test_auto_takes_the_first_llm_the_environment_offers_in_the_documented_order() -> None:
    auto = agent(BASE + '\n[llm]\nprovider = "auto"\n')
    llm, label = choose_llm(auto, SystemClock(), {"ANTHROPIC_API_KEY": "an-0123456789", "OPENAI_API_KEY": "sk-0123456789"})
    assert isinstance(llm, OpenAiCompatLlm) and label == "auto: openai (gpt-4o-mini); OPENAI_API_KEY is set"
    _, label = choose_llm(auto, SystemClock(), {"ANTHROPIC_API_KEY": "an-0123456789", "BRISVOX_LLM_MODEL": "claude-y"})
    assert label == "auto: anthropic (claude-y); ANTHROPIC_API_KEY is set"


def test_auto_with_a_key_but_without_the_cloud_extra_is_a_config_error_naming_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "brisvox.providers.cloud.openai_compat", None)  # as without httpx
    auto = agent(BASE + '\n[llm]\nprovider = "auto"\n')
    with pytest.raises(ConfigError, match=r"llm provider 'openai' needs the 'openai' extra"):
        choose_llm(auto, SystemClock(), {"OPENAI_API_KEY": "sk-0123456789"})
    with pytest.raises(ConfigError, match=r"llm provider 'openai' needs the 'openai' extra"):
        choose_llm(auto, SystemClock(), {"BRISVOX_LLM_BASE_URL": "http://127.0.0.1:9/v1"})


def test_the_page_and_the_built_providers_name_the_resolved_llm(built: list[CallProviders]) -> None:
    text = BASE + '\n[llm]\nprovider = "auto"\n'
    providers = build_call_providers(agent(text), SystemClock(), {"OPENAI_API_KEY": "sk-0123456789"})
    built.append(providers)
    assert providers.llm_label == "auto: openai (gpt-4o-mini); OPENAI_API_KEY is set"
    assert providers.page_info(agent(text))["llm"] == providers.llm_label


def test_the_vad_section_reaches_every_calls_detector(built: list[CallProviders]) -> None:
    mocks = '\n[stt]\nprovider = "mock"\n\n[tts]\nprovider = "mock"\n'
    p = build(BASE + mocks + "\n[vad]\nthreshold = 0.7\nhysteresis = 0\nmin_silence = 0.192\n", built)
    params = p.providers.vad(16000).params
    assert (params.threshold, params.hysteresis, params.min_silence) == (0.7, 0.0, 0.192)
    assert params.min_speech == VadParams().min_speech or p.vad_label == "energy"
class _PrefixLlm:
    """An LLM with a prompt cache: records the prefix it was asked to keep."""

    def __init__(self, fail: bool = False) -> None:
        self.prefixes: list[LlmRequest] = []
        self.fail = fail

    @property
    def name(self) -> str:
        return "prefix"

    def stream(self, request: LlmRequest) -> LlmStream:
        raise AssertionError("warming streams nothing")

    async def warm(self) -> None:
        return None

    async def warm_prefix(self, request: LlmRequest) -> None:
        if self.fail:
            raise ProviderError("prefix", ProviderErrorKind.MODEL, "no model")
        self.prefixes.append(request)

    async def prefill(self, request: LlmRequest) -> bool:
        raise AssertionError("the server only warms the prefix")


def _with_llm(llm: LlmProvider) -> CallProviders:
    clock = SystemClock()
    providers = Providers(stt=MockStt(clock), llm=llm, tts=MockTts(clock), vad=lambda rate: energy_vad(rate))
    return CallProviders(providers=providers, llm_label="x", vad_label="energy")


async def test_warming_hands_the_first_requests_prefix_to_an_llm_with_a_prompt_cache() -> None:
    llm = _PrefixLlm()
    prefix = LlmRequest(messages=(SystemMessage(text="You are a host."), UserMessage(text="Hello.")))
    await _with_llm(llm).warm(prefix)
    assert llm.prefixes == [prefix]
    await _with_llm(llm).warm()  # no prefix (a flow): nothing to keep
    assert llm.prefixes == [prefix]


async def test_a_prefix_that_cannot_be_warmed_is_logged_and_the_server_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    prefix = LlmRequest(messages=(UserMessage(text="Hello."),))
    with caplog.at_level("WARNING"):
        await _with_llm(_PrefixLlm(fail=True)).warm(prefix)
    assert "warming the llm's prompt prefix provider failed" in caplog.text


def test_the_local_stt_gets_the_agent_files_prompt(built: list[CallProviders]) -> None:
    from brisvox.providers.local import WhisperStt

    p = build(BASE + '\n[stt]\nprovider = "local"\n[stt.options]\nprompt = "A table for two."\n', built)
    assert isinstance(p.providers.stt, WhisperStt) and p.providers.stt.config.prompt == "A table for two."


async def test_closing_runs_every_closer_last_first_and_logs_one_that_fails_with_its_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    closed: list[str] = []

    def broken() -> None:
        raise RuntimeError("the pool would not stop")

    async def first() -> None:
        closed.append("first")

    await close_all([first, broken, lambda: closed.append("last")])
    assert closed == ["last", "first"]
    [failure] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert "closing" in failure.getMessage() and failure.exc_info is not None


def test_the_vad_factory_gives_the_calls_one_batcher_with_the_period_on_the_clock() -> None:
    from brisvox.server.call_providers import vad_factory

    make, label, pool = vad_factory({}, True, clock=SystemClock(), period=0.007)
    assert label == "silero" and pool is not None
    try:
        first, second = make(16000), make(16000)
        batchers = {id(d._batcher[0]) for d in (first, second) if d._batcher is not None}
        assert len(batchers) == 1
        assert first._batcher is not None and first._batcher[0].period == 0.007
    finally:
        pool.close()
        pool.join()
