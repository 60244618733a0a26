"""Real calls in ``brisvox serve``: the WebSocket endpoint and the session runner that runs the engine.

:class:`EngineEndpoint` is the server's :class:`~brisvox.server.ws_endpoint.TransportEndpoint`
with one addition: the socket is shared with the call's event stream.  For each call it
spawns the session with an :class:`EngineCall` (the transport's call link plus a way to
send JSON text messages on the same socket; sends are serialized with the transport's
own writes and bounded by the transport's ``write_timeout``).

:func:`engine_runner` is the session runner.  Per call it opens a
:class:`~brisvox.transport.session.TransportSession` on the link, sends a ``call_info``
event (agent, LLM), and runs :func:`brisvox.engine.run_call` with the agent's settings,
the shared providers, a fresh tool registry of the agent's tools and a
:class:`~brisvox.engine.CallObserver` whose typed events (:mod:`brisvox.engine.events`)
are forwarded to the client as ``{"type": "event", ...}`` messages (:func:`event_message`,
docs/WEBSOCKET_PROTOCOL.md).  The shutdown's cooperative stop is the engine's ``cancel``.
A call that fails raises :class:`~brisvox.engine.CallFailed` out of the runner (the
engine has logged it and told the client), so the session ends as ``error``.  The runner
is split in two: ``run`` opens the transport session and closes it on every path, and
``serve`` runs the call on it; a failure before the engine ran (a setting this call
cannot run) closes the session with :func:`~brisvox.engine.call.call_failure`'s
``CallFailure`` (``error``, ``stop{error}``, close 1011) and is raised to the session
manager, which logs it and counts it (``error`` for a ``BrisvoxError``, ``crashed`` for a
bug).  The endpoint spawns each call with ``hold=True``: its slot stays taken until the
socket is closed, however the session ended.

Each ``ModelBusy`` event (an embedded model refused work) goes to the client as an
``error`` event (``speech_to_text_busy``, ``voice_activity_busy`` or ``text_to_speech_busy``;
the call goes on) and is counted in ``brisvox_model_busy_total{stage}``.

The same events feed the server's ``/metrics`` (:func:`metrics_listener`): each
``TurnLatency`` is an answered turn with its latencies, each ``ToolCallSettled`` a
settled tool call with the tool engine's outcome, each ``EngineFailure`` a failure.  The
listener sees every event as it is emitted, so a slow page that loses events to the
observer's drop-oldest queue does not make the counters lie.

:func:`warm_request` is how every call of the agent begins (its system prompt with the
date line, its tools): ``brisvox serve`` has an LLM with a prompt cache
(:class:`~brisvox.providers.llm.PrefixWarm`, the local model) evaluate it at start.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime
import ipaddress
import json
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from starlette.websockets import WebSocket

from brisvox.agent.context import SystemMessage, UserMessage
from brisvox.agent.flows import Flow, FlowConfig, FlowManager
from brisvox.agent.tools import FillerPolicy, Grounds, ToolSpec
from brisvox.agent.ui import UiChannel
from brisvox.audio.pacer import PaceTicker
from brisvox.core.clock import Clock, VirtualTimeLoop, bounded, deadline
from brisvox.core.errors import ChannelClosed, DeadlineExceeded
from brisvox.core.frames import BusyStage
from brisvox.core.tasks import TaskScope
from brisvox.engine import (
    CallFailed,
    CallObserver,
    CallReport,
    ClipCache,
    EngineConfig,
    LlmConfig,
    SpeculationMode,
    run_call,
)
from brisvox.engine import events as ev
from brisvox.engine.call import call_failure, output_rate
from brisvox.engine.config import SummaryConfig
from brisvox.engine.phone import CarrierError, PhonePlan
from brisvox.engine.rounds import with_date
from brisvox.providers.llm import LlmRequest
from brisvox.providers.stt import SttConfig
from brisvox.providers.summarizer import LlmSummarizer
from brisvox.providers.tts import TtsConfig, TtsProvider
from brisvox.recording.format import Header, RecordSettings, tool_record
from brisvox.recording.tap import CallRecorder, header
from brisvox.server.agent_brain import brain_call
from brisvox.server.agent_file import AgentDefinition
from brisvox.server.agent_link import AgentLink
from brisvox.server.app import HttpCallEndpoint
from brisvox.server.call_providers import CallProviders
from brisvox.server.calllog import CallLog, CallTimeline
from brisvox.server.carriers import call_control
from brisvox.server.directory import CallDirectory
from brisvox.server.metrics import ServerMetrics
from brisvox.server.phone_tools import BUILTIN_TOOLS
from brisvox.server.session import SessionCancel, SessionSlot
from brisvox.server.settings import Settings
from brisvox.server.telnyx_endpoint import TelnyxEndpoint
from brisvox.server.tools import ToolSet
from brisvox.server.twilio_endpoint import TwilioEndpoint
from brisvox.server.ui_relay import bind_screen
from brisvox.server.webhooks import stream_token_check
from brisvox.server.ws_endpoint import StarletteWsPeer, TransportEndpoint
from brisvox.transport.link import CallLink
from brisvox.transport.session import TransportSession
from brisvox.transport.telnyx import Codec, TelnyxConfig
from brisvox.transport.twilio import TwilioConfig
from brisvox.transport.websocket import PeerClosed, ServerConfig
from brisvox.transport.websocket import run_call as run_ws_call

if TYPE_CHECKING:  # imported only when tracing is on (the otel extra)
    from brisvox.server.tracing import Tracing

__all__ = [
    "LATENCY_STAGES",
    "LISTEN_RATE",
    "MAX_TEXT",
    "EngineCall",
    "EngineEndpoint",
    "EventSide",
    "JsonEvents",
    "agent_flow",
    "call_recording",
    "engine_config",
    "engine_runner",
    "event_message",
    "flow_manager",
    "metrics_listener",
    "recorded_tools",
    "recording_header",
    "telnyx_endpoint",
    "twilio_endpoint",
    "warm_request",
    "webrtc_endpoint",
]

log = logging.getLogger(__name__)

SendText = Callable[[str], Awaitable[None]]


class EventSide(Protocol):
    """Where a call's engine events go on its socket: the WebSocket page's JSON (``event``
    messages, :func:`event_message`) or RTVI (:class:`~brisvox.server.rtvi_endpoint.RtviSide`)."""

    async def hello(self, info: dict[str, Any]) -> None:
        """The call's first message (the agent and its LLM); raises PeerClosed when the socket is gone."""
        ...

    async def run(self, observer: CallObserver) -> None:
        """Send the observer's events until it closes or the socket goes."""
        ...


