"""Calling a tool without letting it unwind into the engine, and the texts of the engine's answers."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from brisvox.agent.tools.registry import Tool, ToolCallContext, ToolError
from brisvox.agent.tools.results import ErrorKind, error_message

log = logging.getLogger(__name__)



@dataclass(frozen=True, slots=True)
class Returned:
    value: Any


@dataclass(frozen=True, slots=True)
class Raised:
    detail: str
    crashed: bool


async def guarded(tool: Tool, arguments: dict[str, Any], ctx: ToolCallContext) -> Returned | Raised:
    """Calls the tool; a raise (in the call or in its awaitable) becomes a value, never an unwind."""
    try:
        return Returned(await tool(arguments, ctx))
    except ToolError as e:
        return Raised(str(e) or "the tool failed", crashed=False)
    except Exception as e:
        # Only the type: an exception message may quote the arguments.
        log.warning("a tool raised %s", type(e).__name__)
        return Raised(f"the tool crashed ({type(e).__name__})", crashed=True)


def lost_body(call_id: str, tool: str, detail: str) -> str:
    return error_message(call_id, ErrorKind.UNKNOWN_OUTCOME, tool, detail).content


def timed_out_running(timeout: float) -> str:
    return (
        f"no answer within {timeout:g} s, but the action keeps running; its result will follow as a "
        "note. Do not call it again; tell the caller it is still in progress"
    )


STALE = "this call belongs to a turn that was superseded; it was not run"
EXHAUSTED = "too many invalid tool calls in this turn; no more tools run now. Answer the caller without tools"
NOT_STARTED = "the caller interrupted before this call started; it did not run"
HUNG_UP = "the caller hung up before this action started; it did not run"
INTERRUPTED_RO = "the caller interrupted; the lookup was cancelled"
INTERRUPTED_SE = (
    "the caller interrupted, but the action keeps running; its result will follow as a note. Do not repeat it"
)
DUPLICATE = "a call with this id is already running; its result comes once"
UNKNOWN = "the outcome of this action is unknown (it ended without a result); do not repeat it, tell the caller"
ALREADY_DONE = (
    "an identical call already ran earlier in this turn and succeeded; its result is above. "
    "Do not repeat this call; tell the caller what happened"
)
ALREADY_REPORTED = "an identical earlier call already finished; its result is in the note above. Do not repeat it"
ORPHAN_RUNNING = "an identical earlier call is still running; its result follows as a note. Do not repeat it"
STORE_FULL = "too many actions are still running; this one was not started. Try again shortly"
NOT_JSON = "the tool returned a value that is not JSON"
BACKSTOP = "the action did not finish within its hard time limit; its outcome is unknown. Do not repeat it"
CRASHED = "the action crashed; its outcome is unknown. Do not repeat it, tell the caller"
ABORTED = "the session ended while the action ran; its outcome is unknown"
