"""``brisvox replay FILE``: a recorded call (:mod:`brisvox.recording`) run again on virtual time.

:func:`replay_recording` runs the recorded call through ``run_call`` on a loopback
transport with the agent's settings (its turn policy, or a fixed ``silence`` for a what-if),
the recorded providers and tools (:mod:`brisvox.recording.replay`), and the same kind of
VAD (and Smart Turn) the recorded call had.  The caller's audio records are sent at their
recorded times, so the current VAD and turn machine decide the turns again, and so are the
caller's typed text, keys and screen notes (``CallerInput`` events); the caller hangs up when the
recorded call stopped hearing (its ``stop`` record).  The agent's flow runs again (its
transitions follow the recorded tool results); window summaries are made when the call made
them, from their recorded responses.  A speech-to-speech call (``pipeline: s2s``) runs
``run_s2s_call`` with the recorded model (:class:`~brisvox.recording.replay.ReplayS2s`)
against the agent's ``[s2s]`` policy: the model's events are played back, our side (turns
from its events or our VAD, tools, guards, playout, what was sent to the model) runs again.
It must run on a :class:`~brisvox.core.clock.VirtualTimeLoop`.

:func:`run_replay` is the command: it prints the recorded events and the replay's side by
side (``!`` marks a row that differs) and exits 0 when they match, 1 when they differ, 2
when the recording or the agent cannot be read.  The agent is the file named in the
recording (``--agent`` names another); its tools' specs come from the program's tools, as
for ``serve`` (the demo agent's own for the demo agent), their results from the recording.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import logging
import sys
from collections import defaultdict
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TextIO

from brisvox.agent.tools import FillerPolicy, Tool, ToolKind, ToolRegistry, ToolSpec
from brisvox.agent.turn import FixedSilence
from brisvox.core.clock import Clock, SystemClock, run_virtual
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.frames import ReplyMode
from brisvox.core.tasks import TaskScope
from brisvox.engine import CallFailed, CallObserver, CallReport, Providers, run_call
from brisvox.engine import events as ev
from brisvox.engine.agent_input import AgentInput, Refusal
from brisvox.engine.s2s import run_s2s_call
from brisvox.inference.vad import energy_vad
from brisvox.providers.s2s import BargeIn
from brisvox.providers.summarizer import LlmSummarizer
from brisvox.recording.format import SUMMARY, Recording, RecordingError, event_record, tool_record
from brisvox.recording.io import load_recording
from brisvox.recording.replay import (
    ReplayLlm,
    ReplayS2s,
    ReplayStt,
    ReplayTts,
    agent_command,
    judge,
    recorded_tool,
    render,
)
from brisvox.server.agent import Agent
from brisvox.server.agent_brain import brain_config
from brisvox.server.agent_file import AgentDefinition, AgentFileError, load_agent_file
from brisvox.server.call import agent_flow, engine_config, flow_manager, phone_plan
from brisvox.server.call_providers import close_all
from brisvox.server.tools import ToolSet
from brisvox.transport import LoopbackTransport, TransportSession
from brisvox.transport.events import WireMark

__all__ = ["EXIT_DIFFERS", "EXIT_UNREADABLE", "offered_tools", "replay_agent", "replay_recording",
           "replay_tools", "run_replay"]

log = logging.getLogger(__name__)

EXIT_DIFFERS = 1
EXIT_UNREADABLE = 2


def _results(recording: Recording) -> dict[str, list[dict[str, Any]]]:
    """The recording's ``tool`` records by tool name, in order."""
    results: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in recording.of("tool"):
        results[r["name"]].append(r)
    return results


def replay_tools(tools: ToolSet, recording: Recording) -> ToolSet:
    """``tools`` with each function replaced by the recording's results for it, in order."""
    results = _results(recording)
    out = ToolSet()
    for name in tools.offered():  # the built-in telephony tools too: the recording has their results
        spec = tools.spec(name)
        if spec is not None:
            out.add(spec, recorded_tool(name, results[name]))
    return out


