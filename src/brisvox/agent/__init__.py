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
from brisvox.agent.tools.spec import ToolKind, ToolSpec

__all__ = [
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
