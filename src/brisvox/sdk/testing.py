"""The conformance driver for brains: the server's side of the agent protocol, in-process,
keyless and on virtual time.

::

    from brisvox.sdk.testing import BrainDriver, call, scripted

    async def test_the_sheet_answer_reaches_the_model() -> None:      # on a VirtualTimeLoop
        model = scripted([call("confirm_on_screen", summary="9:00"), "It's on your screen."], "Booked.")
        async with BrainDriver(Booking(llm=model)) as driver:
            turn = await driver.user_says("Book the nine o'clock.")
            assert turn.completed                      # the tool returned; nothing waited on the user
            sheet = (await driver.collect_ui_commands(min_count=1))[0]
            await driver.send_ui_event("confirm_answered", {"nonce": sheet["payload"]["nonce"], "answer": "yes"})
            turn = await driver.user_says("Thanks.")
            assert "CONFIRMED" in str(turn.requests[0].messages)   # what the model was handed next

The brain is served exactly as :func:`brisvox.sdk.serve` serves it (the same session, the
same bounded outbox and send deadline), over memory instead of a socket.  The driver sends
what the server sends (``session.start``, ``event`` frames in the server's order, ``tool.call``,
``ui.event``) and parses every frame the brain sends with the server's own parser: a frame
the server would refuse fails the test when the driver closes.

``user_says`` returns when the brain has handled the turn (a model-backed brain's turn
task has ended); every wait is bounded on the loop's clock (:data:`TURN_LIMIT`), so a brain
that hangs fails the test naming the wait instead of hanging it.  :func:`scripted` is a
keyless model (brisvox's scripted LLM) that records each request it is handed; give it
to the brain, or to the driver (``model=``), which puts it in place of a vendor brain's
model (``OpenAIBrain(model=..., api_key="unused")``: nothing reaches the vendor).
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Self

from brisvox.core.clock import Clock, SystemClock, bounded
from brisvox.core.errors import ConfigError
from brisvox.providers.llm import LlmProvider, LlmRequest
from brisvox.sdk import protocol as p
from brisvox.sdk.brain import Brain, _Session
from brisvox.sdk.loop import ModelBrain, TurnReport
from brisvox.sim.mock_llm import Call, Say, ScriptedLlm

__all__ = ["TURN_LIMIT", "BrainDriver", "Turn", "call", "scripted"]

TURN_LIMIT = 120.0
"""Seconds (on the loop's clock) the driver waits for the brain before failing the test."""


def call(name: str, /, **arguments: Any) -> Call:
    """A tool call in a scripted response."""
    return Call(name=name, arguments=arguments)


def scripted(*responses: str | Call | Sequence[str | Call], clock: Clock | None = None) -> ScriptedLlm:
    """A keyless model answering its n-th request with ``responses[n]`` (a string is said, a
    :func:`call` is a tool call, a list is both in order); ``.requests`` is what it was handed."""
    scripts = []
    for response in responses:
        steps = [response] if isinstance(response, str | Call) else list(response)
        scripts.append([Say(s) if isinstance(s, str) else s for s in steps])
    return ScriptedLlm(clock if clock is not None else SystemClock(), scripts)


@dataclass(frozen=True, slots=True)
class Turn:
    """What the brain did with one caller turn.

    ``said``: the ``say`` lines it sent; ``report``: a model-backed brain's
    :class:`~brisvox.sdk.loop.TurnReport` (None for a plain brain); ``requests``: what its
    model was handed during the turn (when the model records them, as :func:`scripted` does)."""

    text: str
    said: tuple[str, ...]
    report: TurnReport | None
    requests: tuple[LlmRequest, ...]
    handler_failed: bool = False

    @property
    def completed(self) -> bool:
        """The brain handled the turn to its end: no handler raised, the turn was not cut or failed."""
        return not self.handler_failed and (self.report is None or self.report.completed)


@dataclass
class _Wire:
    """The brain's end of an in-memory link."""

    inbound: asyncio.Queue[str | None] = field(default_factory=lambda: asyncio.Queue(256))
    frames: list[str] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    waiting: asyncio.Event = field(default_factory=asyncio.Event)
    aborted: bool = False

    async def send(self, frame: str) -> None:
        if self.aborted:
            raise ConnectionError("the link was aborted")
        self.frames.append(frame)
        self.arrived.set()

    async def recv(self) -> str | bytes | None:
        if self.inbound.empty():
            self.waiting.set()
        frame = await self.inbound.get()
        self.waiting.clear()
        return frame

    def abort(self) -> None:
        self.aborted = True
        self.inbound.put_nowait(None)


class BrainDriver:
    """Plays the server's side of one call against ``brain`` (see the module docs)."""

    def __init__(self, brain: Brain, *, model: LlmProvider | None = None, call_id: str = "call-1",
                 agent: str = "agent", transport: str = "rtvi", parameters: dict[str, str] | None = None,
                 resume: bool = False) -> None:
        if model is not None and not isinstance(brain, ModelBrain):
            raise ConfigError(f"BrainDriver: model= replaces a model-backed brain's model; {type(brain).__name__} has none")
        self.brain = brain
        self._model = model
        self.ready: p.Ready | None = None
        self.messages: list[p.AgentMessage] = []
        self.refused: list[str] = []
        self._start = p.SessionStart(type="session.start", v=1, call_id=call_id, agent=agent, transport=transport,
                                     parameters=dict(parameters or {}), resume=resume)
        self._wire = _Wire()
        self._session = _Session(brain, self._wire)
        self._task: asyncio.Task[None] | None = None
        self._read = 0
        self._ui_taken = 0
        self._epoch = 0
        self._ids = itertools.count(1)

    @property
    def clock(self) -> Clock:
        return self.brain.clock

    # --- what the brain sent ---

    @property
    def said(self) -> list[str]:
        """Every ``say`` line so far."""
        self._take()
        return [m.text for m in self.messages if isinstance(m, p.Say) and m.text]

    def _take(self) -> None:
        frames = self._wire.frames
        while self._read < len(frames):
            frame = frames[self._read]
            self._read += 1
            try:
                message = p.parse_agent_message(frame)
            except p.ProtocolError as exc:
                self.refused.append(f"{exc.code.value}: {exc}")
                continue
            answers = self.ready is not None and self.ready.answers_turns
            refusal = p.say_refusal(message, answers) if isinstance(message, p.Say) else None
            if refusal is not None:
                self.refused.append(f"{refusal.code.value}: {refusal}")
            else:
                self.messages.append(message)

    async def _wait_for(self, done: Any, what: str) -> None:
        async def until() -> None:
            while True:
                self._take()
                if done():
                    return
                self._wire.arrived.clear()
                await self._wire.arrived.wait()

        await bounded(self.clock, TURN_LIMIT, until(), what)

    # --- the server's side ---

    async def __aenter__(self) -> Self:
        if self._model is not None and isinstance(self.brain, ModelBrain):  # keyless: the vendor's model never runs
            await self.brain.aclose()
            self.brain.llm = self._model
        self._task = asyncio.get_running_loop().create_task(self._session.run(), name="brain-driver-session")
        await self._push(self._start)
        await self._wait_for(lambda: any(isinstance(m, p.Ready) for m in self.messages), "the brain's ready")
        self.ready = next(m for m in self.messages if isinstance(m, p.Ready))
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        task = self._task
        if task is None:
            return
        if exc is not None:  # the test failed: the brain goes with it
            task.cancel()
        elif not task.done() and not self._wire.aborted:
            await self._push(p.CallEvent(type="event", kind="call_ended"))
            await self._wire.inbound.put(None)  # the server closes the link after call_ended
        await asyncio.wait([task])
        self._take()
        if exc is None:
            if not task.cancelled() and task.exception() is not None:
                raise AssertionError(f"the brain's session failed: {task.exception()!r}")
            assert not self.refused, f"the server would refuse these frames of the brain: {self.refused}"

    async def _push(self, message: p.ServerMessage) -> None:
        self._wire.waiting.clear()  # set again once the brain has read everything queued
        await self._wire.inbound.put(p.encode(message))

    async def _settle(self) -> None:
        """Until the brain has read every frame sent to it and finished the work they started."""

        async def settled() -> None:
            task = self._task
            if task is None or task.done():
                return
            waiting = asyncio.ensure_future(self._wire.waiting.wait())
            try:
                await asyncio.wait([waiting, task], return_when=asyncio.FIRST_COMPLETED)
            finally:
                waiting.cancel()
            await self.brain._idle()
            while len(self._session.outbox):  # the writer takes a frame and puts it on the wire in one step
                await self.clock.sleep(0)

        await bounded(self.clock, TURN_LIMIT, settled(), "the brain to handle what the call sent")
        self._take()

    async def _event(self, kind: str, *, turn: int | None = None, text: str | None = None) -> None:
        await self._push(p.CallEvent(type="event", kind=kind, turn=turn, text=text))

    async def user_says(self, text: str) -> Turn:
        """The caller says ``text``: ``turn_started``, the final ``transcript``, ``user_turn``;
        returns once the brain has handled it."""
        self._epoch += 1
        self._take()
        said_before = len(self.said)
        requests = getattr(self.brain.llm, "requests", None) if isinstance(self.brain, ModelBrain) else None
        asked_before = len(requests) if isinstance(requests, list) else 0
        failures_before = self._session.handler_failures
        await self._event("turn_started", turn=self._epoch)
        await self._event("transcript", turn=self._epoch, text=text)
        await self._event("user_turn", turn=self._epoch, text=text)
        if self.ready is not None and self.ready.answers_turns:  # the server asks the brain for the reply
            await self.request_reply(text)
        await self._settle()
        report = self.brain.last_turn if isinstance(self.brain, ModelBrain) else None
        asked = tuple(requests[asked_before:]) if isinstance(requests, list) else ()
        return Turn(text=text, said=tuple(self.said[said_before:]), report=report, requests=asked,
                    handler_failed=self._session.handler_failures > failures_before)

    async def request_reply(self, text: str = "") -> str:
        """The call asks for the reply to the current caller turn (a ``turn.request``, as the server
        sends one for each model request of a brain with ``answers_turns``); its id.  ``user_says``
        sends it by itself; a second one for the same turn carries the same words."""
        request_id = f"t{next(self._ids)}"
        await self._push(p.TurnRequest(type="turn.request", id=request_id, turn=self._epoch, text=text))
        return request_id

    def reply(self, request_id: str) -> tuple[str, ...] | None:
        """The lines of the brain's reply to ``request_id`` so far; None until its ``final`` came."""
        self._take()
        lines = [m for m in self.messages if isinstance(m, p.Say) and m.reply_to == request_id]
        done = any(m.final for m in lines)
        return tuple(m.text for m in lines if m.text) if done else None

    async def barge_in(self, heard: str | None = None) -> None:
        """The caller starts speaking over the brain: ``turn_started``, and with ``heard`` the
        ``bot_heard`` of the cut line (what the caller heard of it)."""
        self._epoch += 1
        await self._event("turn_started", turn=self._epoch)
        if heard is not None:
            await self._event("bot_heard", turn=self._epoch - 1, text=heard)
        await self._settle()

    async def event(self, kind: str, *, text: str | None = None) -> None:
        """Any other call event (``bot_done``, ``tool_settled``...), in the current turn."""
        await self._event(kind, turn=self._epoch, text=text)
        await self._settle()

    async def collect_ui_commands(self, min_count: int = 1) -> list[dict[str, Any]]:
        """The UI commands sent since the last collection (``{"command", "payload"}``), waiting
        for at least ``min_count`` of them."""

        def commands() -> list[p.UiCommand]:
            return [m for m in self.messages if isinstance(m, p.UiCommand)]

        await self._wait_for(lambda: len(commands()) - self._ui_taken >= min_count,
                             f"{min_count} UI command(s) from the brain")
        fresh = commands()[self._ui_taken:]
        self._ui_taken += len(fresh)
        return [{"command": c.command, "payload": dict(c.payload)} for c in fresh]

    async def send_ui_event(self, event: str, payload: Any = None) -> None:
        """An app event from the caller's screen (it opens no turn: nothing is awaited but its handling)."""
        await self._push(p.UiEvent(type="ui.event", event=event, payload=payload))
        await self._settle()

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None, *,
                        idempotency_key: str | None = None, timeout: float = 5.0) -> p.ToolResult:
        """The call's model calls one of the brain's remote tools; the brain's ``tool.result``."""
        request_id = f"r{next(self._ids)}"
        key = idempotency_key if idempotency_key is not None else f"{self._start.call_id}/{self._epoch}/{request_id}"
        await self._push(p.ToolCallRequest(type="tool.call", id=request_id, name=name, arguments=dict(arguments or {}),
                                           idempotency_key=key, timeout=timeout))

        def answer() -> p.ToolResult | None:
            return next((m for m in self.messages if isinstance(m, p.ToolResult) and m.id == request_id), None)

        await self._wait_for(lambda: answer() is not None, f"the result of {name}")
        result = answer()
        assert result is not None
        return result
