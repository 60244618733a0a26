"""brisvox.providers.local: embedded providers that run on this machine with no API key.

* :class:`WhisperStt`: Whisper tiny.en through faster-whisper (CTranslate2, int8), one final
  per finalized segment (``pip install 'brisvox[local]'`` and ``brisvox models fetch``).
* :class:`HibariTts`: hibari's bundled English voice, 24 kHz, no word timings.
* :class:`XLlamaLlm`: a GGUF through xllamacpp's prebuilt llama.cpp (the optional ``local-llm``
  extra), Qwen2.5-Coder-0.5B by default (``brisvox models fetch qwen2_5_coder_0_5b_q4``).

The model libraries are imported when a model is first loaded, not on import.
"""

from brisvox.providers.local.hibari import HIBARI_SAMPLE_RATE, HibariConfig, HibariTts, HibariTtsSession
from brisvox.providers.local.whisper import WHISPER_DIR_ENV, WhisperConfig, WhisperStt, WhisperSttSession
from brisvox.providers.local.xllama import XLlamaConfig, XLlamaLlm

__all__ = [
    "HIBARI_SAMPLE_RATE",
    "WHISPER_DIR_ENV",
    "HibariConfig",
    "HibariTts",
    "HibariTtsSession",
    "WhisperConfig",
    "WhisperStt",
    "WhisperSttSession",
    "XLlamaConfig",
    "XLlamaLlm",
]
