"""``run_call``: one call, end to end, over a TransportSession.

    pump → listen → turn driver → LLM runner → speak → transport out

An agent process's commands (``run_call(agent=)``, :mod:`brisvox.engine.agent_input`) are
applied by a task of their own: bot lines into the turn driver's inbox, notes into the head
(as the caller screen's notes), a narrowing of the tools to the tool engine, a transfer
through the phone line; what cannot be carried out is refused to the agent.

The pump (this module) turns transport events into frames: caller audio into the head
of the pipeline (in the session's input task), keys and typed text too.  Position reports
skip the pipeline: the session hands them to TransportOut in its output task, which keeps
the record and tells the turn driver (and the runner) what played.  Every
helper task belongs to the call's TaskScope; every provider session is an async context
manager closed with the call; ``cancel`` (an Event) or the caller's hang-up ends it.

Failures: the pump also watches the pipeline and the call's helper tasks.  The first
stage, helper or provider connection that fails ends the call: it is logged once with its
traceback and the call's id, an ``EngineFailure`` (fatal) goes to the event stream, the
client is told (``TransportSession.close(failure=call_failure(exc))``: an ``error`` and
``stop{error}`` on the WebSocket, close 1011), the context is cut to what was heard, and ``run_call`` raises
:class:`CallFailed` carrying the report (``CallReport.failure``).  A failure the call
survives (a turn that failed and got the fallback line) is counted in
``CallReport.failures``.  A stage that ends because the transport ended first (the
caller hung up while it was sending) is the end of the call, not a failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from brisvox.agent.context import Context
from brisvox.agent.flows import Flow, FlowManager
from brisvox.agent.tools import CallMeta, FillerPolicy, ToolEngine, ToolRegistry
from brisvox.agent.turn import TurnMachine
from brisvox.agent.ui import UiChannel
from brisvox.agent.window import Summarizer
from brisvox.audio.resample import ResampleStream
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import (
    BrisvoxError,
    ChannelClosed,
    ConfigError,
    DeadlineExceeded,
    ProcessorFailed,
    StopTimeout,
)
from brisvox.core.frames import (
    BotAudioEnded,
    BotLineFrame,
    ContextNoteFrame,
    Direction,
    DtmfFrame,
    InputAudioFrame,
    OutputAudioFrame,
    UserTextFrame,
)
from brisvox.core.pipeline import Pipeline, RunningPipeline
from brisvox.core.tasks import TaskScope
from brisvox.core.timeline import TimelineRecorder, TurnRecord
from brisvox.engine.agent_input import AgentInput, BotLine, Note, OfferTools, Refusal, Transfer
from brisvox.engine.clips import FillerClipStore
from brisvox.engine.config import EngineConfig, SpeculationMode
from brisvox.engine.driver import TurnAnalyzer, TurnDriver
from brisvox.engine.events import CallerInput, CallerInputKind, CallEvents, CallObserver, EngineFailure
from brisvox.engine.flowrun import FlowRun
from brisvox.engine.hooks import HookPoint, hook_stage
from brisvox.engine.listen import ListenStage
from brisvox.engine.memory import CallMemory
from brisvox.engine.out import PlayoutFact, TransportOut
from brisvox.engine.phone import (
    Carrier,
    CarrierError,
    MarkWaits,
    PhoneLine,
    PhonePlan,
    PhoneStats,
    end_after_echo,
    mark_played,
)
from brisvox.engine.playout import PlayoutBook
from brisvox.engine.runner import LlmRunner
from brisvox.engine.speak import SpeakStage
from brisvox.inference.mel import SAMPLE_RATE as END_OF_TURN_RATE
from brisvox.inference.smart_turn import TurnAudio
from brisvox.inference.vad import VoiceActivityDetector
from brisvox.providers.errors import ProviderError
from brisvox.providers.llm import LlmProvider
from brisvox.providers.stt import SttProvider, SttSession
from brisvox.providers.summarizer import LlmSummarizer
from brisvox.providers.tts import TtsProvider, TtsSession
from brisvox.transport.events import (
    CallFailure,
    CallInfo,
    ContextNote,
    Dtmf,
    FailureKind,
    MarkCleared,
    MarkPlayed,
    Stopped,
    StopReason,
    TypedText,
)
from brisvox.transport.session import CommandSender, PlayoutReport, TransportSession

__all__ = ["CallFailed", "CallReport", "Providers", "call_failure", "call_meta", "run_call"]

log = logging.getLogger(__name__)


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
    failures: int = 0  # failures logged (with their traceback), the one that ended the call included
    failure: EngineFailure | None = None  # what ended the call, when it failed
    phone: PhoneStats | None = None  # the telephony tools' line (run_call's ``phone``)


class CallFailed(BrisvoxError):
    """The call ended because a stage, a helper or a provider failed (see the module docs).

    ``report`` is the call's report (``report.failure`` says what failed); ``__cause__``
    is the exception (already logged with its traceback).  ``crashed``: the cause is a bug
    (not a ``BrisvoxError``); the server counts the session as ``crashed``, not ``error``."""

    def __init__(self, report: CallReport, *, crashed: bool = False) -> None:
        failure = report.failure
        what = f" in {failure.stage} ({failure.error})" if failure is not None else ""
        super().__init__(f"the call failed{what}")
        self.report = report
        self.crashed = crashed


def call_failure(exc: BaseException) -> CallFailure:
    """What the caller is told when its call fails: a brisvox error (a provider unreachable or
    failing, a setting the call cannot run) is ``call_failed`` with its message (a provider's
    only as its name and kind: a vendor's text stays in the log); anything else is a bug,
    ``internal_error``.  A brisvox error caused by a provider's (the STT's ``HearingLost``) is
    told as the provider's."""
    provider = exc if isinstance(exc, ProviderError) else exc.__cause__
    if isinstance(provider, ProviderError) and isinstance(exc, BrisvoxError):
        return CallFailure(FailureKind.CALL_FAILED, f"{provider.provider}: {provider.kind.value}")
    if isinstance(exc, BrisvoxError):
        return CallFailure(FailureKind.CALL_FAILED, f"{type(exc).__name__}: {exc}"[:_MAX_FAILURE_TEXT])
    return CallFailure(FailureKind.INTERNAL_ERROR, "the server failed while serving this call")


