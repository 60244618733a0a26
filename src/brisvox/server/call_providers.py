"""The providers ``brisvox serve`` builds for an agent: loaded once, shared by every call.

* VAD: Silero (``brisvox models fetch``) on a small inference pool, every call's windows
  scored together (:class:`~brisvox.inference.vad_batch.SileroBatcher`; ``BRISVOX_VAD_BATCH=off``
  scores each call's frame in a job of its own); the energy detector when the model is
  missing (logged).  The agent file's ``[vad]`` keys replace the detector's defaults.
* End of turn: Smart Turn when its model is present, else the turn machine's deadline.
* STT / TTS: the agent file's choice, built from its ``options`` table and key.  STT:
  ``local`` (faster-whisper) or ``deepgram``.  TTS: ``local`` (hibari), ``cartesia``,
  ``elevenlabs`` or ``openai`` (OpenAI speech).  A cloud adapter is imported only when
  chosen (a missing transport library is a ConfigError naming the extra), and the local
  models only for a ``local`` stage.  Cartesia speaks every call rate itself; hibari and
  OpenAI speech speak 24 kHz only and ElevenLabs all but 48 kHz, so :class:`ResamplingTts`
  converts their audio to the call's rate where they cannot produce it.
* LLM: the agent file's choice as :func:`~brisvox.server.providers.resolve_llm` resolves it
  (a named provider runs as named; ``provider = "auto"``, the demo agent's, takes the first
  LLM the environment offers, in the documented order), its adapter built from its
  ``options`` (``model``, ``base_url`` ...; ``temperature`` and ``max_tokens`` go with each
  request through ``engine_config``, not to the adapter).  The environment supplies only the
  key the file names (or auto's variables).  :attr:`CallProviders.llm_label` is the
  resolution's label (the start-up line, ``/agent.json`` and each call's ``call_info``
  event show it, and ``brisvox check`` prints the same).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType
from typing import Any, Self

from brisvox.agent.window import Summarizer
from brisvox.core.clock import Clock
from brisvox.core.errors import BrisvoxError, ConfigError
from brisvox.core.secret import Secret
from brisvox.engine import Providers
from brisvox.engine.driver import TurnAnalyzer
from brisvox.inference.pool import InferencePool, PoolConfig
from brisvox.inference.vad import VadParams, VoiceActivityDetector, energy_vad, silero_vad
from brisvox.inference.vad_batch import SileroBatcher
from brisvox.providers.llm import LlmProvider, LlmRequest, PrefixWarm
from brisvox.providers.resampling import ResamplingTts
from brisvox.providers.stt import SttProvider
from brisvox.providers.summarizer import LlmSummarizer
from brisvox.providers.tts import TtsProvider
from brisvox.server.agent_file import AgentDefinition, ProviderChoice
from brisvox.server.providers import (
    LLM_REQUEST_OPTIONS,
    LlmChoice,
    Stage,
    local_llm_ready,
    lookup,
    resolve_llm,
)

__all__ = ["CallProviders", "build_call_providers", "choose_llm", "close_all"]

log = logging.getLogger(__name__)


def choose_llm(definition: AgentDefinition, clock: Clock, environ: Mapping[str, str]) -> tuple[LlmProvider, str]:
    """The agent's LLM as :func:`~brisvox.server.providers.resolve_llm` resolves it, and its label."""
    section = definition.llm
    resolved = resolve_llm(section.provider, section.options, section.api_key_env, environ)
    if resolved.auto is None:
        # temperature and max_tokens go with each request (engine_config); the rest is the adapter's.
        options = {k: v for k, v in section.options.items() if k not in (*LLM_REQUEST_OPTIONS, "model")}
        key = key_for(definition, section, environ) if section.api_key_env is not None else None
    else:
        options = {}
        # auto's variables were checked by name only; the key is read here, at the one place that builds it.
        key = Secret(environ[resolved.key_env]) if resolved.key_env else None
    return _build_llm(definition, resolved, options, key, clock), resolved.label


