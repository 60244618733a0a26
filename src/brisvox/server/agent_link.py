"""The server's side of the agent protocol (docs/AGENT_PROTOCOL.md): one link per call.

:meth:`AgentLink.open` connects to the agent's URL, sends ``session.start`` and waits for
``ready`` (each step bounded on the call's clock).  The agent's tools become
:class:`RemoteTool` s, registered into the call's tool registry next to the agent file's
tools, so the tool engine's ReadOnly/SideEffect rules, timeouts and idempotency apply to
them unchanged.  The engine's events go out through a bounded queue (events drop-oldest,
tool calls back-pressure); the reader resolves ``tool.result`` s and never waits on the call.
The agent's commands (``say``, ``context.update``, ``tools.set``, ``end``,
``transfer``) go to the call's :class:`~brisvox.engine.agent_input.AgentInput` (``input``,
handed to ``run_call``) without waiting; its ``ui.command`` and ``ui.message`` go to the call's
screen (``on_ui_command``, set by :mod:`brisvox.server.ui_relay`), and the screen's app events
come back through :meth:`AgentLink.post_ui_event`; a command the call cannot carry out comes back as
an ``error`` naming it (``command``), logged once.

Failure never fails the call: an agent that cannot be reached, or a link lost mid-call,
is logged once with its traceback and counted (``on_failure``: the server's metrics); the call goes on
under the agent file, and the remote tools answer ``tool_failed`` ("the agent is
unavailable") from then on.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

from brisvox.agent.tools import Tool, ToolCallContext, ToolError, ToolKind, ToolRegistry, ToolSpec
from brisvox.core.channel import Channel, ItemPolicy, Overflow
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import BrisvoxError, ChannelClosed, DeadlineExceeded
from brisvox.core.tasks import TaskScope
from brisvox.engine import events as ev
from brisvox.engine.agent_input import (
    AgentCommand,
    AgentInput,
    BotLine,
    EndWhenSilent,
    Note,
    OfferTools,
    Refusal,
    Transfer,
)
from brisvox.sdk import protocol as p
from brisvox.server.agent_brain import BrainReplies

__all__ = ["AgentLink", "AgentLinkConfig", "RemoteTool", "event_message"]

log = logging.getLogger(__name__)

FailureListener = Callable[[str], None]
"""Told ``"open"`` (the link could not open) or ``"lost"`` (lost for good), once per link."""


@dataclass(frozen=True, slots=True, kw_only=True)
class AgentLinkConfig:
    """Where the agent is and how long each step may take (seconds, on the call's clock).

    ``queue``: frames waiting to be written; past it the oldest *event* is dropped (counted),
    a tool call waits for room.  ``result_limit``: the longest a remote call waits for its
    result past its own timeout (a SideEffect keeps running after its timeout).  ``reopen_*``: a
    lost link of an agent that declared ``resume`` is reopened in at most ``reopen_attempts``
    tries, waiting ``reopen_backoff`` before the first and doubling up to ``reopen_backoff_max``.
    ``first_line``: an agent that answers the turns (brain mode, :mod:`brisvox.server.agent_brain`)
    has this long for the first line of each reply."""

    url: str
    connect_timeout: float = 5.0
    ready_timeout: float = 5.0
    write_timeout: float = 2.0
    queue: int = 256
    result_limit: float = 60.0
    reopen_attempts: int = 5
    reopen_backoff: float = 0.2
    reopen_backoff_max: float = 2.0
    first_line: float = 3.0  # brain mode: the agent's first line of a reply, or the agent file's model answers


UiCommandHandler = Callable[[p.UiCommand | p.UiMessage], p.ProtocolErrorMessage | None]
"""Puts an agent's ``ui.command`` / ``ui.message`` on the call's screen: None when sent, else the error to answer."""


def event_message(event: ev.EngineEvent) -> p.CallEvent | None:
    """The protocol's event for an engine event (None: not sent to agents)."""
    match event:
        case ev.TurnStarted(epoch=turn):
            return p.CallEvent(type="event", kind="turn_started", turn=turn)
        case ev.UserTranscript(epoch=turn, text=text, final=True):
            return p.CallEvent(type="event", kind="transcript", turn=turn, text=text)
        case ev.UserTurn(epoch=turn, text=text):
            return p.CallEvent(type="event", kind="user_turn", turn=turn, text=text)
        case ev.BotHeard(epoch=turn, text=text):
            return p.CallEvent(type="event", kind="bot_heard", turn=turn, text=text)
        case ev.BotDone(epoch=turn):
            return p.CallEvent(type="event", kind="bot_done", turn=turn)
        case ev.ToolCallSettled(epoch=turn, name=name, outcome=outcome):
            return p.CallEvent(type="event", kind="tool_settled", turn=turn, tool=name, outcome=outcome.value)
    return None


def _is_event(frame: tuple[str, bool]) -> ItemPolicy:
    # Events may be lost under pressure (counted); tool calls and control frames never are.
    return ItemPolicy(Overflow.DROP_OLDEST, "event") if frame[1] else ItemPolicy(Overflow.BACKPRESSURE)


_LINK_ERRORS = (OSError, DeadlineExceeded, websockets.WebSocketException, BrisvoxError)


async def _handshake(config: AgentLinkConfig, clock: Clock, start: p.SessionStart) -> tuple[ClientConnection, p.Ready]:
    """Connect, send ``session.start``, read ``ready`` (each bounded); the socket is dropped on any failure."""
    ws = await bounded(clock, config.connect_timeout,
                       websockets.connect(config.url, open_timeout=None, ping_interval=None,
                                          max_size=p.MAX_MESSAGE_BYTES),
                       "agent link connect")
    try:
        await bounded(clock, config.write_timeout, ws.send(p.encode(start)), "agent link session.start")
        ready = p.parse_agent_message(await bounded(clock, config.ready_timeout, ws.recv(), "agent link ready"))
        if not isinstance(ready, p.Ready):
            raise p.ProtocolError(p.ErrorCode.UNEXPECTED, "type", f"expected ready, got {ready.type}")
    except BaseException:
        ws.transport.abort()
        raise
    return ws, ready


class AgentLink:
    """One call's link to its agent (see the module docs)."""

    def __init__(self, config: AgentLinkConfig, clock: Clock, call_id: str, ws: ClientConnection,
                 ready: p.Ready) -> None:
        self.config = config
        self.clock = clock
        self.call_id = call_id
        self.ready = ready
        self._ws = ws
        self._out: Channel[tuple[str, bool]] = Channel(config.queue, name="agent-link-out", policy=_is_event)
        self._pending: dict[str, asyncio.Future[p.ToolResult]] = {}
        self._ids = itertools.count(1)
        self.lost = False
        self._closing = False
        self._written = asyncio.Event()
        self.protocol_errors = 0
        self.reopened = 0
        self._on_failure: FailureListener | None = None
        self._start = p.SessionStart(type="session.start", v=1, call_id=call_id, agent="", transport="")
        self.input = AgentInput(self._refused)  # the agent's commands, for run_call(agent=)
        self.ended = self.input.ended  # the agent's end, once the bot is silent: the runner stops the call
        self.commands_refused = 0
        self.on_ui_command: UiCommandHandler | None = None  # the call's screen (brisvox.server.ui_relay)
        # Brain mode (the agent answers the turns, server/agent_brain.py): its replies by request id.
        self.replies = BrainReplies(call_id) if ready.answers_turns else None

    @classmethod
    async def open(cls, config: AgentLinkConfig, clock: Clock, *, call_id: str, agent: str, transport: str,
                   parameters: Mapping[str, str], scope: TaskScope,
                   on_failure: FailureListener | None = None) -> AgentLink | None:
        """The open link, its tasks started in ``scope``; None (logged once, counted) when the agent is gone."""
        start = p.SessionStart(type="session.start", v=1, call_id=call_id, agent=agent, transport=transport,
                               parameters=dict(parameters))
        try:
            ws, ready = await _handshake(config, clock, start)
        except _LINK_ERRORS:
            if on_failure is not None:
                on_failure("open")
            log.warning("call %s: agent link to %s could not open; the call goes on under the agent file",
                        call_id, config.url, exc_info=True)
            return None
        link = cls(config, clock, call_id, ws, ready)
        link._start = start
        link._on_failure = on_failure
        scope.spawn(link._run(), name="agent-link")
        return link

    # --- the call's side ---

    def tools_into(self, registry: ToolRegistry | None,
                   wrap: Callable[[str, Tool], Tool] | None = None) -> ToolRegistry:
        """``registry`` (or a new one) with the agent's tools registered; ``wrap``: each remote
        tool passes through it (the call's recorder notes their results, as it does the local ones')."""
        out = registry if registry is not None else ToolRegistry()
        for spec in self.ready.tools:
            kind = ToolKind.SIDE_EFFECT if spec.kind == "side_effect" else ToolKind.READ_ONLY
            tool: Tool = RemoteTool(self, spec.name)
            out.register(ToolSpec(name=spec.name, description=spec.description, parameters=spec.parameters,
                                  kind=kind, timeout=spec.timeout, repeatable=spec.repeatable),
                         wrap(spec.name, tool) if wrap is not None else tool)
        return out

    def listen(self, event: ev.EngineEvent) -> None:
        """An engine event listener: the event goes out if the agent takes it (never blocks)."""
        self.input.listen(event)
        message = event_message(event)
        if message is not None and not self.lost:
            self._out.try_send((p.encode(message), True))

    @property
    def dropped_events(self) -> int:
        return self._out.dropped

    async def call_tool(self, name: str, arguments: dict[str, Any], ctx: ToolCallContext, timeout: float) -> Any:
        if self.lost:
            raise ToolError("the agent is unavailable")
        request_id = f"r{next(self._ids)}"
        key = ctx.idempotency_key()
        request = p.ToolCallRequest(type="tool.call", id=request_id, name=name, arguments=arguments,
                                    idempotency_key=f"{key.session}/{key.epoch}/{key.call_id}", timeout=timeout)
        future: asyncio.Future[p.ToolResult] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            await self.send(request)
            result = await bounded(self.clock, timeout + self.config.result_limit, future, "agent tool result")
        except (ChannelClosed, DeadlineExceeded) as exc:
            raise ToolError("the agent is unavailable") from exc
        finally:
            self._pending.pop(request_id, None)
        if not result.ok:
            raise ToolError(result.error or "the agent's tool failed")
        return result.result

    async def send(self, message: p.ServerMessage) -> None:
        """Queue a frame that is never dropped (waits for room, bounded by the write timeout);
        ``ChannelClosed`` once the link is lost, ``DeadlineExceeded`` when no room came in time."""
        await bounded(self.clock, self.config.write_timeout, self._out.send((p.encode(message), False)),
                      f"agent link {message.type}")

    # --- the connection ---

    async def _run(self) -> None:
        try:
            while (exc := await self._serve()) is not None:
                if not (self.ready.resume and await self._reopen(exc)):
                    self._lose(exc)
                    return
        finally:
            self._ws.transport.abort()

    async def _serve(self) -> BaseException | None:
        """Serve the open socket until it ends: the error that ended it, None when the call closed it."""
        try:
            async with TaskScope("agent-link") as scope:
                scope.spawn(self._write(), name="writer")
                await self._read()
                if not self._closing:
                    raise ConnectionError("the agent closed the link")
        except (OSError, DeadlineExceeded, websockets.WebSocketException) as exc:
            return None if self._closing else exc
        return None

    async def _reopen(self, exc: BaseException) -> bool:
        """Reopen the link of an agent that declared resume: bounded attempts with doubling backoff."""
        self.lost = True  # tool calls fail fast while the link is down
        log.warning("call %s: agent link lost; reopening (the agent declared resume)", self.call_id, exc_info=exc)
        self._fail_pending()
        start = self._start.model_copy(update={"resume": True})
        delay = self.config.reopen_backoff
        for _ in range(self.config.reopen_attempts):
            await self.clock.sleep(delay)
            delay = min(delay * 2, self.config.reopen_backoff_max)
            try:
                ws, _ready = await _handshake(self.config, self.clock, start)
            except _LINK_ERRORS:
                log.info("call %s: agent link reopen failed", self.call_id)
                continue
            self._ws.transport.abort()
            self._ws = ws
            self.lost = False
            self.reopened += 1
            log.info("call %s: agent link reopened", self.call_id)
            return True
        return False

    def _fail_pending(self) -> None:
        if self.replies is not None:
            self.replies.lost()
        for future in self._pending.values():
            if not future.done():
                future.set_exception(ToolError("the agent link was lost"))

    def _lose(self, exc: BaseException) -> None:
        self.lost = True
        if self._on_failure is not None:
            self._on_failure("lost")
        log.warning("call %s: agent link lost; the call goes on under the agent file", self.call_id,
                    exc_info=exc)
        self._out.abort()
        self._fail_pending()

    async def _write(self) -> None:
        async for frame, _ in self._out:
            await bounded(self.clock, self.config.write_timeout, self._ws.send(frame), "agent link write")
        self._written.set()

    async def _read(self) -> None:
        async for frame in self._ws:
            try:
                message = p.parse_agent_message(frame)
            except p.ProtocolError as exc:
                self._refuse(exc.code, exc.field, str(exc))
                continue
            if isinstance(message, p.ToolResult):
                future = self._pending.get(message.id)
                if future is None or future.done():
                    self._refuse(p.ErrorCode.UNEXPECTED, "id", "a result for no pending call")
                else:
                    future.set_result(message)
            elif isinstance(message, p.Ready):
                self._refuse(p.ErrorCode.UNEXPECTED, "type", "ready was already received")
            elif isinstance(message, p.UiCommand | p.UiMessage):
                self._ui_command(message)
            elif isinstance(message, p.Say):
                self._say(message)
            else:
                self.input.put(_command(message))

    def _say(self, say: p.Say) -> None:
        """A line of its own goes to the call; a reply line to the request it answers (brain mode)."""
        refusal = p.say_refusal(say, self.replies is not None)
        if refusal is not None:
            self._refuse(refusal.code, refusal.field, str(refusal))
        elif say.reply_to is None:
            self.input.put(_command(say))
        elif self.replies is not None and (busy := self.replies.deliver(say)) is not None:
            self.input.refuse("say", Refusal.BUSY, busy)

    def _ui_command(self, message: p.UiCommand | p.UiMessage) -> None:
        """The agent's UI action or server message, to the call's screen (brisvox.server.ui_relay)."""
        relay = self.on_ui_command
        error = relay(message) if relay is not None else p.ProtocolErrorMessage(
            type="error", code=p.ErrorCode.NO_SCREEN.value, message="this call has no screen", command=message.type)
        if error is not None:
            self.commands_refused += 1
            log.warning("call %s: the agent's %s was not carried out: %s", self.call_id, message.type, error.code)
            self._out.try_send((p.encode(error), True))

    def post_ui_event(self, event: p.UiEvent) -> bool:
        """An app event from the call's screen, to the agent without waiting; False when the link is
        down or its queue is full (the call then notes the event itself)."""
        if self.lost or self._closing:
            return False
        try:
            return self._out.try_send((p.encode(event), False))
        except ChannelClosed:
            return False

    def _refuse(self, code: p.ErrorCode, field: str, message: str) -> None:
        self.protocol_errors += 1
        log.info("call %s: agent message refused: %s", self.call_id, code.value)
        error = p.ProtocolErrorMessage(type="error", code=code.value, field=field, message=message)
        self._out.try_send((p.encode(error), True))

    def _refused(self, command: str, why: Refusal, message: str) -> None:
        """A command the call could not carry out: the agent is told, the operator reads one line."""
        self.commands_refused += 1
        log.warning("call %s: the agent's %s was not carried out: %s", self.call_id, command, why.value)
        if self.lost or self._closing:
            return
        error = p.ProtocolErrorMessage(type="error", code=p.ErrorCode(why.value).value, message=message,
                                       command=command)
        self._out.try_send((p.encode(error), True))

    async def close(self) -> None:
        """The call ended: ``call_ended`` goes out after what is queued, then the link closes (bounded)."""
        if self.lost or self._closing:
            return
        self._closing = True
        self._out.try_send((p.encode(p.CallEvent(type="event", kind="call_ended")), False))
        self._out.close()
        try:
            await bounded(self.clock, self.config.write_timeout, self._written.wait(), "agent link last writes")
        except DeadlineExceeded:
            log.info("call %s: the agent link's last frames were not written in time", self.call_id)
        try:
            await bounded(self.clock, self.config.write_timeout, self._ws.close(), "agent link close")
        except DeadlineExceeded:
            self._ws.transport.abort()  # the agent did not answer the close: drop the socket


def _command(message: p.Say | p.ContextUpdate | p.ToolsSet | p.End | p.Transfer) -> AgentCommand:
    """The engine's command for a command message of the agent's."""
    match message:
        case p.Say(text=text, interrupt=interrupt):
            return BotLine(text, interrupt=interrupt)
        case p.End(farewell=""):
            return EndWhenSilent()
        case p.End(farewell=farewell):
            return BotLine(farewell, farewell=True)
        case p.ContextUpdate(note=note):
            return Note(note)
        case p.ToolsSet(names=names):
            return OfferTools(names)
        case p.Transfer(to=to):
            return Transfer(to)


class RemoteTool:
    """A tool the agent serves: calling it is a ``tool.call`` / ``tool.result`` over the link."""

    __slots__ = ("link", "name")

    def __init__(self, link: AgentLink, name: str) -> None:
        self.link = link
        self.name = name

    async def __call__(self, arguments: dict[str, Any], ctx: ToolCallContext, /) -> Any:
        spec = next(s for s in self.link.ready.tools if s.name == self.name)
        return await self.link.call_tool(self.name, arguments, ctx, spec.timeout)
