"""``run_call``: one call, end to end, over a TransportSession.

    pump → listen → turn driver → LLM runner → speak → transport out

The pump (this module) turns transport events into frames: caller audio into the head
of the pipeline, position reports into its tail (upstream, for TransportOut).  Every
helper task belongs to the call's TaskScope; every provider session is an async context
manager closed with the call; ``cancel`` (an Event) or the caller's hang-up ends it.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from brisvox.agent.context import Context
from brisvox.agent.flows import Flow, FlowManager
from brisvox.agent.tools import FillerPolicy, ToolEngine, ToolRegistry
from brisvox.agent.turn import TurnMachine
from brisvox.agent.window import Summarizer
from brisvox.audio.resample import ResampleStream
from brisvox.core.clock import Clock
from brisvox.core.errors import ChannelClosed, ConfigError, DeadlineExceeded
from brisvox.core.frames import Direction, DtmfFrame, InputAudioFrame, PlaybackFrame
from brisvox.core.pipeline import Pipeline, RunningPipeline
from brisvox.core.tasks import TaskScope
from brisvox.core.timeline import TimelineRecorder, TurnRecord
from brisvox.engine.clips import FillerClipStore
from brisvox.engine.config import EngineConfig, Speculation
from brisvox.engine.driver import TurnAnalyzer, TurnDriver
from brisvox.engine.flowrun import FlowRun
from brisvox.engine.listen import ListenStage
from brisvox.engine.memory import CallMemory
from brisvox.engine.observe import CallObserver, ObserverTap
from brisvox.engine.out import TransportOut
from brisvox.engine.playout import PlayoutBook
from brisvox.engine.runner import LlmRunner
from brisvox.engine.speak import SpeakStage
from brisvox.inference.mel import SAMPLE_RATE as END_OF_TURN_RATE
from brisvox.inference.smart_turn import TurnAudio
from brisvox.inference.vad import VoiceActivityDetector
from brisvox.providers.llm import LlmProvider
from brisvox.providers.stt import SttProvider, SttSession
from brisvox.providers.summarizer import LlmSummarizer
from brisvox.providers.tts import TtsProvider, TtsSession
from brisvox.transport.events import Dtmf, PlaybackPosition, Stopped, StopReason
from brisvox.transport.session import TransportSession

__all__ = ["CallReport", "Providers", "run_call"]

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Providers:
    """The providers of one call; ``vad`` builds a detector for the caller's sample rate.

    ``end_of_turn`` (Smart Turn) is optional: without it the turn machine's fallback
    deadline ends an adaptive turn.  It reads 16 kHz audio, so it is used only on calls
    whose input is 16 kHz.
    """

    stt: SttProvider
    llm: LlmProvider
    tts: TtsProvider
    vad: Callable[[int], VoiceActivityDetector]
    end_of_turn: TurnAnalyzer | None = None


@dataclass(frozen=True, slots=True)
class CallReport:
    stop_reason: StopReason | None
    context: Context
    turns: int
    interrupts: int
    fallbacks: int
    stale_audio_dropped: int
    timeline: tuple[TurnRecord, ...]
    fillers: int = 0  # filler rounds spoken
    fillers_in_context: int = 0
    speculations: int = 0  # speculative starts (EngineConfig.speculation)
    speculations_committed: int = 0  # of those, taken as the turn's first round
    clips_played: int = 0  # filler rounds spoken by a pre-rendered clip
    clips_dropped: int = 0  # cued clips a barge-in (or the wait limit) kept from playing
    clip_fallbacks: int = 0  # cued clips spoken by the provider (none at the call's rate)
    summaries: int = 0  # window summaries stored (EngineConfig.summary)
    summary_failures: int = 0  # refreshes that failed or timed out (each logged with its traceback)
    uncovered_requests: int = 0  # requests that left out turns no summary covered (each logged)
    flow_transitions: int = 0  # nodes entered (a flow passed to run_call)
    flow_refused_calls: int = 0  # calls to tools the node does not offer, answered tool_not_available


async def run_call(
    session: TransportSession,
    config: EngineConfig,
    providers: Providers,
    clock: Clock,
    cancel: asyncio.Event | None = None,
    context: Context | None = None,
    tools: ToolRegistry | None = None,
    filler: FillerPolicy | None = None,
    observer: CallObserver | None = None,
    clips: FillerClipStore | None = None,
    summarizer: Summarizer | None = None,
    flow: Flow | FlowManager | None = None,
) -> CallReport:
    """Run one call until the caller hangs up, the transport ends or ``cancel`` is set.

    ``filler`` replaces the filler policy built from ``config.llm.filler`` (phrases, clips).
    ``observer`` (optional) gets the call's events (:mod:`brisvox.engine.observe`).
    ``clips`` (optional) are pre-rendered filler clips (:mod:`brisvox.engine.clips`): the
    filler policy takes them as its clip cache, and the speak stage plays them.
    ``summarizer`` makes the window's summaries (with ``config.summary.enabled``; default: an
    :class:`~brisvox.providers.summarizer.LlmSummarizer` over ``providers.llm``); a flow's
    ``ResetWithSummary`` uses it too.  ``flow`` (a :class:`~brisvox.agent.flows.Flow`, or a
    :class:`~brisvox.agent.flows.FlowManager` the application keeps, not yet started) runs the call as that flow;
    it needs ``tools`` (its tools are taken from them) and turns speculation off.
    """
    context = context if context is not None else Context()
    rates = session.info.sample_rate()
    in_rate = rates.input if rates else config.stt.sample_rate
    out_rate = output_rate(session, config)
    stt_rate = config.stt_rate or in_rate
    stt_config = dataclasses.replace(config.stt, sample_rate=stt_rate)
    tts_config = dataclasses.replace(config.tts, sample_rate=out_rate)
    book = PlayoutBook()
    timeline = TimelineRecorder()
    machine = TurnMachine(config.turn, config.interruption)
    if clips is not None:
        filler = (filler if filler is not None else FillerPolicy.from_config(config.llm.filler)).with_clips(clips)
    commands = session.commands()
    if summarizer is None and config.summary.enabled:
        summarizer = LlmSummarizer(provider=providers.llm)
    if flow is not None and tools is None:
        raise ConfigError("run_call got a flow but no tools: pass the registry the flow was built with")
    flow_run = _flow_run(flow, clock, summarizer) if flow is not None else None
    speculation = config.speculation
    if flow_run is not None and speculation is not Speculation.OFF:
        log.info("speculation is off for this call: a flow decides each round's tools")
        speculation = Speculation.OFF

    def clear(epoch: int) -> None:
        with contextlib.suppress(ChannelClosed):
            commands.clear(epoch)

    async with TaskScope("call") as scope:
        stt: SttSession = await _connect("speech-to-text", providers.stt.connect(stt_config), config.timeouts.connect)
        try:
            tts: TtsSession = await _connect("text-to-speech", providers.tts.connect(tts_config), config.timeouts.connect)
        except BaseException:
            await stt.aclose()
            raise
        engine = ToolEngine(tools, session.info.call_id, clock, config.tools) if tools is not None else None
        async with stt, tts, contextlib.AsyncExitStack() as stack:
            if engine is not None:
                await stack.enter_async_context(engine)
            analyzer = providers.end_of_turn if in_rate == END_OF_TURN_RATE else None
            if providers.end_of_turn is not None and analyzer is None:
                log.info("end-of-turn model skipped: the call's input is %d Hz, the model reads 16 kHz", in_rate)
            turn_audio = TurnAudio() if analyzer is not None else None
            resample = ResampleStream(in_rate, stt_rate) if stt_rate != in_rate else None
            listen = ListenStage(providers.vad(in_rate), stt, scope, turn_audio, resample)
            driver = TurnDriver(machine, clear, scope, analyzer, turn_audio, timeline,
                                greets=config.llm.greeting is not None)
            memory = CallMemory(config.window, summarizer if config.summary.enabled else None, config.summary,
                                clock, scope)
            hang_up = asyncio.Event()  # a flow's EndCall
            runner = LlmRunner(
                providers.llm, context, book, config.llm, config.timeouts, scope, timeline, engine, memory,
                filler, speculation, flow_run, hang_up.set,
            )
            speak = SpeakStage(
                tts,
                book,
                config.segmenter,
                scope,
                timeline,
                reconnect=lambda: _connect("text-to-speech", providers.tts.connect(tts_config), config.timeouts.connect),
                clips=clips,
                clip_rate=out_rate,
            )
            out = TransportOut(commands, book, timeline)
            taps = ObserverTap.pair(observer, context, timeline) if observer is not None else ()
            pipeline = Pipeline("call").then(listen)
            for stage in (*taps[:1], driver, runner, *taps[1:], speak, out):
                pipeline.then(stage)
            running = pipeline.start(clock)
            session.route_caller_audio(_audio_into(running))
            try:
                await _pump(session, running, cancel, hang_up)
                with contextlib.suppress(Exception):
                    await running.stop(config.timeouts.stop)
            finally:
                session.route_caller_audio(None)
                # Helpers first: a reader still pushing into a closed inbox would fail the call.
                scope.cancel()
                await running.aclose()
                await speak.aclose()
    reason = await session.close(config.timeouts.stop)
    return CallReport(
        stop_reason=reason,
        context=context,
        turns=runner.stats.turns,
        interrupts=driver.interrupts,
        fallbacks=runner.stats.fallbacks,
        stale_audio_dropped=out.stale_audio_dropped,
        timeline=tuple(timeline.records()),
        fillers=runner.stats.fillers,
        fillers_in_context=runner.stats.fillers_in_context,
        speculations=runner.stats.speculations,
        speculations_committed=runner.stats.speculations_committed,
        clips_played=speak.clips_played,
        clips_dropped=speak.clips_dropped,
        clip_fallbacks=speak.clip_fallbacks,
        summaries=memory.stats.summaries,
        summary_failures=memory.stats.summary_failures,
        uncovered_requests=memory.stats.uncovered_requests,
        flow_transitions=flow_run.transitions if flow_run is not None else 0,
        flow_refused_calls=flow_run.refused if flow_run is not None else 0,
    )


def _flow_run(flow: Flow | FlowManager, clock: Clock, summarizer: Summarizer | None) -> FlowRun:
    manager = flow if isinstance(flow, FlowManager) else FlowManager(flow, clock)
    return FlowRun(manager, summarizer)


def output_rate(session: TransportSession, config: EngineConfig) -> int:
    """The rate the call's bot audio is made at: the transport's, else the TTS config's."""
    rates = session.info.sample_rate()
    return rates.output if rates else config.tts.sample_rate


