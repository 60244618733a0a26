"""Tool-call planning: the engine's synchronous first step, pure (no I/O, no clock, no tasks).

Given a response's calls, the registry and the argument size cap, :func:`plan_calls`
answers every malformed call at once (the call cap, an assembler-rejected call, an
unknown tool, arguments that are not an object, too large, or off the schema) and, for a
speculative response, marks SideEffect calls as held.  Nothing runs here.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from brisvox.agent.assemble import DEFAULT_MAX_CALLS, UNKNOWN_TOOL_NAME, InvalidCall
from brisvox.agent.context import ToolCall
from brisvox.agent.tools._records import Slot
from brisvox.agent.tools.registry import ToolRegistry
from brisvox.agent.tools.results import ErrorKind, Outcome, error_message

__all__ = ["arguments_fit", "malformed", "plan_calls"]


def arguments_fit(arguments: Any, limit: int) -> bool:
    """Whether the compact JSON form of ``arguments`` is at most ``limit`` UTF-8 bytes."""
    try:
        text = json.dumps(arguments, ensure_ascii=False, separators=(",", ":"))
    except (TypeError, ValueError):
        return False
    if len(text) > limit:
        return False
    return text.isascii() or len(text.encode()) <= limit


def malformed(slot: Slot, kind: ErrorKind, outcome: Outcome, detail: str) -> None:
    """Answers ``slot`` with a structured error and marks the round as carrying a malformed call."""
    slot.answer = error_message(slot.call_id, kind, slot.tool, detail)
    slot.outcome = outcome
    slot.malformed = True


def plan_calls(
    calls: Sequence[ToolCall | InvalidCall],
    registry: ToolRegistry,
    *,
    max_argument_bytes: int,
    speculative: bool,
    offered: frozenset[str] | None = None,
) -> list[Slot]:
    """One slot per call, in issue order; malformed calls answered, speculative SideEffects held.

    ``offered``: the tools the model may call now (None: every registered one); a call to any
    other is answered ``unknown_tool`` like a call to a tool that does not exist."""
    slots = []
    for index, call in enumerate(calls):
        slot = Slot(index=index, call_id=call.id, tool=call.name or UNKNOWN_TOOL_NAME)
        slots.append(slot)
        if index >= DEFAULT_MAX_CALLS:
            malformed(
                slot,
                ErrorKind.TOO_MANY_CALLS,
                Outcome.TOO_MANY_CALLS,
                f"at most {DEFAULT_MAX_CALLS} tool calls per response; this one was not run",
            )
            continue
        if isinstance(call, InvalidCall):
            slot.answer = call.error_result()
            slot.outcome = Outcome.MALFORMED
            slot.malformed = True
            continue
        slot.call = call
        registered = registry.get(call.name) if offered is None or call.name in offered else None
        if registered is None:
            malformed(slot, ErrorKind.UNKNOWN_TOOL, Outcome.UNKNOWN_TOOL, f"there is no tool named {call.name!r}")
            continue
        slot.registered = registered
        if not isinstance(call.arguments, dict):
            malformed(slot, ErrorKind.INVALID_ARGUMENTS, Outcome.INVALID_ARGUMENTS, "the arguments must be a JSON object")
            continue
        if not arguments_fit(call.arguments, max_argument_bytes):
            malformed(
                slot,
                ErrorKind.ARGUMENTS_TOO_LARGE,
                Outcome.ARGUMENTS_TOO_LARGE,
                f"the arguments exceed {max_argument_bytes} bytes; send shorter arguments",
            )
            continue
        if not registered.schema.is_valid(call.arguments):
            issues, more = registered.schema.issues(call.arguments)
            slot.answer = error_message(
                call.id,
                ErrorKind.INVALID_ARGUMENTS,
                call.name,
                "the arguments do not match the tool's schema; fix them and call again",
                issues=issues,
                truncated=more,
            )
            slot.outcome = Outcome.INVALID_ARGUMENTS
            slot.malformed = True
            continue
        if speculative and registered.spec.is_side_effect:
            slot.held = True
    return slots
