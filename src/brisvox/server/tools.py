"""Python tools a server offers, by name, for agent files to list.

A :class:`ToolSet` holds every tool the server can offer, registered once at startup.
An agent file lists the ones it uses (``agent.tools``); a listed name the set does not
have stops the start (see :mod:`brisvox.server.agent_file`).  Each call then gets a
tool engine over the agent's tools only.

Tools are declared from async functions with :mod:`brisvox.tool` (name, docstring and
signature are the declaration) and added with :meth:`ToolSet.include`, or declared and
added at once with ``@tools.read_only`` / ``@tools.side_effect`` (the same decorators,
same options).  :meth:`ToolSet.add` registers a spec and a raw
:class:`~brisvox.agent.tools.Tool` (``tool(arguments, ctx)``) as the tool engine takes them.

::

    tools = ToolSet()

    @tools.read_only(timeout=1.0)
    async def get_time(zone: str) -> str:
        "The current time in an IANA time zone."
        ...

    brisvox.run_with_tools(tools)   # the brisvox command line, with these tools

Every set also offers the built-in telephony tools (``end_call``, ``transfer_call``,
``send_dtmf``: :mod:`brisvox.server.phone_tools`) by name, unless a tool of its own has the
name; they are not in :meth:`ToolSet.names`, :meth:`ToolSet.kinds` or ``len`` (all three are
SideEffect tools, which is what ``confirm_tools`` needs).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator
from typing import Any

from brisvox import tool
from brisvox.agent.tools import CONFIRM_PENDING, Tool, ToolKind, ToolRegistry, ToolSpec
from brisvox.core.errors import ConfigError
from brisvox.server.phone_tools import BUILTIN_TOOLS
from brisvox.tool import FunctionTool

__all__ = ["ToolSet"]

class ToolSet:
    """Tools by name (see the module docs), checked by the tool engine's registry as they are added."""

    __slots__ = ("_order", "_registry")

    def __init__(self) -> None:
        self._registry = ToolRegistry()
        self._order: list[str] = []

    def add(self, spec: ToolSpec, tool: Tool) -> None:
        """Register ``tool`` under ``spec``; a bad spec is a RegistryError (a ConfigError) naming the tool."""
        self._registry.register(spec, tool)
        self._order.append(spec.name)

    def include(self, *tools: FunctionTool) -> None:
        """Register tools declared with :mod:`brisvox.tool` (a method must be bound: ``instance.method``)."""
        for t in tools:
            if not isinstance(t, FunctionTool):
                raise ConfigError(f"{t!r} is not a tool: declare it with @brisvox.tool.read_only or .side_effect")
            if not t.bound:
                raise ConfigError(f"tool {t.name!r} is a method: include instance.{t.name}, not the class's")
            self.add(t.spec, t)

    def read_only(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Decorator: :func:`brisvox.tool.read_only`, and the tool registered here."""
        return self._declared(tool.read_only, fn, options)

    def side_effect(self, fn: Callable[..., Any] | None = None, /, **options: Any) -> Any:
        """Decorator: :func:`brisvox.tool.side_effect`, and the tool registered here."""
        return self._declared(tool.side_effect, fn, options)

    def _declared(self, make: Callable[..., Any], fn: Callable[..., Any] | None, options: dict[str, Any]) -> Any:
        def register(f: Callable[..., Any]) -> FunctionTool:
            declared: FunctionTool = make(**options)(f)
            self.include(declared)
            return declared

        return register(fn) if fn is not None else register

    def spec(self, name: str) -> ToolSpec | None:
        found = self._entry(name)
        return found[0] if found is not None else None

    def tool(self, name: str) -> Tool | None:
        found = self._entry(name)
        return found[1] if found is not None else None

    def _entry(self, name: str) -> tuple[ToolSpec, Tool] | None:
        """A tool of its own by ``name``, else the built-in one."""
        if name == CONFIRM_PENDING:
            return None
        entry = self._registry.get(name)
        if entry is not None:
            return entry.spec, entry.tool
        builtin = BUILTIN_TOOLS.get(name)
        return (builtin.spec, builtin) if builtin is not None else None

    def names(self) -> list[str]:
        """Every tool's name, in registration order."""
        return list(self._order)

    def offered(self) -> list[str]:
        """Every name :meth:`registry` can resolve: the set's own tools in registration order,
        then the built-in ones it does not override (``end_call``, ...)."""
        return [*self._order, *(name for name in BUILTIN_TOOLS if name not in self._registry)]

    def kinds(self) -> dict[str, ToolKind]:
        """Each tool's kind by name (the agent-file check uses it for ``confirm_tools``)."""
        return {name: spec.kind for name in self._order if (spec := self._registry.spec(name)) is not None}

    def registry(self, names: Collection[str], confirm: Collection[str] = ()) -> ToolRegistry:
        """A registry of the named tools only (an agent's tools); ``confirm`` turns the
        confirmation gate on for those (SideEffect tools only)."""
        out = ToolRegistry()
        for name in names:
            found = self._entry(name)
            if found is None:
                raise ConfigError(f"tool {name!r} is not registered (registered: {', '.join(self._order)})")
            spec = found[0].with_confirm(True) if name in confirm else found[0]
            out.register(spec, found[1])
        return out

    def __contains__(self, name: object) -> bool:
        return name in self._order or name in BUILTIN_TOOLS

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)

