from __future__ import annotations

import brisvox.providers.local


def test_the_local_providers_package_exports_exactly_its_providers() -> None:
    assert sorted(brisvox.providers.local.__all__) == [
        "HIBARI_SAMPLE_RATE",
        "HibariConfig",
        "HibariTts",
        "HibariTtsSession",
        "WHISPER_DIR_ENV",
        "WhisperConfig",
        "WhisperStt",
        "WhisperSttSession",
        "XLlamaConfig",
        "XLlamaLlm",
    ]