@dataclass(frozen=True, slots=True, eq=False)
class JsonEvents:
    """The WebSocket page's event side: ``{"type": "event", ...}`` text messages."""

    send_text: SendText

    async def hello(self, info: dict[str, Any]) -> None:
        await self.send_text(json.dumps({"type": "event", "kind": "call_info", **info}))

    async def run(self, observer: CallObserver) -> None:
        await _forward(observer, self.send_text)


@dataclass(frozen=True, slots=True, eq=False)
class EngineCall:
    """What the session runner gets for one call: the link, and the socket's text side
    (``send_text``: JSON events) or another event side (``side``); ``ui``: the caller's
    screen when the transport has one (tools dispatch UI actions through it, :mod:`brisvox.agent.ui`)."""

    link: CallLink
    send_text: SendText | None = None
    side: EventSide | None = None
    ui: UiChannel | None = None  # the call's screen (an RTVI call's CallUi): the tools' ``ctx.dispatch`` of UI actions

    def events(self) -> EventSide | None:
        if self.side is not None:
            return self.side
        return JsonEvents(self.send_text) if self.send_text is not None else None


class _SharedPeer:
    """A WsPeer whose sends are serialized, so the event stream can share the socket."""

    __slots__ = ("_answered", "_clock", "_lock", "_peer", "_timeout")

    def __init__(self, peer: StarletteWsPeer, write_timeout: float, clock: Clock) -> None:
        self._peer = peer
        self._clock = clock
        self._lock = asyncio.Lock()
        self._timeout = write_timeout
        self._answered = asyncio.Event()  # the transport's first text message (``started``) went out

    @property
    def remote(self) -> str:
        return self._peer.remote

    async def recv(self) -> bytes | str:
        return await self._peer.recv()

    async def send(self, data: bytes | str) -> None:
        async with self._lock:
            await self._peer.send(data)
            if isinstance(data, str):
                self._answered.set()

    async def send_event(self, text: str) -> None:
        """One event message; raises PeerClosed when the socket is gone or stays blocked."""
        try:
            async with deadline(self._clock, self._timeout, "event send"):
                await self._answered.wait()  # never before ``started``
                async with self._lock:
                    await self._peer.send(text)
        except DeadlineExceeded:
            raise PeerClosed(by_peer=False) from None

    async def ping(self) -> Awaitable[object]:
        return await self._peer.ping()

    async def close(self, code: int, reason: str) -> None:
        await self._peer.close(code, reason)

    def abort(self) -> None:
        self._peer.abort()


