from __future__ import annotations

import brisvox.providers.cloud as cloud


def test_the_cloud_package_exports_exactly_its_adapters_and_options() -> None:
    assert sorted(cloud.__all__) == sorted(
        [
            "AnthropicLlm",
            "AnthropicOptions",
            "CartesiaOptions",
            "CartesiaTts",
            "ElevenLabsOptions",
            "ElevenLabsTts",
            "OpenAiSpeechOptions",
            "OpenAiSpeechTts",
            "DeepgramOptions",
            "DeepgramStt",
            "GeminiLive",
            "GeminiLiveOptions",
            "GeminiLlm",
            "GeminiOptions",
            "OpenAiCompatLlm",
            "OpenAiCompatOptions",
            "OpenAiRealtime",
            "OpenAiRealtimeOptions",
        ]
    )


def test_every_exported_name_resolves_lazily() -> None:
    for name in cloud.__all__:
        assert getattr(cloud, name).__name__ == name
