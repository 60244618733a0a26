"""brisvox: a real-time voice-agent framework.

The Python API (docs/AGENTS.md): :class:`Agent`, tools declared with :mod:`brisvox.tool`,
providers as objects (:mod:`brisvox.providers`), keyless tests (:mod:`brisvox.testing`).
Names are imported when first used, so ``import brisvox`` (and ``brisvox --help``) stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from brisvox import tool
    from brisvox.agent.tools import ToolError
    from brisvox.engine.hooks import Hook, HookPoint
    from brisvox.server.agent import Agent, AgentError
    from brisvox.server.embed import asgi
    from brisvox.server.tools import ToolSet
    from brisvox.tool import FunctionTool, ToolContext

__version__ = "0.1.0"

__all__ = [
    "Agent", "AgentError", "FunctionTool", "Hook", "HookPoint", "ToolContext", "ToolError", "ToolSet", "__version__", "asgi", "run",
    "run_with_tools", "tool",
]

_LAZY = {
    "Agent": ("brisvox.server.agent", "Agent"),
    "AgentError": ("brisvox.server.agent", "AgentError"),
    "asgi": ("brisvox.server.embed", "asgi"),
    "Hook": ("brisvox.engine.hooks", "Hook"),
    "HookPoint": ("brisvox.engine.hooks", "HookPoint"),
    "tool": ("brisvox.tool", None),
    "FunctionTool": ("brisvox.tool", "FunctionTool"),
    "ToolContext": ("brisvox.tool", "ToolContext"),
    "ToolError": ("brisvox.agent.tools", "ToolError"),
    "ToolSet": ("brisvox.server.tools", "ToolSet"),
}


def __getattr__(name: str) -> Any:
    where = _LAZY.get(name)
    if where is None:
        raise AttributeError(f"module 'brisvox' has no attribute {name!r}")
    module = importlib.import_module(where[0])
    value = module if where[1] is None else getattr(module, where[1])
    globals()[name] = value
    return value


def run_with_tools(tools: ToolSet, argv: list[str] | None = None) -> int:
    """The ``brisvox`` program with your Python tools registered: ``serve`` and ``check``
    accept agent files that list them by name.  Returns the exit status::

        import sys, brisvox

        tools = brisvox.ToolSet()

        @tools.read_only
        async def get_time(zone: str) -> str:
            \"\"\"The current time in an IANA time zone.\"\"\"
            ...

        if __name__ == "__main__":
            sys.exit(brisvox.run_with_tools(tools))
    """
    from brisvox.__main__ import main

    return main(argv, tools=tools)


def run(agent: Agent, argv: list[str] | None = None) -> int:
    """The ``brisvox`` program around ``agent``: ``serve`` and ``check`` use it when no agent
    file is named.  Returns the exit status::

        if __name__ == "__main__":
            sys.exit(brisvox.run(agent))
    """
    from brisvox.__main__ import main

    return main(argv, agent=agent)