class EngineEndpoint(TransportEndpoint):
    """The transport endpoint whose calls carry an event side of the socket (see the module docs)."""

    async def __call__(self, websocket: WebSocket, slot: SessionSlot[Any], /) -> None:
        await websocket.accept()
        peer = _SharedPeer(StarletteWsPeer(websocket), self.config.write_timeout, self.clock)

        async def deliver(link: CallLink) -> bool:
            slot.spawn(EngineCall(link, peer.send_event), name="call", hold=True)
            return True

        await run_ws_call(peer, clock=self.clock, config=self.config, deliver=deliver, shutdown=self._shutdown,
                          stats=self.stats, register=self._register)


LISTEN_RATE = 16_000
"""Every call is heard at 16 kHz, whatever its rate: the rate Silero VAD, Smart Turn and the
local Whisper read (and one every cloud STT takes), so an 8, 24 or 48 kHz call works with
every provider (the engine converts the caller's audio as it arrives)."""


async def _no_events(text: str) -> None:
    """A carrier call's event side: Twilio and Telnyx take no messages but media, mark and clear."""


def twilio_endpoint(settings: Settings, clock: Clock, config: ServerConfig, agent: str | None = None) -> TwilioEndpoint:
    """The Twilio Media Streams endpoint of ``brisvox serve``: its calls run the same engine
    (an :class:`EngineCall` whose event side is silent).  When the incoming-call webhook mints
    call tokens (a webhook URL and a signing key), every stream must carry its call's token."""
    twilio = TwilioConfig(path=settings.twilio_path, public_url=settings.twilio_public_url,
                          auth_token=settings.twilio_auth_token)
    admit = None
    if settings.twilio_webhook_url is not None and settings.auth_secret is not None and agent is not None:
        admit = stream_token_check(settings.auth_secret, agent, lambda: clock.wall().timestamp())
    return TwilioEndpoint(clock, config, twilio, session_item=lambda link: EngineCall(link, _no_events), admit=admit)


def telnyx_endpoint(settings: Settings, clock: Clock, config: ServerConfig) -> TelnyxEndpoint:
    """The Telnyx media streaming endpoint of ``brisvox serve`` (no hang-up hook: serve holds no
    Telnyx API key); its calls run the same engine as the others."""
    telnyx = TelnyxConfig(path=settings.telnyx_path, auth_token=settings.telnyx_auth_token,
                          codec=Codec(settings.telnyx_codec))
    return TelnyxEndpoint(clock, config, telnyx, session_item=lambda link: EngineCall(link, _no_events))


def webrtc_endpoint(settings: Settings, clock: Clock) -> HttpCallEndpoint | None:
    """The WHIP endpoint of ``brisvox serve`` (docs/WEBRTC.md): its calls run the same engine, the
    events going to the page's data channel.  None when ``BRISVOX_WEBRTC=off``, or (with one
    warning) when the webrtc extra is not installed: the page then calls over the WebSocket."""
    if not settings.webrtc:
        return None
    try:
        from brisvox.server.webrtc_endpoint import TurnConfig, WebRtcEndpoint, WhipConfig
        from brisvox.transport.webrtc import WebRtcConfig
    except ImportError as exc:
        log.warning("WebRTC is on (BRISVOX_WEBRTC, default on) but the webrtc extra is not installed "
                    "(pip install 'brisvox[webrtc]'): %s; "
                    "browsers call over the WebSocket", exc)
        return None
    hosts = settings.webrtc_hosts or _listener_address(settings.host)
    turn = (TurnConfig(urls=settings.webrtc_turn_urls, secret=settings.webrtc_turn_secret)
            if settings.webrtc_turn_secret is not None and settings.webrtc_turn_urls else None)
    config = WhipConfig(path=settings.webrtc_path, turn=turn, allowed_origins=settings.allowed_origins,
                        webrtc=WebRtcConfig(hosts=hosts, input_rate=LISTEN_RATE,
                                            max_call_duration=settings.max_call_duration))
    log.info("webrtc: signaling at %s, host candidates %s, TURN %s", config.path, ", ".join(hosts),
             ", ".join(turn.urls) if turn is not None else "none")
    return WebRtcEndpoint(clock, config, session_item=lambda link, send_text: EngineCall(link, send_text))


