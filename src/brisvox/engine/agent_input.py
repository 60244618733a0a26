"""Commands from an agent process into a running call (docs/AGENT_PROTOCOL.md, "Agent to server").

The server's agent link (:mod:`brisvox.server.agent_link`) turns the agent's ``say``,
``context.update``, ``tools.set``, ``end`` and ``transfer`` into the typed
commands of this module and :meth:`AgentInput.put` s them without ever waiting on the call;
``run_call(agent=...)`` applies them through the engine's own inputs:

* :class:`BotLine` goes to the turn driver, the epoch authority (a ``BotLineFrame``): the
  machine starts a bot turn in a new epoch (``interrupt``: cutting the reply playing now),
  or the driver holds the line until it can (at most :data:`HELD_LINES`, in order).  The
  runner speaks it through the canned-line path (like the greeting): in the context as
  said, in the PlayoutBook, cut to what was heard on a barge-in.  ``farewell``: the call
  ends once the line has played, through the phone line's ending (the ``end_call`` rule).
* :class:`Note` is a ``ContextNoteFrame`` (the path of the caller screen's app events).
* :class:`OfferTools` narrows the tools the model is offered (``ToolEngine.offer``).
* :class:`Transfer` goes through the call's phone line (``PhoneLine.transfer``).
* :class:`EndWhenSilent` (``end`` without a farewell) is not queued: :attr:`AgentInput.ended`
  is set once the bot is silent (at once, or at the end of the reply playing now; ``listen``
  hears the call's events), and the server stops the call on it.

``tap`` (the call's recorder, when it records) is told every command as it enters the call,
before it is carried out or refused: a replay puts the same commands at the same times.

A command the call cannot carry out is refused once through the ``on_refused`` the link
gave (:class:`Refusal` says why): the link answers the agent with an ``error`` and logs it.
"""

from __future__ import annotations

import asyncio
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from brisvox.core.channel import Channel, Overflow
from brisvox.core.errors import ChannelClosed
from brisvox.engine import events as ev

__all__ = [
    "HELD_LINES",
    "AgentCommand",
    "AgentInput",
    "BotLine",
    "EndWhenSilent",
    "Note",
    "OfferTools",
    "Refusal",
    "Transfer",
    "command_name",
]

HELD_LINES: Final = 8
"""Bot lines the turn driver holds while the machine cannot start them (the caller speaks)."""


@dataclass(frozen=True, slots=True, repr=False)
class BotLine:
    text: str
    interrupt: bool = False
    farewell: bool = False  # the agent's ``end`` with a farewell: the call ends once it has played

    def __repr__(self) -> str:
        return f"BotLine(<{len(self.text)} chars>, interrupt={self.interrupt}, farewell={self.farewell})"


@dataclass(frozen=True, slots=True, repr=False)
class Note:
    text: str

    def __repr__(self) -> str:
        return f"Note(<{len(self.text)} chars>)"


@dataclass(frozen=True, slots=True)
class OfferTools:
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True, repr=False)
class Transfer:
    to: str

    def __repr__(self) -> str:
        return "Transfer(<destination>)"


@dataclass(frozen=True, slots=True)
class EndWhenSilent:
    """The agent's ``end`` without a farewell: the call stops once the bot is silent."""


Queued = BotLine | Note | OfferTools | Transfer  # what the call carries out in order (``commands``)
AgentCommand = Queued | EndWhenSilent


class Refusal(enum.Enum):
    """Why a command was not carried out (the ``code`` of the link's ``error``)."""

    BUSY = "busy"  # the call's command queue, or the driver's held lines, are full
    CALL_ENDED = "call_ended"  # the call ended before the command was carried out
    CALLED_OFF = "called_off"  # the caller spoke over the farewell: the call goes on
    UNKNOWN_TOOL = "unknown_tool"  # tools.set named a tool the call does not have
    NO_CARRIER = "no_carrier"  # transfer (or a farewell) on a call without a phone carrier / line
    CARRIER_FAILED = "carrier_failed"  # the carrier refused or did not answer the transfer
    OVERTAKEN = "overtaken"  # a newer turn (a barge-in, an interrupting say) came before a word of the line


Refused = Callable[[str, Refusal, str], None]
"""Told the refused command's protocol name (``say``, ``end``, ...), why, and a message for the agent."""


def command_name(command: AgentCommand) -> str:
    """The agent protocol's name of the message ``command`` came from."""
    match command:
        case BotLine(farewell=True) | EndWhenSilent():
            return "end"
        case BotLine():
            return "say"
        case Note():
            return "context.update"
        case OfferTools():
            return "tools.set"
        case Transfer():
            return "transfer"


class AgentInput:
    """One call's queue of agent commands (``capacity``; a full queue refuses ``busy``)."""

    def __init__(self, on_refused: Refused, capacity: int = 32) -> None:
        self._on_refused = on_refused
        self.commands: Channel[Queued] = Channel(capacity, Overflow.BACKPRESSURE, name="agent-input")
        self.ended = asyncio.Event()  # the agent's end without a farewell, once the bot is silent
        self._end_asked = False
        self._bot_busy = False
        self.tap: Callable[[AgentCommand], None] | None = None  # the call's recorder

    def put(self, command: AgentCommand) -> None:
        """Queue ``command`` without waiting (refused ``busy`` when full, ``call_ended`` once closed);
        an :class:`EndWhenSilent` sets ``ended`` now or once the bot is silent."""
        if self.tap is not None:
            self.tap(command)
        if isinstance(command, EndWhenSilent):
            self._end_asked = True
            if not self._bot_busy:
                self.ended.set()
            return
        try:
            queued = self.commands.try_send(command)
        except ChannelClosed:
            self.refuse(command, Refusal.CALL_ENDED, "the call has ended")
            return
        if not queued:
            self.refuse(command, Refusal.BUSY, "too many commands are waiting for the call")

    def listen(self, event: ev.EngineEvent) -> None:
        """An engine event listener: whether the bot speaks (an end waits for its silence)."""
        if isinstance(event, ev.BotText | ev.BotAudible):
            self._bot_busy = True
        elif isinstance(event, ev.BotDone | ev.TurnStarted):
            self._bot_busy = False
            if self._end_asked:
                self.ended.set()

    def refuse(self, command: AgentCommand | str, why: Refusal, message: str) -> None:
        """``command`` (or its protocol name) was not carried out: the link tells the agent."""
        self._on_refused(command if isinstance(command, str) else command_name(command), why, message)

    def close(self) -> None:
        """The call has ended: what is still queued is refused ``call_ended``, later puts too."""
        if self.commands.closed:
            return
        self.commands.close()
        while True:
            try:
                command = self.commands.try_recv()
            except ChannelClosed:
                return
            if command is None:
                return
            self.refuse(command, Refusal.CALL_ENDED, "the call ended before the command was carried out")
