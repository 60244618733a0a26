"""The providers an agent file may name, per stage, and what each one needs.

The agent file checks its ``[stt]``, ``[llm]``, ``[tts]`` and ``[s2s]`` sections against this
catalog: the provider must exist for that stage, speak the agent's language, get an
``api_key_env`` when it needs a key (none when it takes none), and set only the options
its entry lists, each of the listed type and within the entry's ``bounds``.  The option
names are the fields of the adapter's ``Options`` dataclass (``brisvox serve`` passes the
table to it), except an LLM's :data:`LLM_REQUEST_OPTIONS`, which go to the engine's
``LlmConfig`` and so into every request.  The adapters themselves live in
``brisvox.providers`` (cloud adapters in ``brisvox.providers.cloud``, embedded models in
``brisvox.providers.local``); the catalog names the extra that installs each one.

:func:`resolve_llm` says which LLM an agent's ``[llm]`` section runs.  What runs is what
the file says: the environment only supplies the key the file names with ``api_key_env``.
The one exception is the explicit ``provider = "auto"`` (the demo agent's), which takes
the first of :data:`AUTO_ORDER` the environment makes available.  ``brisvox check``, the
start-up line of ``brisvox serve`` and ``/agent.json`` all print its :attr:`LlmChoice.label`.
"""

from __future__ import annotations

import enum
import importlib.util
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from brisvox.providers.choice import Stage

__all__ = [
    "AUTO_CLOUD_LLMS", "AUTO_LLM", "AUTO_ORDER", "CATALOG", "DEFAULT_LLM_MODELS", "DEFAULT_PROVIDERS", "LLM_REQUEST_OPTIONS", "Bounds",
    "KeyUse", "LlmChoice", "OptionType", "ProviderEntry", "Stage", "local_llm_ready", "lookup", "resolve_llm",
]

OptionType = type[str] | type[int] | type[float] | type[bool]
"""The type of one option value (an ``int`` is accepted where a ``float`` is expected)."""

Bounds = tuple[float | None, float | None]
"""The lowest and highest value a numeric option may take (both allowed); None: no limit."""

LLM_REQUEST_OPTIONS = ("temperature", "max_tokens")
"""LLM options that are not the adapter's: they go to ``LlmConfig`` (sent with each request)."""

_NO_BOUNDS: Mapping[str, Bounds] = MappingProxyType({})


class KeyUse(enum.Enum):
    REQUIRED = "required"
    OPTIONAL = "optional"
    NONE = "none"


@dataclass(frozen=True, slots=True)
class ProviderEntry:
    """One provider of one stage.  ``languages``: primary language subtags it speaks (None: any).
    ``options``: the options its table may set, name -> type (None: not checked here).
    ``bounds``: the allowed range of numeric options, name -> (lowest, highest); None: open."""

    stage: Stage
    name: str
    key: KeyUse
    extra: str
    languages: tuple[str, ...] | None = None
    key_env_hint: str = ""
    options: Mapping[str, OptionType] | None = field(default=None, hash=False)
    bounds: Mapping[str, Bounds] = field(default_factory=lambda: _NO_BOUNDS, hash=False)


def _options(**types: OptionType) -> Mapping[str, OptionType]:
    return MappingProxyType(types)


_NO_OPTIONS = _options()
_DEEPGRAM = _options(model=str, base_url=str, endpointing_ms=int, smart_format=bool, keepalive_interval=float)
_CARTESIA = _options(model=str, voice=str, base_url=str, api_version=str, max_buffer_delay_ms=int)
_ELEVENLABS = _options(model=str, voice=str, base_url=str, stability=float, similarity_boost=float,
                       inactivity_timeout=int)
_OPENAI_SPEECH = _options(model=str, voice=str, base_url=str, instructions=str)
_LOCAL_LLM = _options(temperature=float, max_tokens=int)
# WhisperConfig.prompt: the agent's vocabulary; trailing_quiet and partial_every: the early decode.
_LOCAL_STT = _options(prompt=str, trailing_quiet=float, partial_every=float)
_LOCAL_STT_BOUNDS: Mapping[str, Bounds] = MappingProxyType({"trailing_quiet": (0.01, 1.0),
                                                            "partial_every": (0.2, 10.0)})