def _listener_address(host: str) -> tuple[str, ...]:
    """The listener's own IP address as the one host candidate; 127.0.0.1 for a name or a wildcard
    (browsers elsewhere then need BRISVOX_WEBRTC_HOSTS)."""
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return ("127.0.0.1",)
    if address.is_unspecified:
        log.warning("BRISVOX_HOST=%s listens everywhere but WebRTC offers only 127.0.0.1: set BRISVOX_WEBRTC_HOSTS "
                    "to the addresses browsers reach", host)
        return ("127.0.0.1",)
    return (host,)


def engine_config(definition: AgentDefinition) -> EngineConfig:
    """The engine settings an agent file gives (the rest are the engine's defaults); the LLM's
    ``temperature`` and ``max_tokens`` options go with every request, ``[filler]`` decides the
    filler policy; calls are heard at :data:`LISTEN_RATE`."""
    llm_options = definition.llm.options
    return EngineConfig(
        turn=definition.turn,
        interruption=definition.interruption,
        llm=LlmConfig(system_prompt=definition.prompt.strip(), greeting=definition.greeting,
                      max_tokens=llm_options.get("max_tokens"), temperature=llm_options.get("temperature"),
                      filler=definition.filler),
        stt=SttConfig(language=definition.language),
        tts=TtsConfig(language=definition.language),
        speculation=SpeculationMode.AT_PAUSE if definition.speculation else SpeculationMode.OFF,
        listen_rate=LISTEN_RATE,
        window=definition.window.policy,
        summary=SummaryConfig(enabled=definition.window.summarize, timeout=definition.window.summary_timeout),
        hooks=definition.hooks,
        agent=definition.name,
    )


def warm_request(definition: AgentDefinition, tools: ToolSet, today: datetime.date) -> LlmRequest | None:
    """The request every call's first turn begins with, as the engine builds it (system prompt,
    date line, the tools offered at the start) and a short caller line; None for a flow (each node has
    its own prompt)."""
    if definition.flow is not None:
        return None
    registry = tools.registry(definition.tools, definition.confirm_tools) if definition.tools else None
    prompt = engine_config(definition).llm.system_prompt
    system = (SystemMessage(text=prompt),) if prompt else ()
    # The tools a call's tool engine offers before anything happened (docs/TOOLS.md, "Offered now").
    listed = registry.specs() if registry is not None else []
    return LlmRequest(messages=(*with_date(system, today), UserMessage(text="Hello.")),
                      tools=tuple(Grounds().offer(listed, {})), described=tuple(listed))


def filler_clips(config: EngineConfig, tts: TtsProvider, clock: Clock) -> ClipCache | None:
    """The process's clip cache of the agent's filler phrases, when ``[filler] prerender`` asks for it."""
    texts = config.llm.filler.clip_texts()
    return ClipCache(tts, config.tts, texts, clock) if texts else None


def agent_flow(definition: AgentDefinition, tools: ToolSet) -> Flow | None:
    """The agent file's ``[flow]`` over the agent's tools, the prompt as its role (checked once, at start)."""
    if definition.flow is None:
        return None
    return definition.flow.build(definition.prompt.strip(), tools.registry(definition.tools, definition.confirm_tools))


def flow_manager(definition: AgentDefinition, flow: Flow | None, clock: Clock) -> FlowManager | None:
    """Each call's own walk through the flow."""
    if flow is None or definition.flow is None:
        return None
    return FlowManager(flow, clock, FlowConfig(summary_timeout=definition.flow.summary_timeout))


LATENCY_STAGES = {
    "speech_end_to_audio": "voice_to_voice",
    "speech_end_to_turn_end": "turn_detection",
    "turn_end_to_first_token": "llm_first_token",
    "turn_end_to_audio": "turn_end_to_audio",
}
"""``TurnLatency`` fields (``<field>_ms`` in the ``latency`` message) and the
``brisvox_turn_latency_seconds{stage}`` label each one feeds."""

MAX_TEXT = 500
"""Text fields of event messages are cut to this many characters."""


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


