"""The providers an agent file may name, per stage, and what each one needs.

The agent file checks its ``[stt]``, ``[llm]`` and ``[tts]`` sections against this
catalog: the provider must exist for that stage, speak the agent's language, and get an
``api_key_env`` exactly when it takes a key.  The adapters themselves live in
``brisvox.providers`` (cloud adapters in ``brisvox.providers.cloud``, embedded models in
``brisvox.providers.local``); the catalog names the extra that installs each one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["CATALOG", "DEFAULT_PROVIDERS", "KeyUse", "ProviderEntry", "Stage", "lookup"]


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
    """One provider of one stage.  ``languages``: primary language subtags it speaks (None: any)."""

    stage: Stage
    name: str
    key: KeyUse
    extra: str
    languages: tuple[str, ...] | None = None
    key_env_hint: str = ""


CATALOG: tuple[ProviderEntry, ...] = (
    ProviderEntry(Stage.STT, "local", KeyUse.NONE, "local", ("en",)),
    ProviderEntry(Stage.STT, "deepgram", KeyUse.REQUIRED, "deepgram", key_env_hint="DEEPGRAM_API_KEY"),
    ProviderEntry(Stage.LLM, "scripted", KeyUse.NONE, ""),
    ProviderEntry(Stage.LLM, "local", KeyUse.NONE, "local-llm"),
    ProviderEntry(Stage.LLM, "openai", KeyUse.REQUIRED, "openai", key_env_hint="OPENAI_API_KEY"),
    ProviderEntry(Stage.LLM, "openrouter", KeyUse.REQUIRED, "openai", key_env_hint="OPENROUTER_API_KEY"),
    ProviderEntry(Stage.LLM, "ollama", KeyUse.NONE, "openai"),
    ProviderEntry(Stage.LLM, "vllm", KeyUse.OPTIONAL, "openai"),
    ProviderEntry(Stage.LLM, "anthropic", KeyUse.REQUIRED, "anthropic", key_env_hint="ANTHROPIC_API_KEY"),
    ProviderEntry(Stage.LLM, "gemini", KeyUse.REQUIRED, "gemini", key_env_hint="GEMINI_API_KEY"),
    ProviderEntry(Stage.TTS, "local", KeyUse.NONE, "local", ("en",)),
    ProviderEntry(Stage.TTS, "cartesia", KeyUse.REQUIRED, "cartesia", key_env_hint="CARTESIA_API_KEY"),
    ProviderEntry(Stage.TTS, "elevenlabs", KeyUse.REQUIRED, "elevenlabs", key_env_hint="ELEVENLABS_API_KEY"),
    ProviderEntry(Stage.TTS, "openai", KeyUse.REQUIRED, "openai", key_env_hint="OPENAI_API_KEY"),
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