_OPENAI_COMPAT = _options(model=str, temperature=float, max_tokens=int, base_url=str, reasoning_effort=str,
                          parallel_tool_calls=bool)
_ANTHROPIC = _options(model=str, temperature=float, max_tokens=int, base_url=str, thinking_budget=int)
_GEMINI = _options(model=str, temperature=float, max_tokens=int, base_url=str, api_version=str,
                   thinking_budget=int)
_OPENAI_REALTIME = _options(model=str, voice=str, base_url=str, transcription_model=str)
_GEMINI_LIVE = _options(model=str, voice=str, base_url=str)
# The mocks of brisvox.sim with fixed latencies (brisvox.server.mock_providers builds them).
_MOCK_STT = _options(final_latency=float, text=str)
_MOCK_LLM = _options(first_token=float, token_gap=float, reply=str)
_MOCK_TTS = _options(first_audio=float, chars_per_second=float, chunk_seconds=float, realtime_factor=float)
_MOCK_BOUNDS: Mapping[str, Bounds] = MappingProxyType({
    "final_latency": (0.0, 10.0), "first_token": (0.0, 60.0), "token_gap": (0.0, 10.0), "first_audio": (0.0, 10.0),
    "chars_per_second": (1.0, 1000.0), "chunk_seconds": (0.005, 1.0), "realtime_factor": (0.0, 10.0)})
_LLM_BOUNDS: Mapping[str, Bounds] = MappingProxyType(
    {"temperature": (0.0, 2.0), "max_tokens": (1, 1_000_000), "thinking_budget": (0, 1_000_000)})
# Every numeric option has a finite range (a test holds the catalog to it): an absurd value
# is refused by ``brisvox check`` instead of reaching a vendor or a timer.
_DEEPGRAM_BOUNDS: Mapping[str, Bounds] = MappingProxyType({"endpointing_ms": (10, 10_000),
                                                           "keepalive_interval": (1.0, 9.0)})
_CARTESIA_BOUNDS: Mapping[str, Bounds] = MappingProxyType({"max_buffer_delay_ms": (0, 5_000)})
_ELEVENLABS_BOUNDS: Mapping[str, Bounds] = MappingProxyType(
    {"stability": (0.0, 1.0), "similarity_boost": (0.0, 1.0), "inactivity_timeout": (5, 180)})


