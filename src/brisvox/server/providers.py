"""The providers an agent file may name, per stage, and what each one needs.

The agent file checks its ``[stt]``, ``[llm]`` and ``[tts]`` sections against this
catalog: the provider must exist for that stage, speak the agent's language, get an
``api_key_env`` exactly when it takes a key, and (where the entry lists its ``options``)
set only options it knows, each of the listed type.  The option names are the fields of
the adapter's ``Options`` dataclass (``brisvox serve`` passes the table to it).  The adapters themselves live in
``brisvox.providers`` (cloud adapters in ``brisvox.providers.cloud``, embedded models in
``brisvox.providers.local``); the catalog names the extra that installs each one.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = ["CATALOG", "DEFAULT_PROVIDERS", "KeyUse", "OptionType", "ProviderEntry", "Stage", "lookup"]

OptionType = type[str] | type[int] | type[float] | type[bool]
"""The type of one option value (an ``int`` is accepted where a ``float`` is expected)."""


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
    ``options``: the options its table may set, name -> type (None: not checked here)."""

    stage: Stage
    name: str
    key: KeyUse
    extra: str
    languages: tuple[str, ...] | None = None
    key_env_hint: str = ""
    options: Mapping[str, OptionType] | None = field(default=None, hash=False)


def _options(**types: OptionType) -> Mapping[str, OptionType]:
    return MappingProxyType(types)


_NO_OPTIONS = _options()
_DEEPGRAM = _options(model=str, base_url=str, endpointing_ms=int, smart_format=bool, keepalive_interval=float)
_CARTESIA = _options(model=str, voice=str, base_url=str, api_version=str, max_buffer_delay_ms=int)
_ELEVENLABS = _options(model=str, voice=str, base_url=str, stability=float, similarity_boost=float,
                       inactivity_timeout=int)
_OPENAI_SPEECH = _options(model=str, voice=str, base_url=str, instructions=str)


CATALOG: tuple[ProviderEntry, ...] = (
    ProviderEntry(Stage.STT, "local", KeyUse.NONE, "local", ("en",), options=_NO_OPTIONS),
    ProviderEntry(Stage.STT, "deepgram", KeyUse.REQUIRED, "deepgram", key_env_hint="DEEPGRAM_API_KEY",
                  options=_DEEPGRAM),
    ProviderEntry(Stage.LLM, "scripted", KeyUse.NONE, ""),
    ProviderEntry(Stage.LLM, "local", KeyUse.NONE, "local-llm"),
    ProviderEntry(Stage.LLM, "openai", KeyUse.REQUIRED, "openai", key_env_hint="OPENAI_API_KEY"),
    ProviderEntry(Stage.LLM, "openrouter", KeyUse.REQUIRED, "openai", key_env_hint="OPENROUTER_API_KEY"),
    ProviderEntry(Stage.LLM, "ollama", KeyUse.NONE, "openai"),
    ProviderEntry(Stage.LLM, "vllm", KeyUse.OPTIONAL, "openai"),
    ProviderEntry(Stage.LLM, "anthropic", KeyUse.REQUIRED, "anthropic", key_env_hint="ANTHROPIC_API_KEY"),
    ProviderEntry(Stage.LLM, "gemini", KeyUse.REQUIRED, "gemini", key_env_hint="GEMINI_API_KEY"),
    ProviderEntry(Stage.TTS, "local", KeyUse.NONE, "local", ("en",), options=_NO_OPTIONS),
    ProviderEntry(Stage.TTS, "cartesia", KeyUse.REQUIRED, "cartesia", key_env_hint="CARTESIA_API_KEY",
                  options=_CARTESIA),
    ProviderEntry(Stage.TTS, "elevenlabs", KeyUse.REQUIRED, "elevenlabs", key_env_hint="ELEVENLABS_API_KEY",
                  options=_ELEVENLABS),
    ProviderEntry(Stage.TTS, "openai", KeyUse.REQUIRED, "openai", key_env_hint="OPENAI_API_KEY",
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
