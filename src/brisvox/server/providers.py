"""The providers an agent file may name, per stage, and what each one needs.

The agent file checks its ``[stt]``, ``[llm]`` and ``[tts]`` sections against this
catalog: the provider must exist for that stage, speak the agent's language, get an
``api_key_env`` when it needs a key (none when it takes none), and set only the options
its entry lists, each of the listed type and within the entry's ``bounds``.  The option
names are the fields of the adapter's ``Options`` dataclass (``brisvox serve`` passes the
table to it), except an LLM's :data:`LLM_REQUEST_OPTIONS`, which go to the engine's
``LlmConfig`` and so into every request.  The adapters themselves live in
``brisvox.providers`` (cloud adapters in ``brisvox.providers.cloud``, embedded models in
``brisvox.providers.local``); the catalog names the extra that installs each one.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "CATALOG", "DEFAULT_PROVIDERS", "LLM_REQUEST_OPTIONS", "Bounds", "KeyUse", "OptionType", "ProviderEntry", "Stage",
    "lookup",
]

OptionType = type[str] | type[int] | type[float] | type[bool]
"""The type of one option value (an ``int`` is accepted where a ``float`` is expected)."""

Bounds = tuple[float | None, float | None]
"""The lowest and highest value a numeric option may take (both allowed); None: no limit."""

LLM_REQUEST_OPTIONS = ("temperature", "max_tokens")
"""LLM options that are not the adapter's: they go to ``LlmConfig`` (sent with each request)."""

_NO_BOUNDS: Mapping[str, Bounds] = MappingProxyType({})


class Stage(enum.Enum):
    STT = "stt"
    LLM = "llm"
    TTS = "tts"


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
_OPENAI_COMPAT = _options(model=str, temperature=float, max_tokens=int, base_url=str, reasoning_effort=str,
                          parallel_tool_calls=bool)
_ANTHROPIC = _options(model=str, temperature=float, max_tokens=int, base_url=str, thinking_budget=int)
_GEMINI = _options(model=str, temperature=float, max_tokens=int, base_url=str, api_version=str,
                   thinking_budget=int)
_LLM_BOUNDS: Mapping[str, Bounds] = MappingProxyType(
    {"temperature": (0.0, 2.0), "max_tokens": (1, None), "thinking_budget": (0, None)})


CATALOG: tuple[ProviderEntry, ...] = (
    ProviderEntry(Stage.STT, "local", KeyUse.NONE, "local", ("en",), options=_NO_OPTIONS),
    ProviderEntry(Stage.STT, "deepgram", KeyUse.REQUIRED, "deepgram", key_env_hint="DEEPGRAM_API_KEY",
                  options=_DEEPGRAM),
    ProviderEntry(Stage.LLM, "scripted", KeyUse.NONE, "", options=_NO_OPTIONS),
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
    ProviderEntry(Stage.TTS, "cartesia", KeyUse.REQUIRED, "cartesia", key_env_hint="CARTESIA_API_KEY",
                  options=_CARTESIA),
    ProviderEntry(Stage.TTS, "elevenlabs", KeyUse.REQUIRED, "elevenlabs", key_env_hint="ELEVENLABS_API_KEY",
                  options=_ELEVENLABS),
    # OPTIONAL: the adapter sends no key to an OpenAI-compatible speech server that needs none.
    ProviderEntry(Stage.TTS, "openai", KeyUse.OPTIONAL, "openai", key_env_hint="OPENAI_API_KEY",
                  options=_OPENAI_SPEECH),
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
