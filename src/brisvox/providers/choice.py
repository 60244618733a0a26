"""Providers as objects: which provider runs a stage, with its options and the variable its key is in.

``OpenAI(model="gpt-4o-mini")``, ``Deepgram()``, ``Cartesia(voice=...)`` ... each return a
:class:`ProviderChoice`, the same object an agent file's ``[stt]``, ``[llm]``, ``[tts]`` and
``[s2s]`` sections become (``OpenAIRealtime()`` and ``GeminiLive()`` are speech-to-speech
models: one model hears, decides and speaks, in place of the three stages), so an agent built in Python and one read from a file compare equal.
Nothing connects or reads a key here: the key is read from the environment variable the
choice names (as a :class:`~brisvox.core.secret.Secret`) when the server builds the
adapter, and the adapter is imported only then (a missing extra is a ConfigError naming
it).  Options are the adapter's ``Options`` fields; ``brisvox check`` and
:class:`brisvox.Agent` check them against the provider catalog (docs/CONFIG.md).  Sample
rates are the server's concern: a TTS that cannot speak the call's rate is wrapped in
:class:`~brisvox.providers.resampling.ResamplingTts` (nothing is dropped).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from brisvox.core.secret import Secret

__all__ = [
    "Anthropic", "Auto", "Cartesia", "Deepgram", "ElevenLabs", "Gemini", "GeminiLive", "Hibari", "LocalLlama",
    "LocalWhisper", "Ollama", "OpenAI", "OpenAIRealtime", "OpenAISpeech", "OpenRouter", "ProviderChoice", "Scripted",
    "Stage", "Vllm",
]


class Stage(enum.Enum):
    STT = "stt"
    LLM = "llm"
    TTS = "tts"
    S2S = "s2s"  # a speech-to-speech model in place of the other three


CASCADE = (Stage.STT, Stage.LLM, Stage.TTS)
"""The stages of a cascaded agent (an S2S agent has one model for the three)."""


@dataclass(frozen=True, slots=True)
class ProviderChoice:
    """The provider of one stage, its options and its key's variable.  ``api_key`` is the key
    when it was read already (an agent file checked with an environment), else None."""

    stage: Stage
    provider: str
    options: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    api_key_env: str | None = None
    api_key: Secret | None = field(default=None, compare=False)


def _choice(stage: Stage, provider: str, api_key_env: str | None, **options: Any) -> ProviderChoice:
    given = {k: v for k, v in options.items() if v is not None}
    return ProviderChoice(stage, provider, MappingProxyType(given), api_key_env)


# --- speech to text -----------------------------------------------------------------------------

def LocalWhisper(prompt: str | None = None) -> ProviderChoice:
    """The embedded faster-whisper model (English; ``brisvox models fetch``); ``prompt``: the
    agent's vocabulary (names, party sizes, times), which steers what Whisper writes."""
    return _choice(Stage.STT, "local", None, prompt=prompt)


def Deepgram(model: str | None = None, *, api_key_env: str = "DEEPGRAM_API_KEY", **options: Any) -> ProviderChoice:
    """Deepgram streaming STT (the ``deepgram`` extra)."""
    return _choice(Stage.STT, "deepgram", api_key_env, model=model, **options)


# --- the language model -------------------------------------------------------------------------

def OpenAI(model: str | None = None, *, api_key_env: str = "OPENAI_API_KEY", **options: Any) -> ProviderChoice:
    """OpenAI chat completions (``temperature`` and ``max_tokens`` go with each request)."""
    return _choice(Stage.LLM, "openai", api_key_env, model=model, **options)


def OpenRouter(model: str | None = None, *, api_key_env: str = "OPENROUTER_API_KEY",
               **options: Any) -> ProviderChoice:
    return _choice(Stage.LLM, "openrouter", api_key_env, model=model, **options)


def Ollama(model: str | None = None, **options: Any) -> ProviderChoice:
    """A local Ollama server (no key)."""
    return _choice(Stage.LLM, "ollama", None, model=model, **options)


def Vllm(model: str | None = None, *, api_key_env: str | None = None, **options: Any) -> ProviderChoice:
    """A vLLM server (a key only when it takes one)."""
    return _choice(Stage.LLM, "vllm", api_key_env, model=model, **options)


def Anthropic(model: str | None = None, *, api_key_env: str = "ANTHROPIC_API_KEY",
              **options: Any) -> ProviderChoice:
    return _choice(Stage.LLM, "anthropic", api_key_env, model=model, **options)


def Gemini(model: str | None = None, *, api_key_env: str = "GEMINI_API_KEY", **options: Any) -> ProviderChoice:
    return _choice(Stage.LLM, "gemini", api_key_env, model=model, **options)


def LocalLlama(**options: Any) -> ProviderChoice:
    """The embedded Qwen2.5-Coder-0.5B through llama.cpp (the ``local-llm`` extra)."""
    return _choice(Stage.LLM, "local", None, **options)


def Scripted() -> ProviderChoice:
    """The scripted restaurant host: keyword rules, no model, no key."""
    return _choice(Stage.LLM, "scripted", None)


def Auto() -> ProviderChoice:
    """The first LLM the environment offers (docs/CONFIG.md, ``provider = "auto"``)."""
    return _choice(Stage.LLM, "auto", None)


# --- text to speech -----------------------------------------------------------------------------

def Hibari() -> ProviderChoice:
    """The embedded hibari voice (English, 24 kHz, resampled to the call's rate)."""
    return _choice(Stage.TTS, "local", None)


def Cartesia(voice: str | None = None, *, api_key_env: str = "CARTESIA_API_KEY", **options: Any) -> ProviderChoice:
    return _choice(Stage.TTS, "cartesia", api_key_env, voice=voice, **options)


def ElevenLabs(voice: str | None = None, *, api_key_env: str = "ELEVENLABS_API_KEY",
               **options: Any) -> ProviderChoice:
    return _choice(Stage.TTS, "elevenlabs", api_key_env, voice=voice, **options)


def OpenAISpeech(voice: str | None = None, *, api_key_env: str | None = "OPENAI_API_KEY",
                 **options: Any) -> ProviderChoice:
    """OpenAI speech (24 kHz, resampled to the call's rate)."""
    return _choice(Stage.TTS, "openai", api_key_env, voice=voice, **options)


# --- speech to speech -----------------------------------------------------------------------------

def OpenAIRealtime(model: str | None = None, *, voice: str | None = None, api_key_env: str = "OPENAI_API_KEY",
                   **options: Any) -> ProviderChoice:
    """OpenAI Realtime (24 kHz in and out; the ``cloud`` extra)."""
    return _choice(Stage.S2S, "openai-realtime", api_key_env, model=model, voice=voice, **options)


def GeminiLive(model: str | None = None, *, voice: str | None = None, api_key_env: str = "GEMINI_API_KEY",
               **options: Any) -> ProviderChoice:
    """Gemini Live (16 kHz in, 24 kHz out; the ``cloud`` extra)."""
    return _choice(Stage.S2S, "gemini-live", api_key_env, model=model, voice=voice, **options)
