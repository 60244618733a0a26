"""RTVI calls in ``brisvox serve``: Pipecat's client SDKs on their own path (``/rtvi``).

:class:`RtviEndpoint` is a :class:`~brisvox.server.app.CallEndpoint` like the WebSocket
one: for each admitted connection it accepts the upgrade and runs
:func:`brisvox.transport.rtvi.run_rtvi_call` over a
:class:`~brisvox.server.ws_endpoint.StarletteWsPeer`; the call's link goes to the same
session runner as a WebSocket call (:func:`brisvox.server.call.engine_runner`), with an
:class:`RtviSide` as its event side (``slot.spawn(..., hold=True)``: the slot is held until
the socket closed).

:class:`RtviSide` turns the engine's typed events (:mod:`brisvox.engine.events`) into RTVI
messages (:class:`RtviEvents`) and answers the application's requests: ``client-message``
goes to the endpoint's ``on_client_message`` (``server-response`` with its answer; without
one, ``error-response``).  With the agent's :class:`~brisvox.transport.rtvi.ui.UiContract`
(``RtviEndpoint(ui=)``) each call has a :class:`~brisvox.transport.rtvi.ui.CallUi`: the
engine's tools dispatch UI actions through it (``ui-command``), and a ``ui-event`` (or a
``client-message`` whose ``t`` names a declared app event) is validated, matched to its
nonce and becomes a note in the model's context (a WireNote: no turn, nothing spoken).
Without a contract a ``ui-event`` is answered ``error-response``.  Every RTVI call's screen
takes server messages (``ctx.send_server_message``: RTVI ``server-message``), contract or not.  ``send-text`` never
reaches here: the transport hands it to the engine.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.websockets import WebSocket

from brisvox.core.clock import Clock
from brisvox.core.errors import ChannelClosed
from brisvox.core.frames import BusyStage, ReplyMode
from brisvox.core.tasks import TaskScope
from brisvox.engine import CallObserver
from brisvox.engine import events as ev
from brisvox.server.call import MAX_TEXT, EngineCall
from brisvox.server.session import SessionSlot
from brisvox.server.ws_endpoint import StarletteWsPeer, TransportEndpoint
from brisvox.transport.rtvi import RtviCall, RtviConfig, run_rtvi_call
from brisvox.transport.rtvi import protocol as rtvi
from brisvox.transport.rtvi.ui import CallUi, UiContract, UiEventError
from brisvox.transport.websocket import PeerClosed, ServerConfig, ServerStats

__all__ = ["RTVI_PATH", "ClientMessageHandler", "RtviEndpoint", "RtviEvents", "RtviSide"]

log = logging.getLogger(__name__)

RTVI_PATH = "/rtvi"

ClientMessageHandler = Callable[[str, Any], Awaitable[Any]]
"""``(t, d) -> d`` of the ``server-response``; raising a BrisvoxError answers ``error-response``."""


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


class RtviEvents:
    """The RTVI messages of one call's engine events (one per call: it remembers which
    epochs' replies have started, for ``bot-llm-started``/``bot-tts-started``).  A text-only
    reply (``BotText.reply`` TEXT) has no ``bot-tts-*`` messages: its pieces go as
    ``bot-llm-text`` and, at its end, the whole of it as one ``bot-output`` with
    ``will_be_spoken: false``, as Pipecat sends a reply that skips the TTS."""

    def __init__(self) -> None:
        self._replying: int | None = None
        self._shown: list[str] | None = None  # the text-only reply being sent (None: a spoken one)

    def render(self, event: ev.EngineEvent) -> list[dict[str, Any]]:
        m = rtvi.message
        if isinstance(event, ev.TurnStarted):
            return [m("user-started-speaking")]
        if isinstance(event, ev.TurnEnded):
            return [m("user-stopped-speaking")]
        if isinstance(event, ev.UserTranscript):
            return [m("user-transcription", {"text": _cut(event.text), "final": event.final,
                                             "timestamp": f"{event.at:.3f}", "user_id": ""})]
        if isinstance(event, ev.UserTurn):
            return [m("user-llm-text", {"text": _cut(event.text)})]
        if isinstance(event, ev.BotText):
            shown = event.reply is ReplyMode.TEXT
            out: list[dict[str, Any]] = []
            if self._replying != event.epoch:
                self._replying = event.epoch
                self._shown = [] if shown else None
                out += [m("bot-llm-started")] if shown else [m("bot-llm-started"), m("bot-tts-started")]
            text = {"text": _cut(event.text)}
            if self._shown is not None:
                self._shown.append(event.text)
                return [*out, m("bot-llm-text", text)]
            return [*out, m("bot-llm-text", text), m("bot-tts-text", text)]
        if isinstance(event, ev.BotDone):
            if self._replying != event.epoch:
                return []
            self._replying, shown_text = None, self._shown
            self._shown = None
            if shown_text is not None:
                return [m("bot-output", {"text": _cut("".join(shown_text)), "spoken": False, "will_be_spoken": False}),
                        m("bot-llm-stopped")]
            return [m("bot-llm-stopped"), m("bot-tts-stopped")]
        if isinstance(event, ev.ToolCallStarted):
            return [m("llm-function-call-started", {"function_name": event.name})]
        if isinstance(event, ev.TurnLatency):
            return [_metrics(event)]
        if isinstance(event, ev.EngineFailure):
            return [rtvi.error(f"the {event.stage} stage failed", fatal=event.fatal)]
        if isinstance(event, ev.ModelBusy):
            what = "your words could not be transcribed" if event.stage is BusyStage.STT else "the reply cannot be spoken"
            return [rtvi.error(f"{event.provider} is at capacity: {what}", fatal=False)]
        return []  # BotHeard, ToolCallSettled, BotAudible: no RTVI message carries them


def _metrics(event: ev.TurnLatency) -> dict[str, Any]:
    ttfb = [{"processor": "llm", "value": event.turn_end_to_first_token}] if event.turn_end_to_first_token else []
    processing = [{"processor": name, "value": value} for name, value in (
        ("voice_to_voice", event.speech_end_to_audio), ("turn_detection", event.speech_end_to_turn_end),
        ("turn_end_to_audio", event.turn_end_to_audio)) if value is not None]
    return rtvi.message("metrics", {"ttfb": ttfb, "processing": processing})


class RtviSide:
    """One RTVI call's event side (see the module docs); ``ui``: the call's screen, under the
    agent's :class:`~brisvox.transport.rtvi.ui.UiContract` (an empty one when it declares none)."""

    def __init__(self, call: RtviCall, on_client_message: ClientMessageHandler | None = None,
                 ui: UiContract | None = None) -> None:
        self._call = call
        self._on_client_message = on_client_message
        # Every RTVI call has a screen: server messages need no contract; actions and app events
        # are the contract's (an agent that declares none has an empty one, which refuses them).
        self.ui = CallUi(ui if ui is not None else UiContract(), call.post, call.link.info.call_id)

    async def hello(self, info: dict[str, Any]) -> None:
        """Nothing: RTVI opens with ``bot-ready``, which the transport sends on ``client-ready``."""

    async def run(self, observer: CallObserver) -> None:
        async with TaskScope("rtvi-side") as scope:
            requests = scope.spawn(self._requests(), name="requests")
            try:
                await self._events(observer)
            finally:
                requests.cancel()

    async def _events(self, observer: CallObserver) -> None:
        renderer = RtviEvents()
        try:
            while True:
                for message in renderer.render(await observer.get()):
                    await self._call.send(message)
        except (ChannelClosed, PeerClosed):
            return

    async def _requests(self) -> None:
        try:
            while True:
                req = await self._call.requests.recv()
                answer = await self._answer(req)
                if answer is not None:
                    await self._call.send(answer)
        except (ChannelClosed, PeerClosed):
            return

    async def _answer(self, req: rtvi.RtviRequest) -> dict[str, Any] | None:
        """The reply to one request (None: a ``ui-event`` taken, which RTVI does not answer)."""
        if isinstance(req, rtvi.UiEvent):
            if not self.ui.contract.events:
                return rtvi.error_response(req.id, f"ui-event {req.event[:64]!r}: this agent declares no app events")
            return await self._app_event(req.id, req.event, req.payload, None)
        if isinstance(req, rtvi.ClientMessage):
            if req.t in self.ui.contract.event_names():
                return await self._app_event(req.id, req.t, req.d, req.t)
            if self._on_client_message is None:
                return rtvi.error_response(req.id, f"no handler for client-message {req.t!r}")
            try:
                return rtvi.server_response(req.id, req.t, await self._on_client_message(req.t, req.d))
            except Exception:  # the application's bug: logged with its traceback, the client told
                log.exception("rtvi: the client-message handler failed for %r", req.t)
                return rtvi.error_response(req.id, f"client-message {req.t!r} failed")
        return rtvi.error_response(getattr(req, "id", None), f"{type(req).__name__} is not supported here")

    async def _app_event(self, request_id: str | None, name: str, payload: Any, t: str | None) -> dict[str, Any] | None:
        """An app event (``ui-event``, or a ``client-message`` whose ``t`` names one): validated,
        matched to its sheet's nonce, its note into the model's context (no turn); a
        ``client-message`` is answered ``server-response`` ``{"accepted": ...}``."""
        try:
            answer = self.ui.receive(name, payload)
        except UiEventError as exc:
            return rtvi.error_response(request_id, str(exc))
        except Exception:  # the application's on_event failed: logged with its traceback, the client told
            log.exception("rtvi call %s: the UI contract's on_event failed for %r", self._call.link.info.call_id, name)
            return rtvi.error_response(request_id, f"app event {name!r} failed")
        if not self.ui.relayed(answer) and answer.note is not None:  # a linked agent owns its app events' notes
            await self._call.note(answer.note)
        return None if t is None else rtvi.server_response(request_id, t, {"accepted": not answer.stale})


class RtviEndpoint(TransportEndpoint):
    """Runs admitted RTVI calls (see the module docs)."""

    def __init__(self, clock: Clock, config: ServerConfig | None = None, rtvi_config: RtviConfig | None = None,
                 on_client_message: ClientMessageHandler | None = None, ui: UiContract | None = None,
                 stats: ServerStats | None = None) -> None:
        super().__init__(clock, config, stats)
        self.rtvi_config = rtvi_config or RtviConfig()
        self.on_client_message = on_client_message
        self.ui = ui

    async def __call__(self, websocket: WebSocket, slot: SessionSlot[Any], /) -> None:
        await websocket.accept()
        peer = StarletteWsPeer(websocket)

        async def deliver(call: RtviCall) -> bool:
            side = RtviSide(call, self.on_client_message, self.ui)
            slot.spawn(EngineCall(call.link, side=side, ui=side.ui), name="call", hold=True)
            return True

        await run_rtvi_call(peer, clock=self.clock, config=self.config, rtvi_config=self.rtvi_config,
                            deliver=deliver, shutdown=self._shutdown, stats=self.stats, register=self._register)
