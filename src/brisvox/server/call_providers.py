"""The providers ``brisvox serve`` builds for an agent: loaded once, shared by every call.

* VAD: Silero (``brisvox models fetch``) on a small inference pool; the energy detector
  when the model is missing (logged).
* End of turn: Smart Turn when its model is present, else the turn machine's deadline.
* STT / TTS: the agent file's ``local`` providers (faster-whisper, hibari).  Hibari
  speaks at 24 kHz; :class:`ResamplingTts` converts its audio to the call's rate, so a
  16 kHz browser or phone call hears it.
* LLM: the agent file's choice.  ``scripted`` (what the demo agent leaves it at) is
  replaced by a configured model when the environment has one, in this order:
  ``BRISVOX_LLM_BASE_URL`` (any OpenAI-compatible server; ``BRISVOX_LLM_MODEL``,
  optional ``BRISVOX_LLM_API_KEY``), ``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``, the local
  LLM (llama.cpp, when the ``local-llm`` extra is installed and its GGUF fetched; skipped
  with ``BRISVOX_LLM_SCRIPTED=1``); with none, the scripted restaurant host of
  :mod:`brisvox.server.demo_llm`.  :attr:`CallProviders.llm_label` says which one
  runs (the start-up line, the page and each call's ``call_info`` event show it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from brisvox.audio.resample import ResampleStream
from brisvox.core.clock import Clock
from brisvox.core.errors import BrisvoxError, ConfigError
from brisvox.core.secret import Secret
from brisvox.engine import Providers
from brisvox.inference.pool import InferencePool, PoolConfig
from brisvox.inference.vad import VoiceActivityDetector, energy_vad, silero_vad
from brisvox.providers.llm import LlmProvider
from brisvox.providers.tts import TtsAudio, TtsConfig, TtsEvent, TtsFlushed, TtsProvider, TtsSession
from brisvox.server.agent_file import AgentDefinition

__all__ = ["CallProviders", "ResamplingTts", "build_call_providers", "choose_llm"]

log = logging.getLogger(__name__)

DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
DEFAULT_ANTHROPIC_MODEL = "claude-3-5-haiku-latest"


class _ResamplingSession:
    """A TTS session whose audio is converted to ``rate`` (one resampler per context)."""

    def __init__(self, inner: TtsSession, rate: int) -> None:
        self._inner = inner
        self._rate = rate
        self._streams: dict[int, ResampleStream] = {}

    async def send_text(self, context_id: int, text: str) -> None:
        await self._inner.send_text(context_id, text)

    async def flush(self, context_id: int) -> None:
        await self._inner.flush(context_id)

    def cancel(self, context_id: int) -> None:
        self._streams.pop(context_id, None)
        self._inner.cancel(context_id)

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> TtsEvent:
        while True:
            event = await self._inner.__anext__()
            if isinstance(event, TtsAudio) and event.sample_rate != self._rate:
                stream = self._streams.get(event.context_id)
                if stream is None or stream.in_rate != event.sample_rate:
                    stream = self._streams[event.context_id] = ResampleStream(event.sample_rate, self._rate)
                pcm = stream.process(event.pcm)
                if not pcm:
                    continue
                return TtsAudio(context_id=event.context_id, pcm=pcm, sample_rate=self._rate)
            if isinstance(event, TtsFlushed):
                self._streams.pop(event.context_id, None)  # the filter's few ms of tail are dropped
            return event

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()


class ResamplingTts:
    """A TTS provider that synthesizes at ``native_rate`` and delivers the call's rate."""

    def __init__(self, inner: TtsProvider, native_rate: int) -> None:
        self._inner = inner
        self._native = native_rate

    @property
    def name(self) -> str:
        return self._inner.name

    async def warm(self) -> None:
        await self._inner.warm()

    async def connect(self, config: TtsConfig) -> TtsSession:
        session = await self._inner.connect(dataclasses.replace(config, sample_rate=self._native))
        return session if config.sample_rate == self._native else _ResamplingSession(session, config.sample_rate)


