"""The built-in telephony tools: ``end_call``, ``transfer_call``, ``send_dtmf``.

An agent file lists them by name in ``agent.tools`` (every :class:`~brisvox.server.tools.ToolSet`
offers them); the Python API passes these objects in ``brisvox.Agent(tools=[...])``.  They act
through the call's :class:`~brisvox.engine.phone.PhoneLine` (``ToolContext.line``), whose
carrier comes from the call's metadata and the agent's ``[telephony]`` credentials.

* ``end_call`` (SideEffect, not repeatable): asks for the end of the call once the turn's
  reply, the farewell, has played (the mark echo proves it).  It never touches the carrier
  itself; a barge-in calls the end off (docs/TELEPHONY.md, "Telephony tools").
* ``transfer_call`` (SideEffect, not repeatable): the carrier's transfer, once the words the
  model said before it have played (a mark echo proves it); a barge-in calls it off.
* ``send_dtmf`` (SideEffect, repeatable: the same key twice is a real need in a phone menu):
  the carrier's DTMF command (Telnyx) or tones in the bot's audio (Twilio, WebSocket).

A carrier that fails or does not answer in time is a :class:`~brisvox.agent.tools.ToolError`
the model reads (it apologizes to the caller); the line has logged and counted it.  A tool
whose turn was already interrupted when it ran does nothing.
"""

from __future__ import annotations

from typing import Final

from brisvox import tool
from brisvox.agent.tools import ToolError
from brisvox.core.errors import InvalidInput
from brisvox.engine.phone import CarrierError, PhoneLine, TransferCalledOff
from brisvox.server.carriers import check_destination
from brisvox.tool import FunctionTool, ToolContext

__all__ = ["BUILTIN_TOOLS", "end_call", "send_dtmf", "transfer_call"]

_TIMEOUT: Final = 10.0  # above the line's carrier timeout, so the line's own bound answers first
# A transfer first waits for the words before it to play (a long sentence takes 10-20 s), then
# the carrier: the model is not told "timed out" while the caller still hears them.
_TRANSFER_TIMEOUT: Final = 30.0


def _line(ctx: ToolContext) -> PhoneLine:
    if not isinstance(ctx.line, PhoneLine):
        raise ToolError("this call has no phone line")
    if ctx.cancel.is_cancelled:
        raise ToolError("not done: the caller interrupted before it ran")
    return ctx.line


@tool.side_effect(timeout=_TIMEOUT, filler_after=None)
async def end_call(ctx: ToolContext) -> str:
    """End the phone call. Say a short goodbye in the same reply; the call ends after it has played."""
    _line(ctx).request_end(ctx.epoch)
    return "the call ends after your goodbye has played; say nothing more after it"


@tool.side_effect(timeout=_TRANSFER_TIMEOUT)  # the default filler: a slow carrier is not dead air
async def transfer_call(to: str, ctx: ToolContext) -> str:
    """Transfer the caller to another phone number (E.164, such as +14155550100) or SIP URI."""
    problem = check_destination(to)
    if problem is not None:
        raise ToolError(f"not transferred: {problem}")
    try:
        await _line(ctx).transfer(to, ctx.epoch)
    except TransferCalledOff as exc:
        raise ToolError(f"not transferred: {exc}") from None
    except CarrierError as exc:
        raise ToolError(f"the transfer failed: {exc}; apologize and offer to help another way") from None
    return "the transfer has started"


@tool.side_effect(timeout=_TIMEOUT, filler_after=None, repeatable=True)
async def send_dtmf(digits: str, ctx: ToolContext) -> str:
    """Press keys on the phone keypad (0-9, *, #, A-D; w is a half-second pause), e.g. to navigate a phone menu."""
    line = _line(ctx)
    try:
        route = await line.send_dtmf(digits, ctx.epoch)
    except InvalidInput as exc:
        raise ToolError(f"no keys sent: {exc}") from None
    except CarrierError as exc:
        raise ToolError(f"the keys were not sent: {exc}") from None
    return f"sent {len(digits)} key(s) ({route.value})"


BUILTIN_TOOLS: Final[dict[str, FunctionTool]] = {t.name: t for t in (end_call, transfer_call, send_dtmf)}
"""The built-in tools by name: every ToolSet offers them to agent files."""