CATALOG: tuple[ProviderEntry, ...] = (
    ProviderEntry(Stage.STT, "local", KeyUse.NONE, "local", ("en",), options=_LOCAL_STT, bounds=_LOCAL_STT_BOUNDS),
    ProviderEntry(Stage.STT, "mock", KeyUse.NONE, "", options=_MOCK_STT, bounds=_MOCK_BOUNDS),
    ProviderEntry(Stage.STT, "deepgram", KeyUse.REQUIRED, "deepgram", key_env_hint="DEEPGRAM_API_KEY",
                  options=_DEEPGRAM, bounds=_DEEPGRAM_BOUNDS),
    ProviderEntry(Stage.LLM, "auto", KeyUse.NONE, "cloud", options=_NO_OPTIONS),
    ProviderEntry(Stage.LLM, "scripted", KeyUse.NONE, "", options=_NO_OPTIONS),
    ProviderEntry(Stage.LLM, "mock", KeyUse.NONE, "", options=_MOCK_LLM, bounds=_MOCK_BOUNDS),
    ProviderEntry(Stage.LLM, "local", KeyUse.NONE, "local-llm", options=_LOCAL_LLM, bounds=_LLM_BOUNDS),
    ProviderEntry(Stage.LLM, "openai", KeyUse.REQUIRED, "openai", key_env_hint="OPENAI_API_KEY",
                  options=_OPENAI_COMPAT, bounds=_LLM_BOUNDS),
    ProviderEntry(Stage.LLM, "openrouter", KeyUse.REQUIRED, "openai", key_env_hint="OPENROUTER_API_KEY",
                  options=_OPENAI_COMPAT, bounds=_LLM_BOUNDS),
    ProviderEntry(Stage.LLM, "ollama", KeyUse.NONE, "openai", options=_OPENAI_COMPAT, bounds=_LLM_BOUNDS),
    ProviderEntry(Stage.LLM, "vllm", KeyUse.OPTIONAL, "openai", options=_OPENAI_COMPAT, bounds=_LLM_BOUNDS),
    ProviderEntry(Stage.LLM, "anthropic", KeyUse.REQUIRED, "anthropic", key_env_hint="ANTHROPIC_API_KEY",
                  options=_ANTHROPIC, bounds=_LLM_BOUNDS),
    ProviderEntry(Stage.LLM, "gemini", KeyUse.REQUIRED, "gemini", key_env_hint="GEMINI_API_KEY",
                  options=_GEMINI, bounds=_LLM_BOUNDS),
    ProviderEntry(Stage.TTS, "local", KeyUse.NONE, "local", ("en",), options=_NO_OPTIONS),
    ProviderEntry(Stage.TTS, "mock", KeyUse.NONE, "", options=_MOCK_TTS, bounds=_MOCK_BOUNDS),
    ProviderEntry(Stage.TTS, "cartesia", KeyUse.REQUIRED, "cartesia", key_env_hint="CARTESIA_API_KEY",
                  options=_CARTESIA, bounds=_CARTESIA_BOUNDS),
    ProviderEntry(Stage.TTS, "elevenlabs", KeyUse.REQUIRED, "elevenlabs", key_env_hint="ELEVENLABS_API_KEY",
                  options=_ELEVENLABS, bounds=_ELEVENLABS_BOUNDS),
    # OPTIONAL: the adapter sends no key to an OpenAI-compatible speech server that needs none.
    ProviderEntry(Stage.TTS, "openai", KeyUse.OPTIONAL, "openai", key_env_hint="OPENAI_API_KEY",
                  options=_OPENAI_SPEECH),
    ProviderEntry(Stage.S2S, "openai-realtime", KeyUse.REQUIRED, "cloud", key_env_hint="OPENAI_API_KEY",
                  options=_OPENAI_REALTIME),
    ProviderEntry(Stage.S2S, "gemini-live", KeyUse.REQUIRED, "cloud", key_env_hint="GEMINI_API_KEY",
                  options=_GEMINI_LIVE),
)

DEFAULT_PROVIDERS = {Stage.STT: "local", Stage.LLM: "scripted", Stage.TTS: "local"}
"""What a stage the file leaves out runs: the embedded models and the scripted LLM (no key)."""


def lookup(stage: Stage, name: str) -> ProviderEntry | None:
    for entry in CATALOG:
        if entry.stage is stage and entry.name == name:
            return entry
    return None


def names(stage: Stage) -> list[str]:
    return [e.name for e in CATALOG if e.stage is stage]


# --- which LLM runs ----------------------------------------------------------------------------

AUTO_LLM = "auto"
"""``[llm] provider = "auto"``: the first LLM of :data:`AUTO_ORDER` the environment offers."""

AUTO_ORDER = (
    "BRISVOX_LLM_BASE_URL: an OpenAI-compatible server at that URL (model BRISVOX_LLM_MODEL, key BRISVOX_LLM_API_KEY)",
    "OPENAI_API_KEY: openai (model BRISVOX_LLM_MODEL or gpt-4o-mini)",
    "ANTHROPIC_API_KEY: anthropic (model BRISVOX_LLM_MODEL or claude-3-5-haiku-latest)",
    "the local LLM, when the local-llm extra is installed and its model fetched (not with BRISVOX_LLM_SCRIPTED=1)",
    "the scripted restaurant host",
)
"""What ``provider = "auto"`` runs, first match wins (docs/CONFIG.md lists the same)."""

AUTO_CLOUD_LLMS = (("openai", "OPENAI_API_KEY"), ("anthropic", "ANTHROPIC_API_KEY"))
"""The cloud LLMs auto picks by their key variable, in order (``make demo`` installs their extras)."""