async def _connect(what: str, aw: Awaitable[T], timeout: float) -> T:
    try:
        async with asyncio.timeout(timeout):
            return await aw
    except TimeoutError:
        raise DeadlineExceeded(f"connecting {what}", timeout) from None


async def _pump(
    session: TransportSession, running: RunningPipeline, cancel: asyncio.Event | None, hang_up: asyncio.Event
) -> None:
    """Transport events into the pipeline until the call ends, ``cancel`` or ``hang_up`` is set."""
    async with TaskScope("pump") as scope:
        events = scope.spawn(_pump_events(session, running), name="events")
        stops = [scope.spawn(e.wait(), name="stop-watch") for e in (cancel, hang_up) if e is not None]
        await asyncio.wait((events, *stops), return_when=asyncio.FIRST_COMPLETED)
        scope.cancel()


def _audio_into(running: RunningPipeline) -> Callable[[InputAudioFrame], None]:
    """The session's caller-audio sink: straight into the pipeline's head (listen drops the
    oldest audio), in the session's input task, so the frame skips the events channel and
    the pump (one wake-up less per 20 ms frame)."""

    def sink(frame: InputAudioFrame) -> None:
        with contextlib.suppress(ChannelClosed):  # the pipeline has stopped: nobody listens any more
            running.try_send(frame)

    return sink


async def _pump_events(session: TransportSession, running: RunningPipeline) -> None:
    # Every transport event but caller audio (see _audio_into).  A ChannelClosed ends the
    # pump: the transport or the pipeline (which may stop while an event is on its way in)
    # is gone.
    with contextlib.suppress(ChannelClosed):
        while running.running:
            event = await session.recv()
            if isinstance(event, PlaybackPosition):
                await running.send(
                    PlaybackFrame(
                        epoch=event.epoch,
                        utterance=event.utterance,
                        samples=event.samples,
                        sample_rate=event.sample_rate,
                    ),
                    Direction.UPSTREAM,
                )
            elif isinstance(event, Dtmf):
                await running.send(DtmfFrame(epoch=0, digit=event.digit))  # never dropped
            elif isinstance(event, Stopped):
                return
