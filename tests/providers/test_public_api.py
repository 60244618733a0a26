from __future__ import annotations

import brisvox.providers


def test_the_providers_package_exports_exactly_its_interfaces() -> None:
    assert sorted(brisvox.providers.__all__) == sorted(
        [
            "Anthropic", "Auto", "Cartesia", "Deepgram", "ElevenLabs", "Gemini", "Hibari", "LocalLlama",
            "LocalWhisper", "Ollama", "OpenAI", "OpenAISpeech", "OpenRouter", "ProviderChoice", "Scripted", "Stage",
            "Vllm", "OpenAIRealtime", "GeminiLive", "S2sPolicy", "BargeIn",
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
    )
