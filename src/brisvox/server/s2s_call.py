"""A speech-to-speech agent under ``brisvox serve``: its model in place of STT, LLM and TTS.

An agent whose file has an ``[s2s]`` section (or a :class:`brisvox.Agent` with ``s2s=``) runs
each call through :func:`brisvox.engine.run_s2s_call` with the same transports, tools and
claim guards as the cascaded engine: :func:`build_s2s_providers` builds the vendor's adapter
once (OpenAI Realtime or Gemini Live; building opens no connection, each call connects its
own session) and :func:`s2s_runner` is the session runner, the cascaded engine's
:func:`~brisvox.server.call.call_runner` around ``run_s2s_call``.  The VAD is built only when
our side decides barge-ins (``barge_in = "ours"``).  With ``[record]`` the model and the tools
are wrapped by the call's recorder (the caller audio the model heard, its events, what the
call sent it, the tool results), as a cascaded call's providers are.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self

from brisvox.core.clock import Clock
from brisvox.core.errors import ConfigError
from brisvox.core.tasks import TaskScope
from brisvox.engine import CallObserver, CallReport
from brisvox.engine.s2s import run_s2s_call
from brisvox.inference.vad import VoiceActivityDetector
from brisvox.providers.s2s import BargeIn, S2sConfig, S2sProvider
from brisvox.recording.format import Header
from brisvox.server.agent_file import AgentDefinition
from brisvox.server.call import EngineCall, call_recording, call_runner, recorded_tools, recording_header
from brisvox.server.call_providers import close_all, extra_for, key_for, vad_factory
from brisvox.server.calllog import CallLog
from brisvox.server.directory import CallDirectory
from brisvox.server.metrics import ServerMetrics
from brisvox.server.session import SessionCancel
from brisvox.server.tools import ToolSet
from brisvox.transport.session import TransportSession

if TYPE_CHECKING:  # without importing OpenTelemetry
    from brisvox.server.tracing import Tracing

__all__ = ["S2S_RATES", "S2sCallProviders", "build_s2s_providers", "s2s_config", "s2s_runner"]

log = logging.getLogger(__name__)

S2S_RATES: Mapping[str, tuple[int, int]] = {"openai-realtime": (24_000, 24_000), "gemini-live": (16_000, 24_000)}
"""Each model's audio rates, in and out (the stage resamples the call's audio to and from them)."""
_STOP_TIMEOUT = 5.0


@dataclass(slots=True)
class S2sCallProviders:
    """The shared parts of an S2S agent's calls: the model's adapter, its rates, and the VAD for our barge-in."""

    provider: S2sProvider
    label: str
    rates: tuple[int, int]
    vad: Callable[[int], VoiceActivityDetector] | None = None
    vad_label: str = "the model's"
    closers: list[Callable[[], Any]] = field(default_factory=list)

    @property
    def llm_label(self) -> str:
        """What the start-up line, ``/agent.json`` and ``brisvox check`` say runs the agent."""
        return self.label

    async def warm(self, prefix: object = None) -> None:
        """Nothing to load (each call connects its own session; ``prefix``, a cascaded LLM's, does not apply)."""
        log.info("call providers warm")

    def page_info(self, definition: AgentDefinition) -> dict[str, Any]:
        return {"agent": definition.name, "greeting": definition.greeting, "llm": self.label, "vad": self.vad_label,
                "stt": self.label, "tts": self.label, "tools": list(definition.tools),
                "confirm_tools": list(definition.confirm_tools)}

    async def aclose(self) -> None:
        await close_all(self.closers)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        await self.aclose()


def s2s_label(definition: AgentDefinition) -> str:
    assert definition.s2s is not None
    model = definition.s2s.options.get("model")
    return f"s2s {definition.s2s.provider}" + (f" ({model})" if model else "")


def s2s_config(definition: AgentDefinition, rates: tuple[int, int]) -> S2sConfig:
    """What each call of the agent asks its model (``rates``: the model's, in and out)."""
    policy = definition.s2s_policy
    return S2sConfig(instructions=definition.prompt, greeting=definition.greeting, input_rate=rates[0],
                     output_rate=rates[1], barge_in=policy.barge_in, think_budget=policy.think_budget,
                     filler=definition.filler)


def build_s2s_providers(definition: AgentDefinition, clock: Clock, environ: Mapping[str, str]) -> S2sCallProviders:
    """The adapter of ``definition.s2s`` (raises ConfigError naming a missing extra or key)."""
    choice = definition.s2s
    if choice is None:
        raise ConfigError(f"{definition.source}: the agent has no [s2s] model")
    key = key_for(definition, choice, environ)
    provider: S2sProvider
    if choice.provider == "openai-realtime":
        with extra_for(choice.stage, choice.provider):
            from brisvox.providers.cloud.openai_realtime import OpenAiRealtime, OpenAiRealtimeOptions
        provider = OpenAiRealtime(OpenAiRealtimeOptions(api_key=key, **choice.options), clock)
    elif choice.provider == "gemini-live":
        with extra_for(choice.stage, choice.provider):
            from brisvox.providers.cloud.gemini_live import GeminiLive, GeminiLiveOptions
        provider = GeminiLive(GeminiLiveOptions(api_key=key, **choice.options), clock)
    else:
        raise ConfigError(f"{definition.source}: s2s provider {choice.provider!r} is not available in this build")
    closers: list[Callable[[], Any]] = []
    vad, vad_label = None, "the model's"
    if definition.s2s_policy.barge_in is BargeIn.OURS:
        vad, vad_label, pool = vad_factory(definition.vad)
        if pool is not None:
            closers.append(pool.aclose)
    label = s2s_label(definition)
    log.info("call providers: %s, barge-in by %s", label, vad_label)
    return S2sCallProviders(provider=provider, label=label, rates=S2S_RATES[choice.provider], vad=vad,
                            vad_label=vad_label, closers=closers)


def s2s_runner(
    definition: AgentDefinition,
    tools: ToolSet,
    clock: Clock,
    providers: S2sCallProviders,
    metrics: ServerMetrics | None = None,
    tracing: Tracing | None = None,
    directory: CallDirectory | None = None,
    calls: CallLog | None = None,
) -> Callable[[EngineCall, SessionCancel], Awaitable[None]]:
    """The session runner of ``brisvox serve`` for a speech-to-speech agent (see the module docs)."""
    config = s2s_config(definition, providers.rates)

    def head() -> Header:
        return recording_header(definition, tools, clock, input_rate=config.input_rate, output_rate=config.output_rate,
                                vad=providers.vad_label if providers.vad is not None else None, pipeline="s2s")

    async def talk(session: TransportSession, call: EngineCall, observer: CallObserver, cancel: SessionCancel,
                   scope: TaskScope) -> CallReport:
        async with call_recording(definition.record, head, session, clock, observer, scope, metrics) as recorder:
            call_tools, model = tools, providers.provider
            if recorder is not None:  # off: nothing is wrapped
                call_tools, model = recorded_tools(tools, recorder), recorder.s2s(model)
            registry = call_tools.registry(definition.tools, definition.confirm_tools) if definition.tools else None
            rates = session.info.sample_rate()
            vad = None
            if providers.vad is not None:
                vad = providers.vad(rates.input if rates is not None else config.input_rate)
            return await run_s2s_call(session, config, model, clock, tools=registry, observer=observer,
                                      cancel=cancel, vad=vad)

    return call_runner(talk, clock, stop_timeout=_STOP_TIMEOUT, info=providers.page_info(definition),
                       metrics=metrics, tracing=tracing, directory=directory, calls=calls)