def event_message(event: ev.EngineEvent) -> dict[str, Any] | None:
    """The client's ``{"type": "event", ...}`` message for an engine event (None: not sent)."""
    body: dict[str, Any]
    if isinstance(event, ev.UserTranscript):
        body = {"kind": "user_transcript", "text": _cut(event.text), "final": event.final}
    elif isinstance(event, ev.UserTurn):
        body = {"kind": "user_turn", "text": _cut(event.text)}
    elif isinstance(event, ev.BotText):
        body = {"kind": "bot_text", "text": _cut(event.text), "round": event.round}
    elif isinstance(event, ev.BotDone):
        body = {"kind": "bot_done"}
    elif isinstance(event, ev.BotHeard):
        body = {"kind": "bot_heard", "text": _cut(event.text), "round": event.round}
    elif isinstance(event, ev.TurnStarted):
        if not event.barge_in:
            return None
        body = {"kind": "interrupted"}
    elif isinstance(event, ev.ToolCallStarted):
        body = {"kind": "tool_call", "id": event.call_id, "name": event.name, "arguments": _cut(event.arguments)}
    elif isinstance(event, ev.ToolCallSettled):
        body = {"kind": "tool_result", "id": event.call_id, "name": event.name, "outcome": event.outcome.value,
                "content": _cut(event.content)}
    elif isinstance(event, ev.TurnLatency):
        body = {"kind": "latency"}
        for name in LATENCY_STAGES:
            value = getattr(event, name)
            if value is not None:
                body[f"{name}_ms"] = round(value * 1000.0, 1)
        if event.turn_end_reason is not None:
            body["turn_end_reason"] = event.turn_end_reason.value
    elif isinstance(event, ev.EngineFailure):
        body = {"kind": "engine_failure", "stage": event.stage, "fatal": event.fatal}
    elif isinstance(event, ev.FillerStarted):
        body = {"kind": "filler", "round": event.round, "tool": event.tool}
    elif isinstance(event, ev.ModelBusy):
        what = _BUSY_WHAT[event.stage]
        body = {"kind": "error", "code": f"{event.stage.value}_busy",
                "message": f"{event.provider} is at capacity: {what}"}
    else:  # TurnEnded, BotAudible: the engine's own marks (TurnLatency carries them)
        return None
    return {"type": "event", "kind": body.pop("kind"), "epoch": event.epoch, "at": round(event.at, 3), **body}


_BUSY_WHAT = {
    BusyStage.STT: "your words could not be transcribed",
    BusyStage.VAD: "your speech may not be heard",
    BusyStage.TTS: "the reply cannot be spoken",
}


def metrics_listener(metrics: ServerMetrics) -> ev.EventListener:
    """An observer listener that counts turns, their latencies, tool outcomes and failures into ``metrics``."""

    def listen(event: ev.EngineEvent) -> None:
        if isinstance(event, ev.TurnLatency):
            metrics.record_turn({stage: getattr(event, name) for name, stage in LATENCY_STAGES.items()})
        elif isinstance(event, ev.ToolCallSettled):
            metrics.record_tool(event.name or "unknown", event.outcome.value)
        elif isinstance(event, ev.EngineFailure):
            metrics.record_failure(event.stage, fatal=event.fatal)
        elif isinstance(event, ev.ModelBusy):
            metrics.record_model_busy(event.stage)

    return listen


async def _forward(observer: CallObserver, send: SendText) -> None:
    """Observer events to the client until the observer closes or the socket goes."""
    try:
        while True:
            message = event_message(await observer.get())
            if message is not None:
                await send(json.dumps(message, separators=(",", ":")))
    except (ChannelClosed, PeerClosed):
        return


async def _drain(observer: CallObserver) -> None:
    """A call with no event side (a test's): the observer's events go nowhere."""
    with contextlib.suppress(ChannelClosed):
        while True:
            await observer.get()


Talk = Callable[[TransportSession, EngineCall, CallObserver, SessionCancel, TaskScope], Awaitable[CallReport]]
"""One call's conversation on its open session: the cascaded engine's or a speech-to-speech model's."""


