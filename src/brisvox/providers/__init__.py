"""brisvox.providers: the STT, LLM and TTS interfaces, their events and errors.

Providers as objects, for :class:`brisvox.Agent` (:mod:`brisvox.providers.choice`):
``OpenAI(model=...)``, ``Anthropic``, ``Gemini``, ``OpenRouter``, ``Ollama``, ``Vllm``,
``LocalLlama``, ``Scripted``, ``Auto`` (LLM); ``Deepgram``, ``LocalWhisper`` (STT);
``Cartesia``, ``ElevenLabs``, ``OpenAISpeech``, ``Hibari`` (TTS); ``OpenAIRealtime``, ``GeminiLive``
(speech to speech, with :class:`~brisvox.providers.s2s.S2sPolicy` and ``BargeIn``).

Adapters live in subpackages (``local`` for the embedded models); mocks live in
``brisvox.sim``.  See docs/PROVIDERS.md.
"""

from brisvox.providers.choice import (
    Anthropic,
    Auto,
    Cartesia,
    Deepgram,
    ElevenLabs,
    Gemini,
    GeminiLive,
    Hibari,
    LocalLlama,
    LocalWhisper,
    Ollama,
    OpenAI,
    OpenAIRealtime,
    OpenAISpeech,
    OpenRouter,
    ProviderChoice,
    Scripted,
    Stage,
    Vllm,
)
from brisvox.providers.errors import ProviderError, ProviderErrorKind
from brisvox.providers.llm import (
    Done,
    FinishReason,
    GeneratorLlmStream,
    LlmError,
    LlmEvent,
    LlmProvider,
    LlmRequest,
    LlmStream,
    ProviderDataDelta,
    TextDelta,
    ToolCallDelta,
    ToolChoice,
    ToolChoiceMode,
    Usage,
)
from brisvox.providers.s2s import BargeIn, S2sPolicy
from brisvox.providers.session import DEFAULT_EVENT_CAPACITY, SessionBase
from brisvox.providers.stt import SttConfig, SttError, SttEvent, SttProvider, SttSession, Transcript
from brisvox.providers.tts import (
    TtsAudio,
    TtsCancelled,
    TtsConfig,
    TtsError,
    TtsEvent,
    TtsFlushed,
    TtsProvider,
    TtsSession,
    TtsSessionBase,
    TtsWords,
)

__all__ = [
    "DEFAULT_EVENT_CAPACITY",
    "Anthropic",
    "Auto",
    "BargeIn",
    "Cartesia",
    "Deepgram",
    "Done",
    "ElevenLabs",
    "FinishReason",
    "Gemini",
    "GeminiLive",
    "GeneratorLlmStream",
    "Hibari",
    "LlmError",
    "LlmEvent",
    "LlmProvider",
    "LlmRequest",
    "LlmStream",
    "LocalLlama",
    "LocalWhisper",
    "Ollama",
    "OpenAI",
    "OpenAIRealtime",
    "OpenAISpeech",
    "OpenRouter",
    "ProviderChoice",
    "ProviderDataDelta",
    "ProviderError",
    "ProviderErrorKind",
    "S2sPolicy",
    "Scripted",
    "SessionBase",
    "Stage",
    "SttConfig",
    "SttError",
    "SttEvent",
    "SttProvider",
    "SttSession",
    "TextDelta",
    "ToolCallDelta",
    "ToolChoice",
    "ToolChoiceMode",
    "Transcript",
    "TtsAudio",
    "TtsCancelled",
    "TtsConfig",
    "TtsError",
    "TtsEvent",
    "TtsFlushed",
    "TtsProvider",
    "TtsSession",
    "TtsSessionBase",
    "TtsWords",
    "Usage",
    "Vllm",
]