def choose_llm(definition: AgentDefinition, clock: Clock, environ: Mapping[str, str]) -> tuple[LlmProvider, str]:
    """The agent's LLM and a label for it (see the module docs for the order)."""
    # The cloud adapters (and httpx) are imported only when one is chosen.
    choice = definition.llm
    options = dict(choice.options)
    model = str(options.get("model", ""))
    if choice.provider in ("openai", "openrouter", "ollama", "vllm"):
        from brisvox.providers.cloud import openai_compat as oa

        opts = oa.OpenAiCompatOptions.preset(choice.provider, model=model or DEFAULT_OPENAI_MODEL, api_key=choice.api_key)
        return oa.OpenAiCompatLlm(opts, clock), f"{choice.provider} ({opts.model})"
    if choice.provider == "anthropic" and choice.api_key is not None:
        from brisvox.providers.cloud.anthropic import AnthropicLlm, AnthropicOptions

        a = AnthropicOptions(model=model or DEFAULT_ANTHROPIC_MODEL, api_key=choice.api_key)
        return AnthropicLlm(a, clock), f"anthropic ({a.model})"
    if choice.provider == "gemini" and choice.api_key is not None:
        from brisvox.providers.cloud.gemini import GeminiLlm, GeminiOptions

        g = GeminiOptions(model=model or "gemini-2.0-flash", api_key=choice.api_key)
        return GeminiLlm(g, clock), f"gemini ({g.model})"
    if choice.provider == "local":
        local = _local_llm()
        if local is None:
            raise ConfigError(f"{definition.source}: llm provider 'local' needs the local-llm extra and "
                              "`brisvox models fetch qwen2_5_coder_0_5b_q4`")
        return local
    if choice.provider != "scripted":
        raise ConfigError(f"{definition.source}: llm provider {choice.provider!r} is not available in this build")
    base_url = environ.get("BRISVOX_LLM_BASE_URL")
    if base_url:
        from brisvox.providers.cloud import openai_compat as oa

        key = environ.get("BRISVOX_LLM_API_KEY")
        opts = oa.OpenAiCompatOptions(model=environ.get("BRISVOX_LLM_MODEL", DEFAULT_OPENAI_MODEL), base_url=base_url,
                                   api_key=Secret(key) if key else None)
        return oa.OpenAiCompatLlm(opts, clock), f"OpenAI-compatible endpoint {base_url} ({opts.model})"
    if environ.get("OPENAI_API_KEY"):
        from brisvox.providers.cloud import openai_compat as oa

        opts = oa.OpenAiCompatOptions.preset("openai", model=environ.get("BRISVOX_LLM_MODEL", DEFAULT_OPENAI_MODEL),
                                          api_key=Secret(environ["OPENAI_API_KEY"]))
        return oa.OpenAiCompatLlm(opts, clock), f"OpenAI ({opts.model}, key from OPENAI_API_KEY)"
    if environ.get("ANTHROPIC_API_KEY"):
        from brisvox.providers.cloud.anthropic import AnthropicLlm, AnthropicOptions

        a = AnthropicOptions(model=environ.get("BRISVOX_LLM_MODEL", DEFAULT_ANTHROPIC_MODEL),
                             api_key=Secret(environ["ANTHROPIC_API_KEY"]))
        return AnthropicLlm(a, clock), f"Anthropic ({a.model}, key from ANTHROPIC_API_KEY)"
    if environ.get("BRISVOX_LLM_SCRIPTED") != "1":
        local = _local_llm()
        if local is not None:
            return local
    from brisvox.server.demo_llm import scripted_demo_llm

    return scripted_demo_llm(clock), ("the scripted restaurant host (no LLM configured: set BRISVOX_LLM_BASE_URL, "
                                      "OPENAI_API_KEY or ANTHROPIC_API_KEY for a real model)")


def _local_llm() -> tuple[LlmProvider, str] | None:
    """The embedded GGUF model through llama.cpp, when the extra is installed and the model fetched."""
    # find_spec, not an import: the extra is optional, so type checking cannot assume it.
    if importlib.util.find_spec("llama_cpp") is None:
        return None
    from brisvox.inference.models import QWEN_CODER_0_5B, model_path
    from brisvox.providers.local.llama import LlamaLlm

    if not model_path(QWEN_CODER_0_5B).exists():
        return None
    return LlamaLlm(), "the local LLM (Qwen2.5-Coder-0.5B through llama.cpp)"