_MAX_FAILURE_TEXT = 300


def call_meta(info: CallInfo, agent: str = "agent") -> CallMeta:
    """What the tools of a call are told about it: the transport's call info and the agent's name."""
    return CallMeta(call_id=info.call_id, transport=info.transport, agent=agent, parameters=info.metadata)


class _Fault:
    """The first failure that ends a call; later ones follow from it and are not logged again.
    Recording it sets ``end`` (the call's end: see ``_pump``)."""

    def __init__(self, events: CallEvents, clock: Clock, epoch: Callable[[], int], end: asyncio.Event) -> None:
        self.events, self._clock, self.epoch = events, clock, epoch  # the call's events, its current epoch
        self.failure: EngineFailure | None = None
        self.cause: BaseException | None = None
        self.end = end

    def record(self, stage: str, exc: BaseException) -> None:
        if isinstance(exc, ProcessorFailed):
            stage, exc = exc.stage, exc.cause
        if self.failure is not None or isinstance(exc, asyncio.CancelledError):
            return
        self.failure = self.events.failed(stage, exc, epoch=self.epoch(), at=self._clock.now(), fatal=True)
        self.cause = exc
        self.end.set()


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
    ui: UiChannel | None = None,
    phone: PhonePlan | None = None,
    agent: AgentInput | None = None,
) -> CallReport:
    """Run one call until the caller hangs up, the transport ends or ``cancel`` is set.

    ``filler`` replaces the filler policy built from ``config.llm.filler`` (phrases, clips).
    ``observer`` (optional) gets the call's events (:mod:`brisvox.engine.events`).
    ``clips`` (optional) are pre-rendered filler clips (:mod:`brisvox.engine.clips`): the
    filler policy takes them as its clip cache, and the speak stage plays them.
    ``summarizer`` makes the window's summaries (with ``config.summary.enabled``; default: an
    :class:`~brisvox.providers.summarizer.LlmSummarizer` over ``providers.llm``); a flow's
    ``ResetWithSummary`` uses it too.  ``flow`` (a :class:`~brisvox.agent.flows.Flow`, or a
    :class:`~brisvox.agent.flows.FlowManager` the application keeps, not yet started) runs the call as that flow;
    it needs ``tools`` (its tools are taken from them) and turns speculation off.
    ``ui``: the caller's screen, bound by a transport that has one (:mod:`brisvox.agent.ui`):
    tools dispatch UI actions through it; without it a dispatch raises ``UiUnavailable``.
    ``phone``: the call's carrier control, which the telephony tools act through (a
    :class:`~brisvox.engine.phone.PhoneLine` per call; without it they answer "no phone line").
    ``agent``: an agent process's commands into the call (see the module docs); closed when the call ends.

    Raises :class:`CallFailed` when a failure ended the call (see the module docs).
    """
    context = context if context is not None else Context()
    timeline = TimelineRecorder()
    events = CallEvents(session.info.call_id, observer, timeline)
    machine = TurnMachine(config.turn, config.interruption)
    if flow is not None and tools is None:
        raise ConfigError("run_call got a flow but no tools: pass the registry the flow was built with")
    if summarizer is None and config.summary.enabled:
        summarizer = LlmSummarizer(provider=providers.llm)
    flow_run = _flow_run(flow, clock, summarizer) if flow is not None else None
    if flow_run is not None and config.speculation is not SpeculationMode.OFF:
        log.info("speculation is off for this call: a flow decides each round's tools")
        config = dataclasses.replace(config, speculation=SpeculationMode.OFF)
    fault = _Fault(events, clock, lambda: machine.epoch, asyncio.Event())
    call = _Call(session, config, providers, clock, context, timeline, events, machine, fault)
    try:
        await call.run(cancel, tools, filler, clips, summarizer, flow_run, ui, phone, agent)
    except Exception as exc:  # a connect that failed, a helper failure the call's scope re-raises
        fault.record("run_call", exc)
    finally:
        if agent is not None:
            agent.close()  # what the call did not carry out is refused call_ended
    if call.runner is not None:
        try:
            call.runner.settle_all(clock.now())  # no stage runs any more: the record ends with what was heard
        except Exception as exc:  # a bug in settling must not keep the client from hearing the call end
            fault.record("llm-runner", exc)
    failure = fault.failure
    told = None if fault.cause is None else call_failure(fault.cause)
    reason = await session.close(config.timeouts.stop, failure=told)
    report = call.report(reason)
    if failure is not None:
        raise CallFailed(report, crashed=told is not None and told.kind is FailureKind.INTERNAL_ERROR) from fault.cause
    return report


