"""brisvox.agent: the conversation context, tool calling, and the turn logic."""

from brisvox.agent.context import (
    AssistantMessage,
    CharsPerToken,
    Context,
    ContextError,
    Message,
    SystemMessage,
    TokenEstimator,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from brisvox.agent.interrupt import BackchannelSet, InterruptionPolicy
from brisvox.agent.played import (
    PlayedConfig,
    PlayedText,
    TruncateError,
    Truncation,
    TruncationStats,
    apply_truncation,
)
from brisvox.agent.tools.spec import ToolKind, ToolSpec
from brisvox.agent.turn import Adaptive, FixedSilence, TurnMachine, TurnPolicy, TurnState

__all__ = [
    "Adaptive",
    "AssistantMessage",
    "BackchannelSet",
    "CharsPerToken",
    "Context",
    "ContextError",
    "FixedSilence",
    "InterruptionPolicy",
    "Message",
    "PlayedConfig",
    "PlayedText",
    "SystemMessage",
    "TokenEstimator",
    "ToolCall",
    "ToolKind",
    "ToolMessage",
    "ToolSpec",
    "TruncateError",
    "Truncation",
    "TruncationStats",
    "TurnMachine",
    "TurnPolicy",
    "TurnState",
    "UserMessage",
    "apply_truncation",
]
