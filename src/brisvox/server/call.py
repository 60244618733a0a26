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
:class:`~brisvox.engine.CallObserver` whose events are forwarded to the client as
``{"type": "event", ...}`` messages (docs/WEBSOCKET_PROTOCOL.md).  The shutdown's
cooperative stop is the engine's ``cancel``.

The same events feed the server's ``/metrics`` (:func:`metrics_listener`): each
``latency`` event is an answered turn with its timeline, each ``tool_result`` a settled
tool call.  The listener sees every event as it is emitted, so a slow page that loses
events to the observer's drop-oldest queue does not make the counters lie.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from starlette.websockets import WebSocket

from brisvox.agent.flows import Flow, FlowConfig, FlowManager
from brisvox.agent.tools import FillerConfig, FillerPhrase, FillerPolicy
from brisvox.core.clock import Clock
from brisvox.core.errors import ChannelClosed
from brisvox.core.tasks import TaskScope
from brisvox.engine import CallObserver, ClipCache, EngineConfig, LlmConfig, Speculation, run_call
from brisvox.engine.call import output_rate
from brisvox.engine.config import SummaryConfig
from brisvox.engine.observe import CallEvent, CallEventKind, EventListener
from brisvox.providers.stt import SttConfig
from brisvox.providers.tts import TtsConfig, TtsProvider
from brisvox.server.agent_file import AgentDefinition
from brisvox.server.call_providers import CallProviders
from brisvox.server.metrics import ServerMetrics
from brisvox.server.session import SessionCancel, SessionSlot
from brisvox.server.tools import ToolSet
from brisvox.server.ws_endpoint import StarletteWsPeer, TransportEndpoint
from brisvox.transport.link import CallLink
from brisvox.transport.session import TransportSession
from brisvox.transport.websocket import PeerClosed
from brisvox.transport.websocket import run_call as run_ws_call

__all__ = ["LATENCY_STAGES", "EngineCall", "EngineEndpoint", "engine_config", "engine_runner", "metrics_listener"]

log = logging.getLogger(__name__)

SendText = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True, eq=False)
class EngineCall:
    """What the session runner gets for one call: the link, and the socket's text side."""

    link: CallLink
    send_text: SendText


class _SharedPeer:
    """A WsPeer whose sends are serialized, so the event stream can share the socket."""

    __slots__ = ("_answered", "_lock", "_peer", "_timeout")

    def __init__(self, peer: StarletteWsPeer, write_timeout: float) -> None:
        self._peer = peer
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
            async with asyncio.timeout(self._timeout):
                await self._answered.wait()  # never before ``started``
                async with self._lock:
                    await self._peer.send(text)
        except TimeoutError:
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
        peer = _SharedPeer(StarletteWsPeer(websocket), self.config.write_timeout)

        async def deliver(link: CallLink) -> bool:
            slot.spawn(EngineCall(link, peer.send_event), name="call")
            return True

        await run_ws_call(peer, clock=self.clock, config=self.config, deliver=deliver, shutdown=self._shutdown,
                          stats=self.stats, register=self._register)


def engine_config(definition: AgentDefinition) -> EngineConfig:
    """The engine settings an agent file gives (the rest are the engine's defaults); the LLM's
    ``temperature`` and ``max_tokens`` options go with every request, ``[filler]`` decides the
    filler policy."""
    llm_options = definition.llm.options
    fl = definition.filler
    filler = FillerConfig(enabled=fl.enabled, delay=None if fl.per_tool else fl.delay, per_tool=fl.per_tool)
    return EngineConfig(
        turn=definition.turn,
        interruption=definition.interruption,
        llm=LlmConfig(system_prompt=definition.prompt.strip(), greeting=definition.greeting,
                      max_tokens=llm_options.get("max_tokens"), temperature=llm_options.get("temperature"),
                      filler=filler),
        stt=SttConfig(language=definition.language),
        tts=TtsConfig(language=definition.language),
        speculation=Speculation.AT_PAUSE if definition.speculation else Speculation.OFF,
        window=definition.window.policy,
        summary=SummaryConfig(enabled=definition.window.summarize, timeout=definition.window.summary_timeout),
    )


def filler_policy(definition: AgentDefinition, config: EngineConfig) -> FillerPolicy:
    """The agent file's filler phrases on the engine's filler timing; each call takes a clone,
    so every call rotates its phrases from the first.  With ``prerender`` each phrase names
    its clip (:func:`filler_clips`)."""
    phrases = [FillerPhrase(text, clip=_clip_key(i) if definition.filler.prerender else None)
               for i, text in enumerate(definition.filler.phrases)]
    return FillerPolicy.from_config(config.llm.filler).with_phrases(phrases)