def call_runner(
    talk: Talk,
    clock: Clock,
    *,
    stop_timeout: float,
    info: dict[str, Any],
    metrics: ServerMetrics | None = None,
    tracing: Tracing | None = None,
    directory: CallDirectory | None = None,
    calls: CallLog | None = None,
) -> Callable[[EngineCall, SessionCancel], Awaitable[None]]:
    """A session runner around ``talk``: opens the call's session and closes it on every path
    (a call that could not start is told why), registers the call in ``directory`` (a hang-up
    ends it as a stop request does), greets the event side with ``info``, forwards the
    engine's events to it, the metrics, the trace and the call's timeline in ``calls`` (``/calls``),
    and logs the call's end once."""
    listener = metrics_listener(metrics) if metrics is not None else None
    ticker = PaceTicker(clock)  # one pacing tick for every call of this runner (the server's)

    async def run(call: EngineCall, cancel: SessionCancel) -> None:
        session = await TransportSession.open(clock, call.link, ticker=ticker)
        try:
            await serve(session, call, cancel)
        except (asyncio.CancelledError, CallFailed):
            raise  # a failed call: the engine has logged it and told the client
        except Exception as exc:  # the call could not start (a setting, the clips): the engine never ran
            # The caller hears why (error, stop{error}, 1011); the manager logs and counts the outcome.
            await session.close(stop_timeout, failure=call_failure(exc))
            raise
        finally:
            await session.close(stop_timeout)  # every path: no transport task outlives the call

    async def serve(session: TransportSession, call: EngineCall, cancel: SessionCancel) -> None:
        if directory is None:
            await converse(session, call, cancel)
            return
        call_id = session.info.call_id
        directory.add(call_id, lambda _control: cancel.set())  # HANGUP, the one control: the engine says goodbye
        try:
            await converse(session, call, cancel)
        finally:
            directory.remove(call_id)

    async def converse(session: TransportSession, call: EngineCall, cancel: SessionCancel) -> None:
        call_id = session.info.call_id
        if calls is None:
            await watched(session, call, cancel, None)
            return
        timeline = calls.open(call_id, session.info.transport, clock.wall().isoformat(timespec="seconds"), clock.now())
        outcome = "aborted"
        try:
            outcome = await watched(session, call, cancel, timeline)
        except CallFailed:
            outcome = "failed"
            raise
        finally:
            calls.close(call_id, clock.now(), outcome)

    async def watched(session: TransportSession, call: EngineCall, cancel: SessionCancel,
                      timeline: CallTimeline | None) -> str:
        tracer = tracing.call(session.info.call_id, clock) if tracing is not None else None
        observer = CallObserver(listener=_all(listener, tracer, timeline.add if timeline is not None else None))
        async with TaskScope("engine-call") as scope:
            side = call.events()
            if side is not None:
                with contextlib.suppress(PeerClosed):
                    await side.hello(info)
            forward = scope.spawn(side.run(observer) if side is not None else _drain(observer), name="events")
            failed: CallFailed | None = None
            try:
                report = await talk(session, call, observer, cancel, scope)
            except CallFailed as exc:  # logged by the engine, told to the client; the session ends as error
                failed, report = exc, exc.report
            finally:
                observer.close()
                if tracer is not None:
                    tracer.close()
            try:
                await bounded(clock, 1.0, forward, "event forwarding")  # cancelled on the deadline
            except DeadlineExceeded:
                log.info("call %s: the last events did not reach the client within 1 s; dropped",
                         session.info.call_id)
        if metrics is not None:
            metrics.record_memory(report.summaries, report.summary_failures, report.uncovered_requests)
        _log_end(session.info.call_id, report, observer.dropped)
        if failed is not None:
            raise failed
        return report.stop_reason.value if report.stop_reason is not None else "ended"

    return run


async def _either(first: asyncio.Event, second: asyncio.Event, out: asyncio.Event) -> None:
    """Set ``out`` when ``first`` or ``second`` is set."""
    async with TaskScope("either") as scope:
        waits = [scope.spawn(first.wait(), name="first"), scope.spawn(second.wait(), name="second")]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        scope.cancel()
    out.set()


