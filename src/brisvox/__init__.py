"""brisvox: a real-time voice-agent framework."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from brisvox.server.tools import ToolSet

__version__ = "0.1.0"

__all__ = ["__version__", "run_with_tools"]


def run_with_tools(tools: ToolSet, argv: list[str] | None = None) -> int:
    """The ``brisvox`` program with your Python tools registered: ``serve`` and ``check``
    accept agent files that list them by name.  Returns the exit status::

        import sys, brisvox
        from brisvox.server import ToolSet

        tools = ToolSet()
        ...  # @tools.read_only(...) / @tools.side_effect(...)
        if __name__ == "__main__":
            sys.exit(brisvox.run_with_tools(tools))
    """
    from brisvox.__main__ import main

    return main(argv, tools=tools)