def filler_clips(definition: AgentDefinition, config: EngineConfig, tts: TtsProvider, clock: Clock) -> ClipCache | None:
    """The process's clip cache of the agent's filler phrases, when ``[filler] prerender`` asks for it."""
    fl = definition.filler
    if not (fl.enabled and fl.prerender):
        return None
    return ClipCache(tts, config.tts, {_clip_key(i): text for i, text in enumerate(fl.phrases)}, clock)


def _clip_key(index: int) -> str:
    return f"filler-{index}"


def _agent_flow(definition: AgentDefinition, tools: ToolSet) -> Flow | None:
    """The agent file's ``[flow]`` over the agent's tools, the prompt as its role (checked once, at start)."""
    if definition.flow is None:
        return None
    return definition.flow.build(definition.prompt.strip(), tools.registry(definition.tools, definition.confirm_tools))


def _flow_manager(definition: AgentDefinition, flow: Flow | None, clock: Clock) -> FlowManager | None:
    """Each call's own walk through the flow."""
    if flow is None or definition.flow is None:
        return None
    return FlowManager(flow, clock, FlowConfig(summary_timeout=definition.flow.summary_timeout))


LATENCY_STAGES = {
    "speech_end_to_audio_ms": "voice_to_voice",
    "speech_end_to_turn_end_ms": "turn_detection",
    "turn_end_to_first_token_ms": "llm_first_token",
    "turn_end_to_audio_ms": "turn_end_to_audio",
}
"""``latency`` event fields and the ``brisvox_turn_latency_seconds{stage}`` label each one feeds."""


def metrics_listener(metrics: ServerMetrics) -> EventListener:
    """An observer listener that counts turns, their latencies and tool outcomes into ``metrics``."""

    def listen(event: CallEvent) -> None:
        if event.kind is CallEventKind.LATENCY:
            latencies: dict[str, float | None] = {}
            for field_name, stage in LATENCY_STAGES.items():
                value = event.data.get(field_name)
                latencies[stage] = value / 1000.0 if isinstance(value, int | float) else None
            metrics.record_turn(latencies)
        elif event.kind is CallEventKind.TOOL_RESULT:
            metrics.record_tool(str(event.data.get("name") or "unknown"), str(event.data.get("outcome", "ok")))

    return listen


async def _forward(observer: CallObserver, send: SendText) -> None:
    """Observer events to the client until the observer closes or the socket goes."""
    try:
        while True:
            event = await observer.get()
            await send(event.to_json())
    except (ChannelClosed, PeerClosed):
        return


def engine_runner(
    definition: AgentDefinition,
    tools: ToolSet,
    clock: Clock,
    providers: CallProviders,
    metrics: ServerMetrics | None = None,
) -> Callable[[EngineCall, SessionCancel], Awaitable[None]]:
    """The session runner of ``brisvox serve``: one engine call per session (see the module docs)."""
    config = engine_config(definition)
    if not providers.summaries:
        config = dataclasses.replace(config, summary=SummaryConfig(enabled=False))
    flow = _agent_flow(definition, tools)
    fillers = filler_policy(definition, config)
    clips = filler_clips(definition, config, providers.providers.tts, clock)
    listener = metrics_listener(metrics) if metrics is not None else None
    info = json.dumps({"type": "event", "kind": "call_info", **providers.page_info(definition)})

    async def run(call: EngineCall, cancel: SessionCancel) -> None:
        session = await TransportSession.open(clock, call.link)
        registry = tools.registry(definition.tools, definition.confirm_tools) if definition.tools or flow else None
        observer = CallObserver(listener=listener)
        async with TaskScope("engine-call") as scope:
            with contextlib.suppress(PeerClosed):
                await call.send_text(info)
            forward = scope.spawn(_forward(observer, call.send_text), name="events")
            out_rate = output_rate(session, config)
            # The first call at a rate renders the clips for the later ones (its fillers are text).
            rendering = clips.start(out_rate, scope) if clips is not None else None
            try:
                report = await run_call(session, config, providers.providers, clock, cancel=cancel, tools=registry,
                                        filler=fillers.clone(), observer=observer,
                                        clips=clips.store(out_rate) if clips is not None else None,
                                        summarizer=providers.summarizer, flow=_flow_manager(definition, flow, clock))
            finally:
                observer.close()
                if rendering is not None:
                    rendering.cancel()  # unfinished: the next call starts it again
            try:
                async with asyncio.timeout(1.0):
                    await forward
            except TimeoutError:
                forward.cancel()
        if metrics is not None:
            metrics.record_memory(report.summaries, report.summary_failures, report.uncovered_requests)
        log.info("call %s ended (%s): %d turns, %d interrupts, %d fillers (%d clips), %d events dropped",
                 session.info.call_id, report.stop_reason.value if report.stop_reason else "unknown", report.turns,
                 report.interrupts, report.fillers, report.clips_played, observer.dropped)

    return run