def engine_runner(
    definition: AgentDefinition,
    tools: ToolSet,
    clock: Clock,
    providers: CallProviders,
    metrics: ServerMetrics | None = None,
    tracing: Tracing | None = None,
    directory: CallDirectory | None = None,
    calls: CallLog | None = None,
) -> Callable[[EngineCall, SessionCancel], Awaitable[None]]:
    """The session runner of ``brisvox serve`` for a cascaded agent: one engine call per session
    (see the module docs and :func:`call_runner`)."""
    config = engine_config(definition)
    if not providers.summaries:
        config = dataclasses.replace(config, summary=SummaryConfig(enabled=False))
    flow = agent_flow(definition, tools)
    fillers = FillerPolicy.from_config(config.llm.filler)
    clips = filler_clips(config, providers.providers.tts, clock)

    async def talk(session: TransportSession, call: EngineCall, observer: CallObserver, cancel: SessionCancel,
                   scope: TaskScope) -> CallReport:
        if definition.agent_link is None:
            return await converse(session, call, observer, cancel, scope, None)
        # The agent's link opens before the pipeline starts and closes after it (docs/AGENT_PROTOCOL.md).
        async with TaskScope("agent-link") as link_scope:
            info = session.info
            link = await AgentLink.open(definition.agent_link, clock, call_id=info.call_id, agent=definition.name,
                                        transport=info.transport, parameters=info.metadata, scope=link_scope,
                                        on_failure=metrics.record_agent_link_failure if metrics is not None else None)
            stop = cancel
            if link is not None:  # the call also stops when the agent ends it (AgentLink.ended)
                observer.add_listener(link.listen)
                stop = asyncio.Event()
                link_scope.spawn(_either(cancel, link.ended, stop), name="agent-end-watch")
            try:
                if link is None:
                    return await converse(session, call, observer, stop, scope, link)
                with bind_screen(link, call.ui):  # the agent's ui.command to the screen, its app events back
                    return await converse(session, call, observer, stop, scope, link)
            finally:
                if link is not None:
                    await link.close()
                link_scope.cancel()

    def head(session: TransportSession, out_rate: int, link: AgentLink | None) -> Header:
        rates = session.info.sample_rate()
        in_rate = config.stt_rate or config.listen_rate or (rates.input if rates else config.stt.sample_rate)
        return recording_header(definition, tools, clock, input_rate=in_rate, output_rate=out_rate,
                                vad=providers.vad_label, smart_turn=providers.providers.end_of_turn is not None,
                                summaries=config.summary.enabled,
                                remote=link.tools_into(None).specs() if link is not None else (),
                                brain=link.replies is not None if link is not None else None)

    async def converse(session: TransportSession, call: EngineCall, observer: CallObserver, cancel: asyncio.Event,
                       scope: TaskScope, link: AgentLink | None) -> CallReport:
        out_rate = output_rate(session, config)
        async with call_recording(definition.record, lambda: head(session, out_rate, link), session, clock, observer,
                                  scope, metrics) as recorder:
            call_tools, call_providers, summarizer = tools, providers.providers, providers.summarizer
            call_config = config
            brain = brain_call(link, call_providers, config, summarizer, clock,
                               _silent_counter(metrics)) if link is not None else None
            if brain is not None:  # the agent answers the turns: the call's model is the link
                call_providers, call_config, summarizer = brain.providers, brain.config, brain.summarizer
                observer.add_listener(brain.llm.listen)
            if recorder is not None:  # off: nothing is wrapped
                call_tools, call_providers = recorded_tools(tools, recorder), recorder.providers(call_providers)
                if link is not None:  # the agent's commands as they enter the call; brain mode's fallbacks
                    link.input.tap = recorder.agent
                    if brain is not None:
                        brain.llm.tap = recorder.brain_fallback
                if config.summary.enabled:  # the summaries' requests, recorded apart from the turns'
                    summarizer = recorder.summarizer(summarizer or LlmSummarizer(provider=providers.providers.llm))
            registry = (call_tools.registry(definition.tools, definition.confirm_tools)
                        if definition.tools or flow else None)
            if link is not None:  # the agent's remote tools, under the tool engine's rules (and recorded)
                registry = link.tools_into(registry, recorder.tool if recorder is not None else None)
            # The first call at a rate renders the clips for the later ones (its fillers are text).
            rendering = clips.start(out_rate, scope) if clips is not None else None
            try:
                return await run_call(session, call_config, call_providers, clock, cancel=cancel, tools=registry,
                                      filler=fillers.clone(), observer=observer,
                                      clips=clips.store(out_rate) if clips is not None else None,
                                      summarizer=summarizer, flow=flow_manager(definition, flow, clock), ui=call.ui,
                                      phone=phone_plan(definition, session.info.metadata, os.environ, metrics,
                                                       linked=link is not None),
                                      agent=link.input if link is not None else None)
            finally:
                if rendering is not None:
                    rendering.cancel()  # unfinished: the next call starts it again

    return call_runner(talk, clock, stop_timeout=config.timeouts.stop, info=providers.page_info(definition),
                       metrics=metrics, tracing=tracing, directory=directory, calls=calls)


def _silent_counter(metrics: ServerMetrics | None) -> Callable[[], None] | None:
    """Counts a brain that missed a reply's first line (``brisvox_agent_link_failures_total{kind="silent"}``)."""
    if metrics is None:
        return None
    return lambda: metrics.record_agent_link_failure("silent")


