from __future__ import annotations

import brisvox.providers


def test_the_providers_package_exports_exactly_its_interfaces() -> None:
    assert sorted(brisvox.providers.__all__) == sorted(
        [
            "DEFAULT_EVENT_CAPACITY",
            "Channel",
            "Overflow",
            "ProviderError",
            "ProviderErrorKind",
            "SessionBase",
            "SttConfig",
            "SttError",
            "SttEvent",
            "SttProvider",
            "SttSession",
            "Transcript",
            "TtsAudio",
            "TtsCancelled",
            "TtsConfig",
            "TtsError",
            "TtsEvent",
            "TtsFlushed",
            "TtsProvider",
            "TtsSession",
            "TtsWords",
        ]
    )