DEFAULT_LLM_MODELS: Mapping[str, str] = MappingProxyType({
    "openai": "gpt-4o-mini", "openrouter": "gpt-4o-mini", "ollama": "gpt-4o-mini", "vllm": "gpt-4o-mini",
    "anthropic": "claude-3-5-haiku-latest", "gemini": "gemini-2.0-flash",
})
"""The model of a cloud LLM whose options name none."""

LOCAL_LLM_LABEL = "Qwen2.5-Coder-0.5B through llama.cpp"
SCRIPTED_LLM_LABEL = "the restaurant host: keyword rules, no model"


@dataclass(frozen=True, slots=True)
class LlmChoice:
    """The LLM an agent runs: ``provider`` (a catalog name; never ``auto``), its ``model``,
    a ``base_url`` that replaces the preset's, the environment variable its key comes from
    (``key_env``; None: no key), and ``auto``: why ``provider = "auto"`` chose it (None when
    the file named the provider).  :attr:`label` is what every surface prints."""

    provider: str
    model: str | None = None
    base_url: str | None = None
    key_env: str | None = None
    auto: str | None = None

    @property
    def label(self) -> str:
        if self.provider == "local":
            what = f"local ({LOCAL_LLM_LABEL})"
        elif self.provider == "scripted":
            what = f"scripted ({SCRIPTED_LLM_LABEL})"
        elif self.provider == "mock":
            what = "mock (a fixed reply at fixed latencies)"
        else:
            where = f" at {self.base_url}" if self.base_url else ""
            what = f"{self.provider} ({self.model}{where})"
        return f"auto: {what}; {self.auto}" if self.auto else what


def local_llm_ready() -> bool:
    """The embedded LLM can run: the ``local-llm`` extra is installed and its GGUF fetched."""
    # find_spec, not an import: the extra is optional and loading llama.cpp is slow.
    if importlib.util.find_spec("xllamacpp") is None:
        return False
    from brisvox.inference.models import QWEN_CODER_0_5B, model_path

    return model_path(QWEN_CODER_0_5B).exists()


def resolve_llm(
    provider: str,
    options: Mapping[str, object],
    api_key_env: str | None,
    environ: Mapping[str, str],
    *,
    local_ready: Callable[[], bool] = local_llm_ready,
) -> LlmChoice:
    """The LLM an ``[llm]`` section runs (see the module docs).

    ``environ`` is read only for ``provider = "auto"`` (which variables are set, never a value
    but BRISVOX_LLM_BASE_URL and BRISVOX_LLM_MODEL); a named provider runs as named."""
    if provider != AUTO_LLM:
        model = options.get("model")
        base_url = options.get("base_url")
        return LlmChoice(
            provider,
            model=str(model) if model else DEFAULT_LLM_MODELS.get(provider),
            base_url=str(base_url) if base_url else None,
            key_env=api_key_env,
        )
    model_env = environ.get("BRISVOX_LLM_MODEL") or None
    if base_url := environ.get("BRISVOX_LLM_BASE_URL"):
        key_env = "BRISVOX_LLM_API_KEY" if environ.get("BRISVOX_LLM_API_KEY") else None
        return LlmChoice("openai", model=model_env or DEFAULT_LLM_MODELS["openai"], base_url=base_url,
                         key_env=key_env, auto="BRISVOX_LLM_BASE_URL is set")
    for name, env in AUTO_CLOUD_LLMS:
        if environ.get(env):
            return LlmChoice(name, model=model_env or DEFAULT_LLM_MODELS[name], key_env=env, auto=f"{env} is set")
    if environ.get("BRISVOX_LLM_SCRIPTED") == "1":
        return LlmChoice("scripted", auto="no LLM variable set, BRISVOX_LLM_SCRIPTED=1")
    if local_ready():
        return LlmChoice("local", auto="no LLM variable set, the local LLM is installed")
    return LlmChoice("scripted", auto="no LLM variable set, no local LLM")