class _Call:
    """One call's stages and their run (``run_call`` is the entry point)."""

    def __init__(self, session: TransportSession, config: EngineConfig, providers: Providers, clock: Clock,
                 context: Context, timeline: TimelineRecorder, events: CallEvents, machine: TurnMachine,
                 fault: _Fault) -> None:
        self.session, self.config, self.providers, self.clock = session, config, providers, clock
        self.context, self.timeline, self.events, self.machine, self.fault = (
            context, timeline, events, machine, fault)
        self.runner: LlmRunner | None = None
        self.driver: TurnDriver | None = None
        self.speak: SpeakStage | None = None
        self.out: TransportOut | None = None
        self.memory: CallMemory | None = None
        self.flow_run: FlowRun | None = None
        self.line: PhoneLine | None = None

    async def run(self, cancel: asyncio.Event | None, tools: ToolRegistry | None, filler: FillerPolicy | None,
                  clips: FillerClipStore | None, summarizer: Summarizer | None, flow_run: FlowRun | None,
                  ui: UiChannel | None, phone: PhonePlan | None, agent: AgentInput | None) -> None:
        session, config, providers, clock = self.session, self.config, self.providers, self.clock
        rates = session.info.sample_rate()
        in_rate = rates.input if rates else config.stt.sample_rate
        out_rate = output_rate(session, config)
        listen_rate = config.listen_rate or in_rate
        stt_rate = config.stt_rate or listen_rate
        stt_config = dataclasses.replace(config.stt, sample_rate=stt_rate)
        tts_config = dataclasses.replace(config.tts, sample_rate=out_rate)
        book = PlayoutBook()
        timeline, events = self.timeline, self.events
        if clips is not None:
            filler = (filler if filler is not None else FillerPolicy.from_config(config.llm.filler)).with_clips(clips)
        commands = session.commands()
        self.flow_run = flow_run

        def clear(epoch: int) -> None:
            # A transport that has ended plays nothing any more; the pump ends the call.
            with contextlib.suppress(ChannelClosed):
                commands.clear(epoch)

        async with TaskScope("call", on_failure=self.fault.record) as scope:
            stt: SttSession = await bounded(clock, config.timeouts.connect, providers.stt.connect(stt_config),
                                            "connecting speech-to-text")
            try:
                tts: TtsSession = await bounded(clock, config.timeouts.connect, providers.tts.connect(tts_config),
                                                "connecting text-to-speech")
            except BaseException:
                await stt.aclose()
                raise
            self.line = line = _phone_line(phone, commands, clock, out_rate)
            engine = None if tools is None else ToolEngine(tools, session.info.call_id, clock, config.tools,
                                                           meta=call_meta(session.info, config.agent), ui=ui,
                                                           line=line)
            async with stt, tts, contextlib.AsyncExitStack() as stack:
                if engine is not None:
                    await stack.enter_async_context(engine)
                analyzer = providers.end_of_turn if listen_rate == END_OF_TURN_RATE else None
                if providers.end_of_turn is not None and analyzer is None:
                    log.info("end-of-turn model skipped: the call is heard at %d Hz, the model reads 16 kHz",
                             listen_rate)
                turn_audio = TurnAudio() if analyzer is not None else None
                convert = ResampleStream(in_rate, listen_rate) if listen_rate != in_rate else None
                resample = ResampleStream(listen_rate, stt_rate) if stt_rate != listen_rate else None
                listen = ListenStage(providers.vad(listen_rate), stt, scope, turn_audio, resample, convert)
                self.driver = driver = TurnDriver(self.machine, clear, scope, analyzer, turn_audio, timeline,
                                                  greets=config.llm.greeting is not None, events=events, agent=agent)
                self.memory = memory = CallMemory(config.window, summarizer if config.summary.enabled else None,
                                                  config.summary, clock, scope)
                marks = MarkWaits()

                def end_call() -> None:
                    # A flow's EndCall, the end_call tool, an agent's farewell: once the farewell's mark
                    # echoes, fault.end ends the call like a failure or a hang-up (one way out of the pump).
                    farewell = self.runner is not None and self.runner.ending_farewell
                    scope.spawn(self._end(commands, marks, line, agent if farewell else None), name="end-call")

                self.runner = runner = LlmRunner(
                    providers.llm, self.context, book, config.llm, config.timeouts, scope, timeline, engine,
                    memory, filler, config.speculation, flow_run, end_call, events=events, line=line, agent=agent,
                )
                self.speak = speak = SpeakStage(
                    tts,
                    book,
                    config.segmenter,
                    scope,
                    timeline,
                    reconnect=lambda: bounded(clock, config.timeouts.connect, providers.tts.connect(tts_config),
                                              "connecting text-to-speech"),
                    clips=clips,
                    clip_rate=out_rate,
                    events=events,
                )
                self.out = out = TransportOut(commands, book, timeline, events)
                if line is not None:
                    line.before_transfer = _played_before_transfer(out, commands, marks, clock)
                pipeline = Pipeline("call")
                hooks = {point: [hook_stage(h) for h in config.hooks if h.point is point] for point in HookPoint}
                for stage in (listen, *hooks[HookPoint.AFTER_LISTENING], driver, *hooks[HookPoint.BEFORE_LLM],
                              runner, *hooks[HookPoint.BEFORE_SPEAKING], speak, out):
                    pipeline.then(stage)
                running = pipeline.start(clock)

                async def tell(fact: PlayoutFact) -> None:
                    # The playout facts go to the two stages that act on them, not through
                    # the stages in between: the driver's inbox (the turn machine), the runner
                    # at once (a flow's EndCall).
                    if isinstance(fact, BotAudioEnded):
                        runner.response_played(fact.epoch)
                    await running.send_to(driver, fact, Direction.UPSTREAM)

                out.report_to(tell)
                if agent is not None:
                    scope.spawn(_agent_commands(agent, running, driver, engine, line, scope), name="agent-input")
                session.route_caller_audio(_audio_into(running, listen.hear_now))
                session.route_playout(_positions_into(out, clock, self.fault))
                try:
                    await _pump(session, running, cancel, self.fault, marks)
                    runner.hang_up()  # no side effect starts once the caller is gone
                    if self.fault.failure is None:
                        await self._stop(running)
                finally:
                    session.route_caller_audio(None)
                    session.route_playout(None)
                    # Helpers first: a reader still pushing into a closed inbox would fail the call.
                    scope.cancel()
                    await running.aclose()
                    driver.refuse_lines()  # lines still held: the call ended without saying them
                    await speak.aclose()
                    await runner.finish(clock)  # before the engine closes: running side effects get their time

    async def _end(self, commands: CommandSender, marks: MarkWaits, line: PhoneLine | None,
                   agent: AgentInput | None) -> None:
        """``end_after_echo``; ``agent``: the end is its farewell, told when the caller called it off."""
        if not await end_after_echo(commands, marks, self.clock, line, self.fault.end) and agent is not None:
            agent.refuse("end", Refusal.CALLED_OFF, "the caller spoke over the farewell; the call goes on")

    async def _stop(self, running: RunningPipeline) -> None:
        """The graceful stop: every stage drains what it holds (the runner settles the context)."""
        try:
            await running.stop(self.config.timeouts.stop)
        except ProcessorFailed as exc:
            if not _ended_with_transport(exc, self.session):
                self.fault.record(exc.stage, exc.cause)
        except StopTimeout as exc:
            self.fault.record("pipeline", exc)
        except ChannelClosed as exc:
            # The stop found the pipeline already ended: a stage found the transport gone
            # (the caller hung up while the bot spoke), which ends the call, not a failure.
            failure = running.failure
            if not (isinstance(failure, ProcessorFailed) and _ended_with_transport(failure, self.session)):
                self.fault.record("pipeline", exc)

    def report(self, reason: StopReason | None) -> CallReport:
        runner, driver, speak, out, memory, flow_run = (
            self.runner, self.driver, self.speak, self.out, self.memory, self.flow_run)
        return CallReport(
            stop_reason=reason,
            context=self.context,
            turns=runner.stats.turns if runner else 0,
            interrupts=driver.interrupts if driver else 0,
            fallbacks=runner.stats.fallbacks if runner else 0,
            stale_audio_dropped=out.stale_audio_dropped if out else 0,
            timeline=tuple(self.timeline.records()),
            fillers=runner.stats.fillers if runner else 0,
            fillers_in_context=runner.stats.fillers_in_context if runner else 0,
            speculations=runner.stats.speculations if runner else 0,
            speculations_committed=runner.stats.speculations_committed if runner else 0,
            clips_played=speak.clips_played if speak else 0,
            clips_dropped=speak.clips_dropped if speak else 0,
            clip_fallbacks=speak.clip_fallbacks if speak else 0,
            summaries=memory.stats.summaries if memory else 0,
            summary_failures=memory.stats.summary_failures if memory else 0,
            uncovered_requests=memory.stats.uncovered_requests if memory else 0,
            flow_transitions=flow_run.transitions if flow_run else 0,
            flow_refused_calls=flow_run.refused if flow_run else 0,
            failures=self.events.failures,
            failure=self.fault.failure,
            phone=self.line.stats if self.line is not None else None,
        )


