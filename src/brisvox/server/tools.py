"""Python tools a server offers, by name, for agent files to list.

A :class:`ToolSet` holds every tool the server can offer, registered once at startup.
An agent file lists the ones it uses (``agent.tools``); a listed name the set does not
have stops the start (see :mod:`brisvox.server.agent_file`).  Each call then gets a
tool engine over the agent's tools only.

A tool is an async function ``tool(arguments, ctx)`` (the tool engine's
:class:`~brisvox.agent.tools.Tool`): ``arguments`` is the dict the model sent, already
checked against ``parameters`` (a JSON Schema); ``ctx`` is the
:class:`~brisvox.agent.tools.ToolCallContext` (session, epoch, call, cancellation, and
``ctx.idempotency_key()``).  It returns text or a JSON value, and raises the tool
engine's ``ToolError`` for a failure the model should read.  Two kinds:

* ``@tools.read_only(...)``: only looks things up; may run speculatively, is dropped
  at its timeout.
* ``@tools.side_effect(...)``: changes the world; runs once per idempotency key, keeps
  running past its timeout (the result comes later), and with ``confirm=True`` waits for
  the caller's yes in a later turn.

::

    tools = ToolSet()

    @tools.read_only(description="The current time in a time zone.",
                     parameters={"type": "object", "properties": {"zone": {"type": "string"}}})
    async def get_time(arguments, ctx):
        ...

    brisvox.run_with_tools(tools)   # the brisvox command line, with these tools
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from brisvox.agent.tools import (
    CONFIRM_PENDING,
    DEFAULT_FILLER_AFTER,
    DEFAULT_TOOL_TIMEOUT,
    Tool,
    ToolKind,
    ToolRegistry,
    ToolSpec,
)
from brisvox.core.errors import ConfigError

__all__ = ["ToolSet"]

_EMPTY_OBJECT: Mapping[str, Any] = {"type": "object", "properties": {}}


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

    def read_only(
        self,
        *,
        description: str,
        parameters: Mapping[str, Any] = _EMPTY_OBJECT,
        name: str | None = None,
        timeout: float = DEFAULT_TOOL_TIMEOUT,
        filler_after: float | None = DEFAULT_FILLER_AFTER,
    ) -> Callable[[Tool], Tool]:
        """Decorator: register a ReadOnly tool (named after the function unless ``name`` is given)."""

        def register(tool: Tool) -> Tool:
            self.add(ToolSpec(name=name or _tool_name(tool), description=description, parameters=dict(parameters),
                              kind=ToolKind.READ_ONLY, timeout=timeout, filler_after=filler_after), tool)
            return tool

        return register

    def side_effect(
        self,
        *,
        description: str,
        parameters: Mapping[str, Any] = _EMPTY_OBJECT,
        name: str | None = None,
        timeout: float = DEFAULT_TOOL_TIMEOUT,
        filler_after: float | None = DEFAULT_FILLER_AFTER,
        confirm: bool = False,
        repeatable: bool = False,
    ) -> Callable[[Tool], Tool]:
        """Decorator: register a SideEffect tool."""

        def register(tool: Tool) -> Tool:
            self.add(ToolSpec(name=name or _tool_name(tool), description=description, parameters=dict(parameters),
                              kind=ToolKind.SIDE_EFFECT, timeout=timeout, filler_after=filler_after,
                              confirm=confirm, repeatable=repeatable), tool)
            return tool

        return register

    def spec(self, name: str) -> ToolSpec | None:
        return self._registry.spec(name) if name != CONFIRM_PENDING else None

    def tool(self, name: str) -> Tool | None:
        entry = self._registry.get(name) if name != CONFIRM_PENDING else None
        return entry.tool if entry is not None else None

    def names(self) -> list[str]:
        """Every tool's name, in registration order."""
        return list(self._order)

    def kinds(self) -> dict[str, ToolKind]:
        """Each tool's kind by name (the agent-file check uses it for ``confirm_tools``)."""
        return {name: spec.kind for name in self._order if (spec := self._registry.spec(name)) is not None}

    def registry(self, names: Collection[str], confirm: Collection[str] = ()) -> ToolRegistry:
        """A registry of the named tools only (an agent's tools); ``confirm`` turns the
        confirmation gate on for those (SideEffect tools only)."""
        out = ToolRegistry()
        for name in names:
            entry = self._registry.get(name)
            if entry is None or name == CONFIRM_PENDING:
                raise ConfigError(f"tool {name!r} is not registered (registered: {', '.join(self._order)})")
            spec = entry.spec.with_confirm(True) if name in confirm else entry.spec
            out.register(spec, entry.tool)
        return out

    def __contains__(self, name: object) -> bool:
        return name in self._order

    def __iter__(self) -> Iterator[str]:
        return iter(self._order)

    def __len__(self) -> int:
        return len(self._order)


def _tool_name(tool: Tool) -> str:
    name = getattr(tool, "__name__", "")
    if not isinstance(name, str) or not name:
        raise ConfigError("a tool needs a name: pass name=... for a callable without __name__")
    return name