def _build_llm(definition: AgentDefinition, resolved: LlmChoice, options: dict[str, Any], key: Secret | None,
               clock: Clock) -> LlmProvider:
    # The cloud adapters (and httpx) are imported only when one is chosen.
    name, model = resolved.provider, resolved.model or ""
    if name in ("openai", "openrouter", "ollama", "vllm"):
        with extra_for(Stage.LLM, name):
            from brisvox.providers.cloud.openai_compat import OpenAiCompatLlm, OpenAiCompatOptions
        if resolved.auto is not None and resolved.base_url is not None:
            # auto's BRISVOX_LLM_BASE_URL: any OpenAI-compatible server, with the key auto found or none.
            opts = OpenAiCompatOptions(model=model, base_url=resolved.base_url, api_key=key)
        else:
            opts = OpenAiCompatOptions.preset(name, model=model, api_key=key, **options)
            if key is None:  # the preset reads vllm's optional variable; only a key the file names is sent
                opts = dataclasses.replace(opts, api_key=None)
        return OpenAiCompatLlm(opts, clock)
    if name == "anthropic":
        with extra_for(Stage.LLM, name):
            from brisvox.providers.cloud.anthropic import AnthropicLlm, AnthropicOptions
        return AnthropicLlm(AnthropicOptions(model=model, api_key=_required(definition, name, key), **options), clock)
    if name == "gemini":
        with extra_for(Stage.LLM, name):
            from brisvox.providers.cloud.gemini import GeminiLlm, GeminiOptions
        return GeminiLlm(GeminiOptions(model=model, api_key=_required(definition, name, key), **options), clock)
    if name == "local":
        if not local_llm_ready():
            raise ConfigError(f"{definition.source}: llm provider 'local' needs the local-llm extra and "
                              "`brisvox models fetch qwen2_5_coder_0_5b_q4`")
        from brisvox.providers.local.xllama import XLlamaLlm

        return XLlamaLlm()
    if name == "scripted":
        from brisvox.server.demo_llm import scripted_demo_llm

        return scripted_demo_llm(clock)
    if name == "mock":
        from brisvox.server.mock_providers import mock_llm

        return mock_llm(options, clock)
    raise ConfigError(f"{definition.source}: llm provider {name!r} is not available in this build")


def _required(definition: AgentDefinition, provider: str, key: Secret | None) -> Secret:
    if key is None:
        raise ConfigError(f"{definition.source}: llm provider {provider!r} needs its key (name the variable "
                          "that holds it with api_key_env)")
    return key


@dataclass(slots=True)
class CallProviders:
    """The shared providers and what to close at the end of the process."""

    providers: Providers
    llm_label: str
    vad_label: str
    closers: list[Callable[[], Any]] = field(default_factory=list)
    summaries: bool = True  # calls make window summaries (the agent file's [window])
    summarizer: Summarizer | None = None  # None: the agent's own model summarizes

    async def warm(self, prefix: LlmRequest | None = None) -> None:
        """Load and run each model once, so the first call does not pay for it (failures are logged).

        ``prefix``: how every call's first request begins (``warm_request``); an LLM with a
        prompt cache (:class:`PrefixWarm`) evaluates it now, so a call's first turn does not."""
        llm = self.providers.llm
        steps: list[tuple[str, Callable[[], Awaitable[None]]]] = [
            ("speech-to-text", self.providers.stt.warm), ("text-to-speech", self.providers.tts.warm), ("llm", llm.warm)]
        if prefix is not None and isinstance(llm, PrefixWarm):
            steps.append(("llm's prompt prefix", lambda: llm.warm_prefix(prefix)))
        for what, warm in steps:
            try:
                await warm()
            except Exception as exc:  # a missing model must not stop the server: calls report it
                log.warning("warming the %s provider failed: %s", what, exc)
        log.info("call providers warm")

    def page_info(self, definition: AgentDefinition) -> dict[str, Any]:
        """What the demo page shows about the agent before a call."""
        return {"agent": definition.name, "greeting": definition.greeting, "llm": self.llm_label,
                "vad": self.vad_label, "stt": self.providers.stt.name, "tts": self.providers.tts.name,
                "tools": list(definition.tools), "confirm_tools": list(definition.confirm_tools)}

    async def aclose(self) -> None:
        await close_all(self.closers)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()


async def close_all(closers: list[Callable[[], Any]]) -> None:
    """Run each closer, the last added first (sync or async); one that fails is logged with its
    traceback and the others still run (the process is stopping: nobody else would hear of it)."""
    for close in reversed(closers):
        try:
            result = close()
            if hasattr(result, "__await__"):
                await result
        except Exception:
            log.exception("closing %s failed", getattr(close, "__qualname__", close))


