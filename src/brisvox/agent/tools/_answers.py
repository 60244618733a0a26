"""How the engine answers a slot and traces it, and its counters (shared by the engine's modules)."""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from brisvox.agent.context import ToolMessage
from brisvox.agent.tools._records import Slot
from brisvox.agent.tools.lines import make_line
from brisvox.agent.tools.results import ErrorKind, Outcome, error_message
from brisvox.agent.tools.spec import ToolSpec
from brisvox.agent.tools.stats import ToolStatsSnapshot, bump
from brisvox.core.clock import Clock

__all__ = ["Answers", "Tally", "delivered_of", "render", "said_of"]

trace = logging.getLogger("brisvox.tools")


def render(value: Any) -> str:
    """A tool's value as the text the model reads (a ``str`` as is, anything else as compact
    JSON: no blanks after separators, which are prompt tokens the next round pays for)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def delivered_of(value: Any) -> tuple[str, ...]:
    """The sends a tool's value lists under ``delivered`` (an object's list of strings; else none).

    Read from the value the tool returned, where the fact arises, and carried with its answer
    (``Execution.delivered``) for the delivery claim guard (``brisvox.agent.guards``)."""
    items = value.get("delivered") if isinstance(value, dict) else None
    if not isinstance(items, list | tuple):
        return ()
    return tuple(item for item in items if isinstance(item, str))


def said_of(spec: ToolSpec, arguments: Mapping[str, Any], value: Any) -> str | None:
    """What the agent says of a call of ``spec`` that returned ``value`` (its ``result_line``), made
    where the typed value is, as ``delivered_of`` is: only a success reaches here."""
    return None if spec.result_line is None else make_line(spec.name, "result_line", spec.result_line, arguments, value)


class Tally:
    """The engine's counters; each change replaces the snapshot (they change rarely)."""

    __slots__ = ("snapshot",)

    def __init__(self) -> None:
        self.snapshot = ToolStatsSnapshot()

    def bump(self, counter: str) -> None:
        self.snapshot = bump(self.snapshot, counter)


class Answers:
    """Settles slots (answer + outcome) and emits the ``brisvox.tools`` trace event of each."""

    __slots__ = ("clock", "session")

    def __init__(self, session: str, clock: Clock) -> None:
        self.session, self.clock = session, clock

    def settle(self, slot: Slot, epoch: int, start: float, answer: ToolMessage, outcome: Outcome,
               delivered: tuple[str, ...] = (), line: str | None = None) -> None:
        slot.answer = answer
        slot.outcome = outcome
        slot.delivered = delivered
        slot.line = line
        self.trace("tool call settled", slot, epoch, outcome, self.clock.now() - start)

    def settle_error(
        self, slot: Slot, epoch: int, start: float, kind: ErrorKind, outcome: Outcome, detail: str
    ) -> None:
        self.settle(slot, epoch, start, error_message(slot.call_id, kind, slot.tool, detail), outcome)

    def refuse(
        self, slot: Slot, epoch: int, kind: ErrorKind, outcome: Outcome, detail: str, *, overwrite: bool = False
    ) -> None:
        """An answer that took no time (planning, admission); an answered slot keeps its answer
        unless ``overwrite``."""
        if slot.answer is not None and not overwrite:
            return
        slot.answer = error_message(slot.call_id, kind, slot.tool, detail)
        slot.outcome = outcome
        self.trace("tool call settled", slot, epoch, outcome, 0.0)

    def trace(self, message: str, slot: Slot, epoch: int, outcome: Outcome, duration: float) -> None:
        if not trace.isEnabledFor(logging.DEBUG):
            return
        duration_us = round(duration * 1_000_000)
        tool = slot.tool[:64]
        trace.debug(
            "%s session=%s epoch=%d call=%s tool=%s outcome=%s duration_us=%d retries=%d",
            message,
            self.session,
            epoch,
            slot.call_id,
            tool,
            outcome.value,
            duration_us,
            slot.retries,
            extra={
                "session": self.session,
                "epoch": epoch,
                "call": slot.call_id,
                "tool": tool,
                "outcome": outcome.value,
                "duration_us": duration_us,
                "retries": slot.retries,
            },
        )
