"""The demo agent: a restaurant that looks up availability, offers alternatives and books a table.

:data:`DEMO_AGENT_FILE` is its agent file (``brisvox serve`` with no agent file serves
it); :func:`demo_tools` gives its tools over the in-memory
:class:`~brisvox.agent.flows.example.Restaurant` of the flows example:
``check_availability`` (ReadOnly) and ``book_table`` (SideEffect, behind the
confirmation gate: the agent file lists it in ``confirm_tools``).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from brisvox.agent.flows.example import Restaurant, restaurant_tools
from brisvox.server.tools import ToolSet

__all__ = ["DEMO_AGENT_FILE", "demo_tools"]

DEMO_AGENT_FILE = Path(__file__).resolve().parent / "agents" / "restaurant.toml"

_DEMO_NAMES = {"check_availability": "check_availability", "make_reservation": "book_table"}


def demo_tools(restaurant: Restaurant | None = None, into: ToolSet | None = None) -> ToolSet:
    """The demo's tools, added to ``into`` (a new ToolSet by default)."""
    tools = into if into is not None else ToolSet()
    book = restaurant if restaurant is not None else Restaurant()
    for spec, function in restaurant_tools(book):
        name = _DEMO_NAMES.get(spec.name)
        if name is not None:
            tools.add(dataclasses.replace(spec, name=name), function)
    return tools