def vad_factory(
    overrides: Mapping[str, float | bool], batch: bool = True, *, clock: Clock | None = None,
    period: float = 0.0,
) -> tuple[Callable[[int], VoiceActivityDetector], str, InferencePool | None]:
    """Each call's detector; ``overrides``: the agent file's ``[vad]`` keys, over the detector's
    defaults; ``batch``: Silero scores every call's windows together (SileroBatcher), its jobs
    starting at most every ``period`` seconds on ``clock`` (0: whenever the last one ends)."""
    try:
        from brisvox.inference.silero import SileroModel, SileroReset

        model = SileroModel.load()
    except (BrisvoxError, ImportError, OSError) as exc:
        log.warning("Silero VAD unavailable (%s); the calls use the energy detector", exc)
        energy_params = VadParams.energy().updated(overrides)
        return (lambda rate: energy_vad(rate, params=energy_params)), "energy", None
    pool = InferencePool(PoolConfig(name="brisvox-vad", threads=1))
    params = VadParams().updated(overrides)
    for rate in (16000, 8000):  # the silence path once, here, not on the loop in the first call
        model.silence(rate, SileroReset())
    batcher = SileroBatcher(model, pool, clock=clock, period=period) if batch else None
    return (lambda rate: silero_vad(model, pool, sample_rate=rate, params=params, batcher=batcher)), "silero", pool


def _stt(definition: AgentDefinition, clock: Clock, environ: Mapping[str, str]) -> SttProvider:
    """The agent's STT (cloud adapters are imported only when chosen)."""
    choice = definition.stt
    if choice.provider == "local":
        from brisvox.providers.local import WhisperStt
        from brisvox.providers.local.whisper import WhisperConfig

        return WhisperStt(WhisperConfig(**choice.options))
    if choice.provider == "mock":
        from brisvox.server.mock_providers import mock_stt

        return mock_stt(choice.options, clock)
    if choice.provider == "deepgram":
        key = key_for(definition, choice, environ)
        with extra_for(choice.stage, choice.provider):
            from brisvox.providers.cloud.deepgram import DeepgramOptions, DeepgramStt
        return DeepgramStt(DeepgramOptions(api_key=key, **choice.options), clock)
    raise ConfigError(f"{definition.source}: stt provider {choice.provider!r} is not available in this build")


def _tts(definition: AgentDefinition, clock: Clock, environ: Mapping[str, str]) -> TtsProvider:
    """The agent's TTS, wrapped in ResamplingTts when it cannot speak at every call rate."""
    choice = definition.tts
    if choice.provider == "local":
        from brisvox.providers.local import HIBARI_SAMPLE_RATE, HibariTts

        return ResamplingTts(HibariTts(), HIBARI_SAMPLE_RATE)
    if choice.provider == "mock":
        from brisvox.server.mock_providers import mock_tts

        return mock_tts(choice.options, clock)  # speaks every call rate
    if choice.provider == "cartesia":
        key = key_for(definition, choice, environ)
        with extra_for(choice.stage, choice.provider):
            from brisvox.providers.cloud.cartesia import CartesiaOptions, CartesiaTts
        return CartesiaTts(CartesiaOptions(api_key=key, **choice.options), clock)  # 8 to 48 kHz: every call rate
    if choice.provider == "elevenlabs":
        key = key_for(definition, choice, environ)
        with extra_for(choice.stage, choice.provider):
            from brisvox.providers.cloud import elevenlabs as el
        tts = el.ElevenLabsTts(el.ElevenLabsOptions(api_key=key, **choice.options), clock)
        return ResamplingTts(tts, 24_000, direct=el.SAMPLE_RATES)  # no 48 kHz: that call gets 24 kHz resampled
    if choice.provider == "openai":
        # The key is optional (an OpenAI-compatible speech server may take none); a named one must be set.
        speech_key = key_for(definition, choice, environ) if choice.api_key_env is not None else None
        with extra_for(choice.stage, choice.provider):
            from brisvox.providers.cloud import openai_speech as osp
        speech = osp.OpenAiSpeechOptions(api_key=speech_key, **choice.options)
        return ResamplingTts(osp.OpenAiSpeechTts(speech, clock),
                             osp.SAMPLE_RATE)
    raise ConfigError(f"{definition.source}: tts provider {choice.provider!r} is not available in this build")


