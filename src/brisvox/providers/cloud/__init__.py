"""Cloud provider adapters: users bring the keys of the providers they already use.

LLMs stream over HTTP (httpx): :class:`OpenAiCompatLlm` (presets ``openai``,
``openrouter``, ``ollama``, ``vllm``), :class:`AnthropicLlm`, :class:`GeminiLlm`.  Speech
streams over WebSocket (websockets): :class:`DeepgramStt`, :class:`CartesiaTts`,
:class:`ElevenLabsTts`; :class:`OpenAiSpeechTts` streams PCM over HTTP.  Speech-to-speech
models run over WebSocket: :class:`OpenAiRealtime`, :class:`GeminiLive` (docs/S2S.md).  Keys come only
from the environment (``Options.from_env``) as :class:`~brisvox.core.secret.Secret`.

Names load lazily, so an install with one vendor's extra (``brisvox[deepgram]``) imports
only that vendor's transport library.  See docs/PROVIDERS.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from brisvox.providers.cloud.anthropic import AnthropicLlm, AnthropicOptions
    from brisvox.providers.cloud.cartesia import CartesiaOptions, CartesiaTts
    from brisvox.providers.cloud.deepgram import DeepgramOptions, DeepgramStt
    from brisvox.providers.cloud.elevenlabs import ElevenLabsOptions, ElevenLabsTts
    from brisvox.providers.cloud.gemini import GeminiLlm, GeminiOptions
    from brisvox.providers.cloud.gemini_live import GeminiLive, GeminiLiveOptions
    from brisvox.providers.cloud.openai_compat import OpenAiCompatLlm, OpenAiCompatOptions
    from brisvox.providers.cloud.openai_realtime import OpenAiRealtime, OpenAiRealtimeOptions
    from brisvox.providers.cloud.openai_speech import OpenAiSpeechOptions, OpenAiSpeechTts

__all__ = [
    "AnthropicLlm",
    "AnthropicOptions",
    "CartesiaOptions",
    "CartesiaTts",
    "DeepgramOptions",
    "DeepgramStt",
    "ElevenLabsOptions",
    "ElevenLabsTts",
    "GeminiLive",
    "GeminiLiveOptions",
    "GeminiLlm",
    "GeminiOptions",
    "OpenAiCompatLlm",
    "OpenAiCompatOptions",
    "OpenAiRealtime",
    "OpenAiRealtimeOptions",
    "OpenAiSpeechOptions",
    "OpenAiSpeechTts",
]

_MODULES = {
    "AnthropicLlm": "anthropic",
    "AnthropicOptions": "anthropic",
    "CartesiaOptions": "cartesia",
    "CartesiaTts": "cartesia",
    "ElevenLabsOptions": "elevenlabs",
    "ElevenLabsTts": "elevenlabs",
    "OpenAiSpeechOptions": "openai_speech",
    "OpenAiSpeechTts": "openai_speech",
    "DeepgramOptions": "deepgram",
    "DeepgramStt": "deepgram",
    "GeminiLive": "gemini_live",
    "GeminiLiveOptions": "gemini_live",
    "GeminiLlm": "gemini",
    "GeminiOptions": "gemini",
    "OpenAiRealtime": "openai_realtime",
    "OpenAiRealtimeOptions": "openai_realtime",
    "OpenAiCompatLlm": "openai_compat",
    "OpenAiCompatOptions": "openai_compat",
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)
