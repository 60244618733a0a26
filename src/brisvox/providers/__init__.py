"""brisvox.providers: the STT, LLM and TTS interfaces, their events and errors.

Adapters live in subpackages (``local`` for the embedded models); mocks live in
``brisvox.sim``.  See docs/PROVIDERS.md.
"""

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
    "Done",
    "FinishReason",
    "GeneratorLlmStream",
    "LlmError",
    "LlmEvent",
    "LlmProvider",
    "LlmRequest",
    "LlmStream",
    "ProviderDataDelta",
    "ProviderError",
    "ProviderErrorKind",
    "SessionBase",
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
]