async def _agent_commands(agent: AgentInput, running: RunningPipeline, driver: TurnDriver,
                          engine: ToolEngine | None, line: PhoneLine | None, scope: TaskScope) -> None:
    """Carry out the agent's commands, in order, until the call ends (see the module docs)."""
    async for command in agent.commands:
        try:
            match command:
                case BotLine(text=text, interrupt=interrupt, farewell=farewell):
                    if farewell and line is None:
                        agent.refuse(command, Refusal.NO_CARRIER, "this call has no phone line to end it through")
                        continue
                    line_frame = BotLineFrame(epoch=0, text=text, interrupt=interrupt, farewell=farewell)
                    await running.send_to(driver, line_frame, Direction.DOWNSTREAM)
                case Note(text=text):
                    await running.send(ContextNoteFrame(epoch=0, text=text))  # as the caller screen's notes
                case OfferTools(names=names):
                    unknown = engine.offer(names) if engine is not None else list(names)
                    if unknown:
                        agent.refuse(command, Refusal.UNKNOWN_TOOL, f"this call has no tool named {', '.join(unknown)}")
                case Transfer():
                    if line is None or line.carrier is Carrier.NONE:
                        agent.refuse(command, Refusal.NO_CARRIER, "this call has no phone carrier to transfer it")
                    else:
                        scope.spawn(_transfer(agent, line, command), name="agent-transfer")
        except ChannelClosed:  # the pipeline has ended: the call is ending
            agent.refuse(command, Refusal.CALL_ENDED, "the call ended before the command was carried out")
            return


