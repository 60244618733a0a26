"""brisvox.agent.tools: tool specs, the registry, the tool engine, the confirmation gate, fillers."""

from brisvox.agent.tools.spec import DEFAULT_FILLER_AFTER, DEFAULT_TOOL_TIMEOUT, ToolKind, ToolSpec

__all__ = [
    "DEFAULT_FILLER_AFTER",
    "DEFAULT_TOOL_TIMEOUT",
    "ToolKind",
    "ToolSpec",
]