def phone_plan(definition: AgentDefinition, metadata: Mapping[str, str], environ: Mapping[str, str],
               metrics: ServerMetrics | None, linked: bool = False) -> PhonePlan | None:
    """The call's carrier control for the telephony tools and an agent link's ``end`` and
    ``transfer`` (None: the agent lists none of those tools and has no link).
    A carrier call whose named credential variable is unset gets no line (logged): its tools
    answer the model "no phone line", and the rest of the call works."""
    if not linked and not any(name in BUILTIN_TOOLS for name in definition.tools):
        return None
    settings = definition.telephony
    try:
        control = call_control(metadata, settings, environ)
    except CarrierError:
        log.exception("call %s: no phone line for the telephony tools", metadata.get("carrier_call_id", "?"))
        return None
    on_failure = metrics.record_carrier_failure if metrics is not None else None
    if settings is None:
        return PhonePlan(control, on_failure=on_failure)
    return PhonePlan(control, timeout=settings.timeout, transfer_to=settings.transfer_to, on_failure=on_failure)


def recording_header(definition: AgentDefinition, tools: ToolSet, clock: Clock, *, input_rate: int,
                     output_rate: int, vad: str | None, smart_turn: bool = False, pipeline: str = "cascade",
                     summaries: bool = False, remote: Sequence[ToolSpec] = (), brain: bool | None = None) -> Header:
    """A call's recording header: the agent (its file, absolute, so a replay finds it from
    anywhere; None for a Python agent), the clock, the rates, and the tools it offers: its
    own, then ``remote``, its agent link's (marked, with their timing: a replay has no link
    and offers them as recorded); ``brain``: None without an open agent link, else whether its
    agent answers the turns."""
    source = definition.source
    agent_file = str(source.resolve()) if source.is_file() else None
    offered = tools.registry(definition.tools, definition.confirm_tools).specs() if definition.tools else ()
    virtual = isinstance(asyncio.get_running_loop(), VirtualTimeLoop)
    return header(definition.name, agent_file, virtual=virtual, input_rate=input_rate, output_rate=output_rate,
                  started=clock.wall().isoformat(), vad=vad, smart_turn=smart_turn, pipeline=pipeline,
                  summaries=summaries, tools=(*(tool_record(spec) for spec in offered),
                                              *(tool_record(spec, remote=True) for spec in remote)), brain=brain)


@contextlib.asynccontextmanager
async def call_recording(settings: RecordSettings | None, head: Callable[[], Header], session: TransportSession,
                         clock: Clock, observer: CallObserver, scope: TaskScope,
                         metrics: ServerMetrics | None) -> AsyncIterator[CallRecorder | None]:
    """The call's recorder (``[record]``; None when off: nothing is recorded): it hears the
    call's events, writes in ``scope`` and is closed (bounded) and counted when the call ends."""
    if settings is None:
        yield None
        return
    recorder = CallRecorder(settings, session.info.call_id, clock, head(), origin=session.opened_at)
    observer.add_listener(recorder.listen)
    writing = scope.spawn(recorder.run(), name="recorder")
    try:
        yield recorder
    finally:
        recorder.finish()
        await _written(recorder, writing, clock)
        if metrics is not None:
            metrics.record_recording(failed=recorder.failures > 0, dropped=recorder.dropped)


def recorded_tools(tools: ToolSet, recorder: CallRecorder) -> ToolSet:
    """``tools`` with each function wrapped by the call's recorder (the built-in telephony tools too)."""
    out = ToolSet()
    for name in tools.offered():
        spec, tool = tools.spec(name), tools.tool(name)
        if spec is not None and tool is not None:
            out.add(spec, recorder.tool(name, tool))
    return out


async def _written(recorder: CallRecorder, writing: asyncio.Task[None], clock: Clock) -> None:
    """The recording's last lines reach the disk (bounded: a stuck disk does not hold the call)."""
    try:
        await bounded(clock, _RECORDING_CLOSE, asyncio.shield(writing), "closing the recording")
    except DeadlineExceeded:
        log.error("recording %s: not closed within %.0f s; it may be incomplete", recorder.path, _RECORDING_CLOSE)


_RECORDING_CLOSE = 5.0


def _all(*listeners: ev.EventListener | None) -> ev.EventListener | None:
    """One listener for the observer: the metrics', the trace's and the timeline's (any may be absent)."""
    present = [listener for listener in listeners if listener is not None]
    if len(present) <= 1:
        return present[0] if present else None

    def every(event: ev.EngineEvent) -> None:
        for listener in present:
            listener(event)
    return every


def _log_end(call_id: str, report: CallReport, dropped: int) -> None:
    ended = f"failed in {report.failure.stage}" if report.failure is not None else (
        report.stop_reason.value if report.stop_reason else "unknown")
    log.info("call %s ended (%s): %d turns, %d interrupts, %d fillers (%d clips), %d failures, %d events dropped",
             call_id, ended, report.turns, report.interrupts, report.fillers, report.clips_played, report.failures,
             dropped)