def _remote_records(recording: Recording) -> list[dict[str, Any]]:
    """The header's records of the tools the call's agent link served."""
    return [t for t in recording.header.tools or () if t.get("agent_link") is True]


def _remote_tools(recording: Recording) -> list[tuple[ToolSpec, Tool]]:
    """The tools the recorded call's agent link served, as recorded (the replay has no link),
    each answering with the recording's results for it, in order."""
    results = _results(recording)
    return [(ToolSpec(name=t["name"], description=t["description"], parameters=t["parameters"],
                      kind=ToolKind(t["kind"]), timeout=float(t["timeout"]), repeatable=t["repeatable"]),
             recorded_tool(t["name"], results[t["name"]])) for t in _remote_records(recording)]


async def replay_recording(recording: Recording, definition: AgentDefinition, tools: ToolSet, clock: Clock, *,
                           silence: float | None = None,
                           vad: Callable[[int], Any] | None = None) -> list[dict[str, Any]]:
    """Run the recorded call again (see the module docs); returns the new ``event`` records
    (and, for a speech-to-speech call, the ``s2s_in`` records of what was sent to the model).

    ``silence``: end turns after this many seconds of silence (a fixed-silence turn policy)
    in place of the agent's own policy (a cascaded call).  ``vad``: the detector factory
    (default: the energy detector when the call used it, else the one ``brisvox serve`` uses).
    """
    s2s = recording.header.pipeline == "s2s"
    if s2s != (definition.s2s is not None):
        raise ConfigError(f"the recording is of a {'speech-to-speech' if s2s else 'cascaded'} call and the agent "
                          f"{definition.name!r} is {'cascaded' if s2s else 'a speech-to-speech one'}: replay it "
                          "with the agent that made it (--agent)")
    if s2s and silence is not None:
        raise ConfigError("--silence applies to a cascaded call: a speech-to-speech model decided this call's turns")
    closers: list[Callable[[], Any]] = []
    ours = not s2s or definition.s2s_policy.barge_in is BargeIn.OURS  # else the model hears the caller's speech
    if vad is None and ours and recording.header.vad == "energy":
        vad = energy_vad
    if vad is None and ours:
        from brisvox.server.call_providers import vad_factory

        vad, _label, pool = vad_factory(definition.vad)  # the agent file's [vad], as the server runs it
        if pool is not None:
            closers.append(pool.aclose)
    events: list[dict[str, Any]] = []
    start = clock.now()

    def listen(event: ev.EngineEvent) -> None:
        events.append(event_record(event, round(event.at - start, 6)))

    registry_tools = replay_tools(tools, recording)
    observer = CallObserver(listener=listen)
    try:
        if s2s:
            model = ReplayS2s(clock, recording, start, events.append)
            call = _s2s_call(recording, definition, registry_tools, clock, model, observer, vad)
        else:
            assert vad is not None
            call = _cascaded_call(recording, definition, registry_tools, clock, start, observer, silence, vad, closers)
        async with LoopbackTransport(clock) as transport, TaskScope("replay") as scope:
            client = await transport.connect(metadata={"sample_rate": str(recording.header.input_rate)})
            session = await TransportSession.open(clock, await transport.accept())
            running = scope.spawn(call(session), name="replay-call")
            scope.spawn(_drain(client), name="replay-listener")
            await _speak(client, recording, clock, start)
            try:
                await running
            except CallFailed:
                log.info("the replayed call failed (its EngineFailure is in the events)")
    finally:
        await close_all(closers)
    return events


RunOn = Callable[[TransportSession], Coroutine[Any, Any, CallReport]]