@dataclass(slots=True)
class CallProviders:
    """The shared providers and what to close at the end of the process."""

    providers: Providers
    llm_label: str
    vad_label: str
    closers: list[Callable[[], Any]] = field(default_factory=list)

    async def warm(self) -> None:
        """Load and run each model once, so the first call does not pay for it (failures are logged)."""
        for what, warm in (("speech-to-text", self.providers.stt.warm), ("text-to-speech", self.providers.tts.warm),
                           ("llm", self.providers.llm.warm)):
            try:
                await warm()
            except Exception as exc:  # a missing model must not stop the server: calls report it
                log.warning("warming the %s provider failed: %s", what, exc)
        log.info("call providers warm")

    def page_info(self, definition: AgentDefinition) -> dict[str, Any]:
        """What the demo page shows about the agent before a call."""
        return {"agent": definition.name, "greeting": definition.greeting, "llm": self.llm_label,
                "vad": self.vad_label, "stt": "local-whisper", "tts": "local-hibari",
                "tools": list(definition.tools), "confirm_tools": list(definition.confirm_tools)}

    async def aclose(self) -> None:
        for close in reversed(self.closers):
            with contextlib.suppress(Exception):
                result = close()
                if hasattr(result, "__await__"):
                    await result

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()


def _vad_factory() -> tuple[Callable[[int], VoiceActivityDetector], str, InferencePool | None]:
    try:
        from brisvox.inference.silero import SileroModel

        model = SileroModel.load()
    except (BrisvoxError, ImportError, OSError) as exc:
        log.warning("Silero VAD unavailable (%s); the calls use the energy detector", exc)
        return (lambda rate: energy_vad(rate)), "energy", None
    pool = InferencePool(PoolConfig(name="brisvox-vad", threads=1))
    return (lambda rate: silero_vad(model, pool, sample_rate=rate)), "silero", pool


def build_call_providers(definition: AgentDefinition, clock: Clock, environ: Mapping[str, str]) -> CallProviders:
    """The providers of ``definition`` (raises ConfigError for a stage this build cannot run)."""
    from brisvox.providers.local import HIBARI_SAMPLE_RATE, HibariTts, WhisperStt

    if definition.stt.provider != "local" or definition.tts.provider != "local":
        raise ConfigError(f"{definition.source}: brisvox serve runs the local STT and TTS only in this build "
                          f"(got stt {definition.stt.provider!r}, tts {definition.tts.provider!r})")
    llm, label = choose_llm(definition, clock, environ)
    vad, vad_label, pool = _vad_factory()
    stt = WhisperStt()
    hibari = HibariTts()
    end_of_turn = None
    closers: list[Callable[[], Any]] = [stt.aclose, hibari.aclose]
    llm_close = getattr(llm, "aclose", None)
    if callable(llm_close):
        closers.append(llm_close)
    if pool is not None:
        closers.append(pool.aclose)
    try:
        from brisvox.inference.smart_turn import EndOfTurnAnalyzer, SmartTurnModel

        turn_model = SmartTurnModel.load()
        turn_pool = InferencePool(PoolConfig(name="brisvox-turn", threads=1))
        end_of_turn = EndOfTurnAnalyzer(turn_model, turn_pool)
        closers.append(turn_pool.aclose)
    except (BrisvoxError, ImportError, OSError) as exc:
        log.warning("Smart Turn unavailable (%s); turns end on the silence deadline", exc)
    providers = Providers(stt=stt, llm=llm, tts=ResamplingTts(hibari, HIBARI_SAMPLE_RATE), vad=vad,
                          end_of_turn=end_of_turn)
    log.info("call providers: vad %s, stt local-whisper, tts local-hibari, llm %s", vad_label, label)
    return CallProviders(providers=providers, llm_label=label, vad_label=vad_label, closers=closers)