async def _transfer(agent: AgentInput, line: PhoneLine, command: Transfer) -> None:
    try:
        await line.transfer(command.to)
    except CarrierError as exc:  # a carrier failure is logged by the line with its traceback
        agent.refuse(command, Refusal.CARRIER_FAILED, str(exc))


def _ended_with_transport(exc: ProcessorFailed, session: TransportSession) -> bool:
    """A stage that found the transport gone (the caller hung up while it sent) ended with the call."""
    return isinstance(exc.cause, ChannelClosed) and session.stop_reason() is not None


def _phone_line(phone: PhonePlan | None, commands: CommandSender, clock: Clock, out_rate: int) -> PhoneLine | None:
    """The call's phone line; its in-band audio (DTMF) goes to the transport in the tool's turn."""
    if phone is None:
        return None

    async def play(epoch: int, pcm: bytes) -> None:
        commands.clear(epoch)  # opens the turn's audio when nothing of it was sent yet (a no-op otherwise)
        await commands.audio(OutputAudioFrame(epoch=epoch, pcm=pcm, sample_rate=out_rate))

    return PhoneLine(phone.control, clock, out_rate=out_rate, play=play, timeout=phone.timeout,
                     transfer_to=phone.transfer_to, on_failure=phone.on_failure)


SPEECH_WAIT = 60.0
"""Seconds a transfer waits for its turn's words before it to reach the transport (the TTS
makes them no faster than the pacer takes them) before it goes ahead, logged."""


