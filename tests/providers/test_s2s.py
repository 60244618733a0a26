from __future__ import annotations

import pytest

import brisvox.providers.s2s as s2s
from brisvox.core.clock import SimClock
from brisvox.core.errors import ConfigError
from brisvox.providers.cloud.gemini_live import GeminiLiveSession
from brisvox.providers.cloud.openai_realtime import OpenAiRealtimeSession
from brisvox.providers.resilient import DEFAULT_POLICY
from brisvox.providers.s2s import S2sConfig, S2sSession


def test_the_s2s_module_exports_exactly_its_interface() -> None:
    assert sorted(s2s.__all__) == sorted(
        [
            "BargeIn",
            "S2sAudio",
            "S2sConfig", "S2sPolicy",
            "S2sError",
            "S2sEvent",
            "S2sInteractionEnded",
            "S2sInterrupted",
            "S2sProvider",
            "S2sReady",
            "S2sResponseDone",
            "S2sSession",
            "S2sSpeechStarted",
            "S2sSpeechStopped",
            "S2sToolCall",
            "S2sToolCallsCancelled",
            "S2sToolResult",
            "S2sTranscript",
            "Scheduling",
            "Speaker",
        ]
    )


def test_both_adapter_sessions_are_s2s_sessions() -> None:
    clock = SimClock()
    assert isinstance(OpenAiRealtimeSession(clock, DEFAULT_POLICY), S2sSession)
    assert isinstance(GeminiLiveSession(16_000, clock, DEFAULT_POLICY), S2sSession)


def test_a_config_with_a_rate_that_is_not_positive_is_refused_naming_it() -> None:
    with pytest.raises(ConfigError, match="input_rate"):
        S2sConfig(input_rate=0)
