"""Tool specs: what the model is told about a tool, and how the engine treats it.

A :class:`ToolSpec` is plain data.  The :class:`~brisvox.agent.tools.registry.ToolRegistry`
checks it (name rules, timeout, kind-only options, schema) when a tool is registered.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from brisvox.agent.tools.lines import ResultLine
from brisvox.agent.tools.slots import SlotKind

__all__ = [
    "DEFAULT_FILLER_AFTER",
    "DEFAULT_TOOL_TIMEOUT",
    "Requirement",
    "ToolKind",
    "ToolSpec",
]

DEFAULT_TOOL_TIMEOUT = 5.0
"""Seconds a caller waits for a tool by default."""

DEFAULT_FILLER_AFTER = 0.7
"""A tool's own filler delay (seconds); used only by a per-tool filler policy."""


class ToolKind(enum.Enum):
    """ReadOnly tools only look things up; SideEffect tools change the world."""

    READ_ONLY = "read_only"
    SIDE_EFFECT = "side_effect"


@dataclass(frozen=True, slots=True)
class Requirement:
    """What must have happened before a tool is offered: a call of ``tool`` (a ReadOnly one)
    whose result is a JSON object holding every key of ``result`` with that value (``free:
    true``), not yet used by a call of the requiring tool.  ``bind``: the requiring tool's
    arguments that must equal that call's arguments of the same name (the model is offered
    them as constants).  See docs/TOOLS.md, "Offered now"."""

    tool: str
    result: Mapping[str, Any] = field(default_factory=dict, hash=False)
    bind: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolSpec:
    """Name, description, JSON Schema of the arguments, kind and timing of one tool.

    * ``parameters``: a JSON Schema (draft 2020-12) whose ``type`` is ``"object"``.
    * ``timeout``: seconds the caller waits (a ReadOnly call is dropped then; a
      SideEffect call keeps running and its result comes later as a note).
    * ``filler_after``: the tool's own filler delay, or ``None`` to never play a
      filler for it (under the default fixed-delay policy only on/off matters).
    * ``repeatable``: a SideEffect tool whose identical call may repeat in later
      responses of one turn (pressing the same IVR digit twice).
    * ``confirm``: a SideEffect tool held until the user confirms in a later turn.
    * ``requires``: offered (and run) only after the :class:`Requirement` held.
    * ``from_caller``: arguments whose value must be words the caller said in the call
      (a name), and not the agent's own name; a call otherwise is refused before it runs.
    * ``declined_by``: for a ``confirm`` tool, words or phrases ("no", "cancel", "don't")
      that, in the caller's next turn, drop its waiting call (nothing can confirm it then).
    * ``confirmed_by``: for a ``confirm`` tool, words or phrases ("yes", "go ahead") that, in
      the caller's turn while its call waits (and none of ``declined_by``), make
      ``confirm_pending`` the round's only choice, a call required.
    * ``confirm_question``: for a tool held for the caller's yes (``confirm`` here or the agent's
      ``confirm_tools``), the question the agent speaks itself when
      the gate holds a call of it (``str.format`` fields: the call's arguments), ending the
      turn there instead of a model round.
    * ``result_line``: what the agent says itself when a call of the tool succeeds (a
      ``str.format`` template of the call's arguments and ``result``, or a function of the
      arguments and the returned value; :mod:`brisvox.agent.tools.lines`): when every call of
      a round has one, they are spoken and the turn ends there instead of a model round.
    * ``declined_line``: for a tool with ``declined_by``, what the agent says itself when the
      caller's no drops its waiting call (fields: the call's arguments); the turn ends there.
    * ``lookup_when_heard``: for a ReadOnly tool, its arguments the caller says (argument
      name -> :class:`~brisvox.agent.tools.slots.SlotKind`); when the caller's turn gives
      them and no call of the tool answered for those values, the round offers only this
      tool, a call required, those arguments as the heard constants.
    """

    name: str
    description: str
    parameters: Mapping[str, Any] = field(
        default_factory=lambda: {"type": "object", "properties": {}}, hash=False, compare=True
    )
    kind: ToolKind = ToolKind.READ_ONLY
    timeout: float = DEFAULT_TOOL_TIMEOUT
    filler_after: float | None = DEFAULT_FILLER_AFTER
    repeatable: bool = False
    confirm: bool = False
    requires: Requirement | None = None
    from_caller: tuple[str, ...] = ()
    declined_by: tuple[str, ...] = ()
    confirmed_by: tuple[str, ...] = ()
    confirm_question: str | None = None
    result_line: ResultLine | None = field(default=None, compare=False)
    declined_line: str | None = None
    lookup_when_heard: Mapping[str, SlotKind] = field(default_factory=dict, hash=False)

    @property
    def is_side_effect(self) -> bool:
        return self.kind is ToolKind.SIDE_EFFECT

    def with_timeout(self, seconds: float) -> ToolSpec:
        return dataclasses.replace(self, timeout=seconds)

    def with_filler_after(self, seconds: float | None) -> ToolSpec:
        return dataclasses.replace(self, filler_after=seconds)

    def with_repeatable(self, repeatable: bool = True) -> ToolSpec:
        return dataclasses.replace(self, repeatable=repeatable)

    def with_confirm(self, confirm: bool = True) -> ToolSpec:
        return dataclasses.replace(self, confirm=confirm)

    def to_json(self) -> dict[str, Any]:
        """The neutral declaration a provider adapter translates (name, description, parameters)."""
        return {"name": self.name, "description": self.description, "parameters": dict(self.parameters)}