def _played_before_transfer(out: TransportOut, commands: CommandSender, marks: MarkWaits,
                            clock: Clock) -> Callable[[int], Awaitable[bool]]:
    """``PhoneLine.before_transfer``: the turn's speech so far all with the transport, then a mark
    behind it echoed (the words before the transfer played); False once a barge-in cut them."""

    async def played(epoch: int) -> bool:
        try:
            sent = await bounded(clock, SPEECH_WAIT, out.speech_sent(epoch), "the words before a transfer")
        except DeadlineExceeded:
            log.warning("the words before a transfer took over %g s to reach the transport; going ahead",
                        SPEECH_WAIT)
            sent = True
        if not sent or commands.epoch > epoch:
            return False  # a barge-in cut the words (the transport may hear of it before TransportOut)
        return await mark_played(commands, marks, clock, "the words before a transfer") is True

    return played


def _flow_run(flow: Flow | FlowManager, clock: Clock, summarizer: Summarizer | None) -> FlowRun:
    manager = flow if isinstance(flow, FlowManager) else FlowManager(flow, clock)
    return FlowRun(manager, summarizer)


def output_rate(session: TransportSession, config: EngineConfig) -> int:
    """The rate the call's bot audio is made at: the transport's, else the TTS config's."""
    rates = session.info.sample_rate()
    return rates.output if rates else config.tts.sample_rate