def _cascaded_call(recording: Recording, definition: AgentDefinition, tools: ToolSet, clock: Clock, start: float,
                   observer: CallObserver, silence: float | None, vad: Callable[[int], Any],
                   closers: list[Callable[[], Any]]) -> RunOn:
    """``run_call`` with the recorded providers, the agent's flow and the summaries the call made."""
    config = engine_config(definition)
    if silence is not None:
        config = dataclasses.replace(config, turn=FixedSilence(silence=silence))
    config = dataclasses.replace(config, summary=dataclasses.replace(config.summary, enabled=recording.header.summaries))
    summarizer = (LlmSummarizer(provider=ReplayLlm(clock, recording, use=SUMMARY))
                  if recording.header.summaries else None)
    end_of_turn = None
    if recording.header.smart_turn:
        from brisvox.server.call_providers import end_of_turn_factory

        turn = end_of_turn_factory()
        if turn is None:
            log.warning("the call used Smart Turn, which is unavailable here: its turns may end differently")
        else:
            end_of_turn, close_turn = turn
            closers.append(close_turn)
    flow = agent_flow(definition, tools)
    registry = tools.registry(definition.tools, definition.confirm_tools) if definition.tools or flow else None
    remote = _remote_tools(recording)
    if remote:  # next to the agent's own, as AgentLink.tools_into registered them in the call
        registry = registry if registry is not None else ToolRegistry()
        for spec, tool in remote:
            registry.register(spec, tool)
    providers = Providers(stt=ReplayStt(clock, recording, start), llm=ReplayLlm(clock, recording),
                          tts=ReplayTts(clock, recording), vad=vad, end_of_turn=end_of_turn)
    if recording.header.brain:  # the call's model was its agent: configured as brain_call did
        config = brain_config(config)
    linked = recording.header.agent_link is not None
    agent = AgentInput(_refused) if linked else None
    if agent is not None:  # it ends the call as the link's end did: once the bot is silent
        observer.add_listener(agent.listen)

    async def run(session: TransportSession) -> CallReport:
        async with TaskScope("replay-agent") as scope:
            if agent is not None:
                scope.spawn(_agent_commands(agent, recording, clock, start), name="agent-commands")
            try:
                return await run_call(session, config, providers, clock, tools=registry,
                                      filler=FillerPolicy.from_config(config.llm.filler), observer=observer,
                                      summarizer=summarizer, flow=flow_manager(definition, flow, clock),
                                      phone=phone_plan(definition, {}, {}, None, linked=True) if linked else None,
                                      agent=agent, cancel=agent.ended if agent is not None else None)
            finally:
                scope.cancel()

    return run


def _refused(command: str, why: Refusal, message: str) -> None:
    log.info("the replayed agent's %s was not carried out: %s (%s)", command, why.value, message)


async def _agent_commands(agent: AgentInput, recording: Recording, clock: Clock, start: float) -> None:
    """The linked agent's recorded commands, each put into the call at its recorded time (no link)."""
    for r in recording.of("agent"):
        await clock.sleep_until(start + r["t"])
        agent.put(agent_command(r))


def _s2s_call(recording: Recording, definition: AgentDefinition, tools: ToolSet, clock: Clock, model: ReplayS2s,
              observer: CallObserver, vad: Callable[[int], Any] | None) -> RunOn:
    """``run_s2s_call`` with the recorded model, at the rates the model had (no resampling)."""
    from brisvox.server.s2s_call import s2s_config

    config = s2s_config(definition, (recording.header.input_rate, recording.header.output_rate))
    registry = tools.registry(definition.tools, definition.confirm_tools) if definition.tools else None
    detector = vad(recording.header.input_rate) if vad is not None and config.barge_in is BargeIn.OURS else None

    async def run(session: TransportSession) -> CallReport:
        return await run_s2s_call(session, config, model, clock, tools=registry, observer=observer, vad=detector)

    return run


async def _drain(client: Any) -> None:
    """The caller's ear: takes what the call plays and echoes each mark, as a phone does once the
    audio before it played (a flow's EndCall ends the call on its farewell's echo)."""
    with contextlib.suppress(ChannelClosed):  # the call ended
        while True:
            heard = await client.recv()
            if isinstance(heard.item, WireMark):
                await client.echo_mark(heard.item.id)


