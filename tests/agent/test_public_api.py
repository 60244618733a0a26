from __future__ import annotations

import brisvox.agent
import brisvox.agent.tools


def test_the_agent_package_exports_exactly_its_public_api() -> None:
    assert sorted(brisvox.agent.__all__) == sorted(
        [
            "Adaptive",
            "PlayedConfig",
            "PlayedText",
            "TruncateError",
            "Truncation",
            "TruncationStats",
            "apply_truncation",
            "BackchannelSet",
            "FixedSilence",
            "InterruptionPolicy",
            "TurnMachine",
            "TurnPolicy",
            "TurnState",
            "AssistantMessage",
            "CharsPerToken",
            "Context",
            "ContextError",
            "Message",
            "SystemMessage",
            "TokenEstimator",
            "ToolCall",
            "ToolKind",
            "ToolMessage",
            "ToolSpec",
            "UserMessage",
        ]
    )
    for name in brisvox.agent.__all__:
        assert hasattr(brisvox.agent, name)


def test_the_tools_package_exports_exactly_its_public_api() -> None:
    assert sorted(brisvox.agent.tools.__all__) == sorted(
        [
            "CONFIRM_PENDING",
            "DEFAULT_FILLER_DELAY",
            "DEFAULT_FILLER_TEXT",
            "FillerChoice",
            "FillerClips",
            "FillerConfig",
            "FillerPhrase",
            "FillerPlan",
            "FillerPolicy",
            "Grounds",
            "Requirement",
            "ResultLine",
            "SlotKind",
            "StaticClips",
            "spoken",
            "DEFAULT_FILLER_AFTER",
            "DEFAULT_TOOL_TIMEOUT",
            "CallMeta",
            "CancelToken",
            "Confirmations",
            "ToolEngineConfig",
            "ErrorKind",
            "Execution",
            "IdempotencyKey",
            "IdempotencyUsage",
            "LateNote",
            "Outcome",
            "RegistryError",
            "RegistryErrorKind",
            "Speculation",
            "Tool",
            "ToolCallContext",
            "ToolEngine",
            "ToolError",
            "ToolKind",
            "ToolRegistry",
            "UiUnavailable",
            "ToolSpec",
            "ToolStatsSnapshot",
        ]
    )
    for name in brisvox.agent.tools.__all__:
        assert hasattr(brisvox.agent.tools, name)