async def _pump(session: TransportSession, running: RunningPipeline, cancel: asyncio.Event | None,
                fault: _Fault, marks: MarkWaits) -> None:
    """Transport events into the pipeline until ``fault.end`` is set: by a failure (recorded in
    ``fault``), the engine's own end of the call (a flow's EndCall or ``end_call``, once the
    farewell's mark echoed: ``end_after_echo``), the end of the pipeline or of the events
    (``Stopped``), or ``cancel``.  The echoes of the engine's marks resolve ``marks``.

    One concern, one task: the events are read by one task; the pipeline's end is watched
    by a callback, the failure and the EndCall set ``end`` themselves, so only ``cancel`` (an
    Event the caller owns) takes a task of its own."""
    end = fault.end

    def pipeline_ended() -> None:
        exc = running.failure
        if not end.is_set() and isinstance(exc, ProcessorFailed) and not _ended_with_transport(exc, session):
            fault.record(exc.stage, exc.cause)  # a stop after the pump is judged by _Call._stop
        end.set()

    running.on_end(pipeline_ended)
    async with TaskScope("pump") as scope:
        events = scope.spawn(_pump_events(session, running, marks, fault), name="events")
        events.add_done_callback(lambda _: end.set())
        if cancel is not None:
            scope.spawn(_set_after(cancel, end), name="cancel-watch")
        await end.wait()
        scope.cancel()


async def _set_after(cause: asyncio.Event, end: asyncio.Event) -> None:
    await cause.wait()
    end.set()


def _audio_into(running: RunningPipeline,
                hear_now: Callable[[InputAudioFrame], bool] | None = None) -> Callable[[InputAudioFrame], None]:
    """The session's caller-audio sink: straight into the pipeline's head (listen drops the
    oldest audio), in the session's input task, so the frame skips the events channel and
    the pump (one wake-up less per 20 ms frame); with ``hear_now`` (the listen stage's) heard
    in that task when the stage's task waits with nothing queued (one more wake-up less)."""

    def sink(frame: InputAudioFrame) -> None:
        try:
            if hear_now is None or not hear_now(frame):
                running.try_send(frame)
        except ChannelClosed:
            # The pipeline has ended (the pump sees why and ends the call): this frame has
            # nobody to hear it.
            return

    return sink


def _positions_into(out: TransportOut, clock: Clock, fault: _Fault) -> Callable[[PlayoutReport], Awaitable[None]]:
    """The session's playout sink: each position report (and each lead a clear flushed) straight
    to TransportOut, the owner of the playout facts, in the session's output task (no events
    channel, no pump, no inbox)."""

    async def sink(report: PlayoutReport) -> None:
        try:
            await out.released(report, clock.now())
        except ChannelClosed:
            return  # the driver has ended: the pipeline is ending, and the pump sees why
        except Exception as exc:  # a bug in keeping the record ends the call, logged once, like a stage's
            fault.record(out.name, exc)

    return sink


async def _pump_events(session: TransportSession, running: RunningPipeline, marks: MarkWaits,
                       fault: _Fault) -> None:
    # Every transport event but caller audio (see _audio_into) and position reports (see
    # _positions_into).  A ChannelClosed ends the pump: the transport or the pipeline (which
    # may stop while an event is on its way in) is gone; the pipeline's own end is watched
    # by _pump, which records a failure.  Keys, typed text and the screen's notes are events
    # here, where they enter the call (a recording replays them from these).
    with contextlib.suppress(ChannelClosed):
        while running.running:
            event = await session.recv()
            if isinstance(event, Dtmf):
                fault.events.emit(CallerInput(epoch=fault.epoch(), at=event.at, kind=CallerInputKind.KEY,
                                              text=event.digit))
                await running.send(DtmfFrame(epoch=0, digit=event.digit))  # never dropped
            elif isinstance(event, MarkPlayed | MarkCleared):
                marks.resolve(event)  # the engine's own marks (end_after_echo); no other mark is the engine's
            elif isinstance(event, TypedText):
                fault.events.emit(CallerInput(epoch=fault.epoch(), at=event.at, kind=CallerInputKind.TEXT,
                                              text=event.text, reply=event.reply))
                await running.send(UserTextFrame(epoch=0, text=event.text, reply=event.reply))  # a turn (the driver)
            elif isinstance(event, ContextNote):
                fault.events.emit(CallerInput(epoch=fault.epoch(), at=event.at, kind=CallerInputKind.NOTE,
                                              text=event.text))
                await running.send(ContextNoteFrame(epoch=0, text=event.text))  # no turn: the LLM stage keeps it
            elif isinstance(event, Stopped):
                return