def key_for(definition: AgentDefinition, choice: ProviderChoice, environ: Mapping[str, str]) -> Secret:
    """The key the file checked already, or (an agent built in Python) read now from its variable."""
    if choice.api_key is not None:
        return choice.api_key
    value = environ.get(choice.api_key_env, "") if choice.api_key_env is not None else ""
    if not value:
        raise ConfigError(f"{definition.source}: {choice.stage.value} provider {choice.provider!r} needs its key "
                          f"in the environment variable {choice.api_key_env or '(api_key_env is not set)'}")
    return Secret(value)


@contextlib.contextmanager
def extra_for(stage: Stage, provider: str) -> Iterator[None]:
    """Turns a missing transport library into a ConfigError naming the extra that installs it."""
    try:
        yield
    except ImportError as exc:
        entry = lookup(stage, provider)
        extra = entry.extra if entry is not None else "cloud"
        raise ConfigError(f"{stage.value} provider {provider!r} needs the {extra!r} extra "
                          f"(pip install 'brisvox[{extra}]'): {exc}") from None


def end_of_turn_factory() -> tuple[TurnAnalyzer, Callable[[], Awaitable[None]]] | None:
    """The Smart Turn analyzer and the closer of its pool, or None (logged) when the model is unavailable."""
    try:
        from brisvox.inference.smart_turn import EndOfTurnAnalyzer, SmartTurnModel

        turn_model = SmartTurnModel.load()
    except (BrisvoxError, ImportError, OSError) as exc:
        log.warning("Smart Turn unavailable (%s); turns end on the silence deadline", exc)
        return None
    turn_pool = InferencePool(PoolConfig(name="brisvox-turn", threads=1))
    return EndOfTurnAnalyzer(turn_model, turn_pool), turn_pool.aclose


def build_call_providers(definition: AgentDefinition, clock: Clock, environ: Mapping[str, str], *,
                         vad_batch: bool = True, vad_period: float = 0.0) -> CallProviders:
    """The providers of ``definition`` (raises ConfigError for a stage this build cannot run).
    ``vad_batch``: Silero scores the windows of every call together (``BRISVOX_VAD_BATCH``), a job
    at most every ``vad_period`` seconds (``BRISVOX_VAD_PERIOD``).

    Only what the agent uses is built: the local models load only for ``local`` stages, and
    building a cloud adapter opens no connection (each call connects its own session).
    """
    stt = _stt(definition, clock, environ)
    tts = _tts(definition, clock, environ)
    llm, label = choose_llm(definition, clock, environ)
    summaries, summary_llm = _summary_llm(definition, llm, clock, environ)
    vad, vad_label, pool = vad_factory(definition.vad, vad_batch, clock=clock, period=vad_period)
    end_of_turn = None
    closers: list[Callable[[], Any]] = []
    for provider in (stt, tts, llm, summary_llm):
        close = getattr(provider, "aclose", None)
        if callable(close):
            closers.append(close)
    if pool is not None:
        closers.append(pool.aclose)
    turn = end_of_turn_factory()
    if turn is not None:
        end_of_turn, close_turn = turn
        closers.append(close_turn)
    providers = Providers(stt=stt, llm=llm, tts=tts, vad=vad, end_of_turn=end_of_turn)
    log.info("call providers: vad %s, stt %s, tts %s, llm %s", vad_label, stt.name, tts.name, label)
    summarizer = LlmSummarizer(provider=summary_llm) if summary_llm is not None else None
    return CallProviders(providers=providers, llm_label=label, vad_label=vad_label, closers=closers,
                         summaries=summaries, summarizer=summarizer)


def _summary_llm(
    definition: AgentDefinition, llm: LlmProvider, clock: Clock, environ: Mapping[str, str]
) -> tuple[bool, LlmProvider | None]:
    """Whether calls make window summaries, and the model for them when it is not the agent's own."""
    window = definition.window
    if not window.summarize:
        return False, None
    from brisvox.server.demo_llm import DemoHostLlm

    if isinstance(llm, DemoHostLlm) or definition.llm.provider == "mock":
        log.info("window summaries are off: the %s LLM cannot summarize (requests keep the newest turns)", llm.name)
        return False, None
    if window.summary_model is None:
        return True, None  # run_call summarizes with the agent's own model
    options = MappingProxyType({**definition.llm.options, "model": window.summary_model})
    chosen = dataclasses.replace(definition, llm=dataclasses.replace(definition.llm, options=options))
    summary_llm, label = choose_llm(chosen, clock, environ)
    log.info("window summaries by %s", label)
    return True, summary_llm