async def _speak(client: Any, recording: Recording, clock: Clock, start: float) -> None:
    """The caller's recorded audio, typed text, keys and screen notes at their times, then the hang-up."""
    rate = recording.header.input_rate
    last = 0.0
    with contextlib.suppress(ChannelClosed):  # the call ended first
        for r in recording.records:
            if r["k"] == "audio":
                await clock.sleep_until(start + r["t"])
                pcm = base64.b64decode(r["pcm"])
                await client.send_audio(pcm, rate)
                last = r["t"] + len(pcm) / (2 * rate)
            elif r["k"] == "event" and r["e"] == "CallerInput":
                await clock.sleep_until(start + r["t"])
                kind = r.get("kind")
                if kind == ev.CallerInputKind.KEY.value:
                    await client.send_dtmf(str(r.get("text")))
                elif kind == ev.CallerInputKind.NOTE.value:
                    await client.send_note(str(r.get("text")))
                else:  # typed text, answered as it asked (a recording made before it said: spoken)
                    await client.send_text(str(r.get("text")), ReplyMode(r.get("reply") or ReplyMode.SPOKEN.value))
        stops = recording.of("stop")
        await clock.sleep_until(start + (stops[0]["t"] if stops else last))
        await client.hangup()


def offered_tools(definition: AgentDefinition, tools: ToolSet,
                  recording: Recording | None = None) -> list[dict[str, Any]]:
    """The tools a replay of ``definition`` offers, as a recording's header keeps them: the
    agent's own, then (with ``recording``) the ones its agent link served, as recorded."""
    own = ([tool_record(spec) for spec in tools.registry(definition.tools, definition.confirm_tools).specs()]
           if definition.tools else [])
    return own + (_remote_records(recording) if recording is not None else [])



def replay_agent(recording: Recording, given: Path | None, tools: ToolSet,
                 program: Agent | None = None) -> tuple[AgentDefinition, ToolSet]:
    """The agent to replay and its tools: the file ``given``, else the one the recording names,
    else the program's own agent (``brisvox.run(agent)``)."""
    path = given if given is not None else recording.header.agent_file
    if path is None and program is not None:
        return program.definition(), program.toolset()
    if path is None:
        raise ConfigError("the recording names no agent file (a Python agent's call): pass --agent")
    offered = _offered(Path(path), tools)
    return load_agent_file(path, available_tools=offered), offered


def _offered(path: Path, tools: ToolSet) -> ToolSet:
    """The program's tools; the demo agent's own when it is the demo agent (``serve`` with no file)."""
    from brisvox.server.demo import demo_tools, is_demo_agent_file

    return demo_tools() if is_demo_agent_file(path) and not len(tools) else tools


def run_replay(args: argparse.Namespace, tools: ToolSet, agent: Agent | None = None, out: TextIO | None = None) -> int:
    """``brisvox replay`` (see the module docs); ``agent``: the program's own (``brisvox.run``);
    prints to ``out`` (stdout)."""
    out = out if out is not None else sys.stdout
    try:
        recording = load_recording(args.recording)
        if args.silence is not None and not 0 <= args.silence <= 10:
            raise ConfigError(f"--silence: expected seconds from 0 to 10, got {args.silence}")
        definition, offered = replay_agent(recording, args.agent, tools, agent)
    except AgentFileError as exc:
        print("brisvox replay: the agent file has problems:", *map(str, exc.problems), sep="\n", file=sys.stderr)
        return EXIT_UNREADABLE
    except (ConfigError, RecordingError) as exc:
        print(f"brisvox replay: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    try:
        replayed = run_virtual(lambda: replay_recording(recording, definition, offered, SystemClock(),
                                                        silence=args.silence))
    except ConfigError as exc:  # the recording and the agent do not go together
        print(f"brisvox replay: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    judgement = judge(recording, replayed, args.tolerance, offered_tools(definition, offered, recording))
    rows, differences, tolerance = judgement.rows, judgement.differences, judgement.tolerance
    print(render(rows), file=out)
    if recording.dropped:
        print(f"note: the recording lost {recording.dropped} records when it was made", file=out)
    if differences:
        print(f"{len(differences)} difference(s) (tolerance {tolerance * 1000:.0f} ms)", file=out)
        return EXIT_DIFFERS
    print(f"the replay matches ({len(rows)} events, tolerance {tolerance * 1000:.0f} ms)", file=out)
    return 0
