"""Keyless tests for your agents, on virtual time: ``brisvox.testing``.

::

    from brisvox.testing import AgentTest, call, virtual_time

    @virtual_time
    async def test_booking() -> None:
        llm = [[call("book_table", day="fri", party_size=2)], "Booked for two on Friday."]
        async with AgentTest(agent, llm=llm) as test:
            turn = await test.user_says("a table for two on friday")
            turn.expect.tool_call("book_table", party_size=2)
            turn.expect.said(contains="Booked")
        assert test.tool_runs("book_table") == 1

The agent runs in the real engine (turn taking, the tool engine with its idempotency and
confirmation rules, fillers, barge-in) over an in-memory call.  Text mode: the caller
types (``user_says``; typing while the agent speaks interrupts it, like speech would),
and the agent's speech is the mock voice (audio of the right length, no model).  The LLM
is ``llm``: a list of responses, each a string (said), a :func:`call` or a list of both
(a response with tool calls; the engine then asks again and takes the next response), or
any LLM provider object; without it, the agent's own LLM runs (its key from the
environment).  Everything waits on the call's clock: under :func:`virtual_time` (or any
:class:`~brisvox.core.clock.VirtualTimeLoop`) a turn costs milliseconds of real time and
every run is identical.

Audio mode (``audio=True``): the caller speaks.  ``user_says(text)`` sends speech-like
audio (a tone burst per word) on the caller's open line, which sends 20 ms of audio per
20 ms of call time, silence between turns; it goes through the energy VAD, the turn
machine's end of turn and a mock STT that hears ``text`` in those seconds of audio.
``user_says(text, audio=path)`` sends a WAV instead (its words placed over its audible
part).  With ``stt=`` (any speech-to-text provider, e.g. the local Whisper) the audio goes
to that STT and the turn is what it heard (``Turn.heard``); ``audio=`` is then required.
With ``tts=`` the agent speaks with that TTS (the local voice, say) instead of the mock one.

The tools' context (``brisvox.ToolContext``) describes the call: ``meta.transport`` is
``loopback``, ``meta.parameters`` the ``parameters`` given (what a transport would pass
from the caller), ``meta.agent`` the agent's name.  With ``screen=True`` the call has a
screen: UI actions the tools dispatch are recorded (``AgentTest.ui_actions``,
``Turn.ui_actions``; a callable is also handed each one), and so are the server messages they
send (``ctx.send_server_message``: ``AgentTest.server_messages``, ``Turn.server_messages``, checked
as JSON as a real screen checks them); without it a dispatch or a server message fails as it
does on a phone call.  An agent with a flow runs it: ``AgentTest.node`` is the current
node, ``AgentTest.offered`` the tools it offers the model, ``Turn.nodes`` the nodes a turn
entered.  The test caller echoes each mark as it hears it, as a phone does once the audio
before it played, so a node that ends the call ends it as soon as its farewell has played.
The telephony tools have no phone line here (``end_call`` answers "no phone line").
A recorded call (``[record]`` in the agent file, docs/OBSERVABILITY.md) is a test case::

    def test_the_call_that_went_wrong() -> None:
        Replay.from_file("tests/calls/bad-turn.jsonl.gz", agent=agent).expect_same()

:class:`Replay` re-runs it on virtual time with the recorded providers and tools and holds
the differences from the recorded events (``differences``; ``table`` shows both streams).

``Turn.expect`` asserts what happened in a turn (``tool_call``, ``no_tool_call``,
``said``, ``entered``, ``ui_action``), raising ``AssertionError`` with what happened
instead.  ``AgentTest.context`` is the conversation the call recorded (after the
``async with`` block), and ``AgentTest.tool_runs(name)`` how many times a tool's function
actually ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from pydantic import BaseModel

from brisvox.agent.context import Context
from brisvox.agent.flows import FlowManager
from brisvox.agent.tools import FillerPolicy, Tool, ToolCallContext, ToolError
from brisvox.audio import WavAudio, read_wav
from brisvox.audio.pcm import AUDIBLE_LEVEL, pcm16_to_array
from brisvox.audio.resample import resample
from brisvox.core.clock import Clock, SimClock, SystemClock, VirtualTimeLoop
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.frames import WordTiming
from brisvox.core.tasks import TaskScope
from brisvox.engine import CallObserver, CallReport, Providers, run_call
from brisvox.engine import events as ev
from brisvox.inference.energy import EnergyScorer
from brisvox.inference.vad import VadParams, VoiceActivityDetector
from brisvox.providers.llm import LlmProvider
from brisvox.providers.stt import SttProvider
from brisvox.providers.summarizer import LlmSummarizer
from brisvox.providers.tts import TtsProvider
from brisvox.recording.replay import Difference
from brisvox.server.agent import Agent
from brisvox.server.call import agent_flow, engine_config, flow_manager
from brisvox.server.tools import ToolSet
from brisvox.sim import MockStt, MockTts, MockTtsConfig
from brisvox.sim.mock_llm import Call, Say, ScriptedLlm
from brisvox.sim.scenario import ScenarioBuilder, SpokenUtterance
from brisvox.transport import LoopbackTransport, TransportSession
from brisvox.transport.events import WireMark
from brisvox.transport.rtvi.ui import server_message_data

__all__ = ["AgentTest", "Replay", "Turn", "TurnExpect", "call", "virtual_time"]

_RATE = 16000
_FAST_VOICE = MockTtsConfig(chars_per_second=400.0, chunk_seconds=0.04)
_SETTLE = 0.2  # seconds of quiet after the reply's last audio before a turn counts as over
_SUMMARY = "The caller and the agent talked earlier."
_TURN_LIMIT = 120.0  # seconds (call time) a turn may take before the test fails
_FRAME = 0.02  # seconds of caller audio per frame on the open line (audio mode)


def call(name: str, /, **arguments: Any) -> Call:
    """A tool call in a scripted response."""
    return Call(name=name, arguments=arguments)


Response = str | Call | Sequence[str | Call]


def virtual_time(test: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    """Run an ``async def`` test on a virtual-time loop (timers fast-forward; no wall time passes)."""

    @functools.wraps(test)
    def run(*args: Any, **kwargs: Any) -> None:
        loop = VirtualTimeLoop(max_time=86_400.0)
        try:
            loop.run_until_complete(test(*args, **kwargs))
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    return run


@dataclass(frozen=True, slots=True)
class ToolCallSeen:
    """A tool call the model made in a turn, with its outcome once settled."""

    name: str
    arguments: Mapping[str, Any] | None
    outcome: str | None = None
    content: str | None = None


@dataclass(slots=True)
class Turn:
    """One caller turn and the agent's answer to it."""

    text: str
    epoch: int | None = None
    heard: str = ""  # what the model got as the caller's words (audio mode: what the STT heard)
    said: str = ""  # the reply's text as it went to speech (every round)
    tool_calls: list[ToolCallSeen] = field(default_factory=list)
    interrupted: bool = False  # the caller spoke over the reply
    nodes: list[str] = field(default_factory=list)  # flow nodes the turn entered, in order
    ui_actions: list[BaseModel] = field(default_factory=list)  # dispatched to the screen during the turn
    server_messages: list[Any] = field(default_factory=list)  # server messages' data sent during the turn
    done: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def expect(self) -> TurnExpect:
        return TurnExpect(self)


class TurnExpect:
    """Assertions about one turn (each raises AssertionError saying what happened instead)."""

    __slots__ = ("_turn",)

    def __init__(self, turn: Turn) -> None:
        self._turn = turn

    def tool_call(self, name: str, /, **arguments: Any) -> ToolCallSeen:
        """The model called ``name`` with at least these arguments; returns the call."""
        for seen in self._turn.tool_calls:
            if seen.name == name and seen.arguments is not None and all(
                    k in seen.arguments and seen.arguments[k] == v for k, v in arguments.items()):
                return seen
        made = ", ".join(f"{c.name}({dict(c.arguments or {})})" for c in self._turn.tool_calls) or "none"
        raise AssertionError(f"expected a call of {name} with {arguments} in the turn {self._turn.text!r}; "
                             f"calls made: {made}")

    def no_tool_call(self) -> None:
        if self._turn.tool_calls:
            raise AssertionError(f"expected no tool call; made: {[c.name for c in self._turn.tool_calls]}")

    def said(self, *, contains: str | None = None, equals: str | None = None) -> None:
        said = self._turn.said.strip()
        if contains is not None and contains.lower() not in said.lower():
            raise AssertionError(f"expected the reply to contain {contains!r}; it said {said!r}")
        if equals is not None and said != equals:
            raise AssertionError(f"expected the reply {equals!r}; it said {said!r}")

    def entered(self, node: str) -> None:
        """The flow entered ``node`` during the turn."""
        if node not in self._turn.nodes:
            raise AssertionError(f"expected the flow to enter {node!r} in the turn {self._turn.text!r}; "
                                 f"entered: {self._turn.nodes or 'none'}")

    def ui_action(self, kind: type[BaseModel], /, **fields: Any) -> BaseModel:
        """A UI action of type ``kind`` with at least these field values was dispatched; returns it."""
        for action in self._turn.ui_actions:
            if isinstance(action, kind) and all(getattr(action, k, _MISSING) == v for k, v in fields.items()):
                return action
        sent = ", ".join(repr(a) for a in self._turn.ui_actions) or "none"
        raise AssertionError(f"expected a {kind.__name__} with {fields} in the turn {self._turn.text!r}; "
                             f"dispatched: {sent}")


_MISSING = object()


def _energy_vad(rate: int) -> VoiceActivityDetector:
    return VoiceActivityDetector(EnergyScorer(rate), VadParams.energy())


def _script(response: Response) -> list[Say | Call]:
    steps = [response] if isinstance(response, str | Call) else list(response)
    return [Say(s) if isinstance(s, str) else s for s in steps]


def _speech_pcm(audio: str | os.PathLike[str] | WavAudio | bytes) -> bytes:
    """A WAV (a path, its bytes or a read WavAudio) as mono PCM16 at the call's rate."""
    wav = audio if isinstance(audio, WavAudio) else read_wav(audio)
    return wav.pcm if wav.sample_rate == _RATE else resample(wav.pcm, wav.sample_rate, _RATE)


def _words_over(text: str, pcm: bytes, start: float) -> SpokenUtterance:
    """``text``'s words spread over the audible part of ``pcm``, which starts ``start`` seconds into the line."""
    loud = (abs(pcm16_to_array(pcm).astype("int32")) >= AUDIBLE_LEVEL).nonzero()[0]
    if not loud.size:
        raise ConfigError("AgentTest.user_says: the audio is silent (no sample reaches the audible level)")
    first, last = start + loud[0] / _RATE, start + (loud[-1] + 1) / _RATE
    words = text.split()
    step = (last - first) / len(words)
    timings = tuple(WordTiming(w, first + i * step, first + (i + 1) * step) for i, w in enumerate(words))
    return SpokenUtterance(text=" ".join(words), start=first, end=last, words=timings)


def _shifted(utterance: SpokenUtterance, by: float) -> SpokenUtterance:
    words = tuple(WordTiming(w.word, w.start + by, w.end + by) for w in utterance.words)
    return SpokenUtterance(text=utterance.text, start=utterance.start + by, end=utterance.end + by, words=words)


class _Line:
    """The caller's open line in audio mode: one frame per frame of call time, the queued
    speech when there is some, silence otherwise.  One utterance at a time (the caller does
    not talk over themselves): ``speak`` returns once its last frame was sent."""

    def __init__(self, clock: Clock, client: Any) -> None:
        self._clock = clock
        self._client = client
        self.sent = 0.0  # seconds of audio sent: the STT's own clock (it gets every frame)
        self._speech: tuple[bytes, Callable[[float], None], asyncio.Future[None]] | None = None

    async def speak(self, pcm: bytes, on_start: Callable[[float], None]) -> None:
        """Send ``pcm``; ``on_start`` gets the line's seconds at its first sample."""
        if self._speech is not None:
            raise ConfigError("AgentTest: the caller is still speaking (one utterance at a time)")
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._speech = (pcm, on_start, done)
        try:
            await done
        finally:
            self._speech = None

    async def run(self) -> None:
        size = round(_FRAME * _RATE) * 2
        silence = bytes(size)
        offset = 0
        next_at = self._clock.now()
        try:
            while True:
                frame = silence
                speech = self._speech
                if speech is not None and not speech[2].done():
                    pcm, on_start, done = speech
                    if offset == 0:
                        on_start(self.sent)
                    frame = pcm[offset:offset + size].ljust(size, b"\0")
                    offset += size
                    if offset >= len(pcm):
                        offset = 0
                        done.set_result(None)
                await self._client.send_audio(frame, _RATE)
                self.sent += _FRAME
                next_at += _FRAME
                await self._clock.sleep(max(0.0, next_at - self._clock.now()))
        except ChannelClosed:  # the call ended: the line is down
            speech = self._speech
            if speech is not None and not speech[2].done():
                speech[2].set_exception(AssertionError("the call ended while the caller was speaking"))


class _Screen:
    """A screen for the test call: records each UI action (and hands it to ``forward``)."""

    def __init__(self, test: AgentTest, forward: Callable[[BaseModel], None] | None) -> None:
        self._test = test
        self._forward = forward

    def dispatch(self, action: BaseModel, /) -> None:
        if not isinstance(action, BaseModel):
            raise ToolError(f"{type(action).__name__} is not a UI action (declare it as a pydantic model)")
        self._test._shown(action)
        if self._forward is not None:
            self._forward(action)

    def send_message(self, data: Any, /) -> None:
        self._test._sent(server_message_data(data))


class AgentTest:
    """One test call with ``agent`` (see the module docs)."""

    def __init__(self, agent: Agent, *, llm: Sequence[Response] | LlmProvider | None = None,
                 clock: Clock | None = None, on_event: ev.EventListener | None = None,
                 chars_per_second: float = _FAST_VOICE.chars_per_second, audio: bool = False,
                 stt: SttProvider | None = None, tts: TtsProvider | None = None,
                 screen: bool | Callable[[BaseModel], None] = False,
                 parameters: Mapping[str, str] | None = None) -> None:
        """``clock``: the call's clock (a SimClock by default; the console passes the system's);
        ``on_event``: sees every engine event as it happens; ``chars_per_second``: how fast the
        mock voice "speaks" (fast by default: a reply's audio is short); ``audio``: the caller
        speaks (mock STT); ``stt``: the caller speaks to this STT (implies ``audio``); ``tts``:
        the agent speaks with this TTS (the call is at 16 kHz: wrap a voice that cannot speak it
        in ``brisvox.providers.resampling.ResamplingTts``; default: the silent mock voice);
        ``screen``: the call has a screen (a callable also gets each UI action);
        ``parameters``: what the transport tells the tools of the caller (``ctx.meta.parameters``)."""
        self.agent = agent
        self.clock: Clock = clock if clock is not None else SimClock()
        self._llm_given = llm
        self._on_event = on_event
        self.audio = audio or stt is not None
        self._stt_given = stt
        self._tts_given = tts
        self._mock_stt: MockStt | None = None
        self._line: _Line | None = None
        self._screen = _Screen(self, screen if callable(screen) else None) if screen else None
        self._parameters = dict(parameters or {})
        self._flow: FlowManager | None = None
        self.ui_actions: list[BaseModel] = []
        self.server_messages: list[Any] = []
        self._voice = MockTtsConfig(chars_per_second=chars_per_second, chunk_seconds=_FAST_VOICE.chunk_seconds)
        self._runs: dict[str, int] = {}
        self._turns: list[Turn] = []
        self._by_epoch: dict[int, Turn] = {}
        self._pending: list[Turn] = []
        self._last_audio = 0.0
        self._report: CallReport | None = None
        self._scope: TaskScope | None = None
        self._transport: LoopbackTransport | None = None
        self._client: Any = None
        self._call: asyncio.Task[CallReport] | None = None

    def _llm(self) -> LlmProvider:
        given = self._llm_given
        if given is not None and not isinstance(given, Sequence):
            return given
        if given is None:
            from brisvox.server.call_providers import choose_llm

            return choose_llm(self.agent.definition(), self.clock, os.environ)[0]
        return ScriptedLlm(self.clock, [_script(r) for r in given])

    def _summarizer(self) -> LlmSummarizer | None:
        """A scripted LLM's responses are the conversation's: the window's summaries (a long
        test call) get their own fixed answer instead of taking one.  A real LLM summarizes."""
        if self._llm_given is None or not isinstance(self._llm_given, Sequence):
            return None
        return LlmSummarizer(provider=ScriptedLlm(self.clock, lambda _request: [Say(_SUMMARY)]))

    def _counted(self, name: str, tool: Tool) -> Tool:
        async def run(arguments: dict[str, Any], ctx: ToolCallContext) -> Any:
            self._runs[name] = self._runs.get(name, 0) + 1
            return await tool(arguments, ctx)

        return run

    def _shown(self, action: BaseModel) -> None:
        self.ui_actions.append(action)
        if self._by_epoch:
            self._by_epoch[max(self._by_epoch)].ui_actions.append(action)

    def _sent(self, data: Any) -> None:
        self.server_messages.append(data)
        if self._by_epoch:
            self._by_epoch[max(self._by_epoch)].server_messages.append(data)

    def _listen(self, event: ev.EngineEvent) -> None:
        if self._on_event is not None:
            self._on_event(event)
        if isinstance(event, ev.TurnStarted):
            if event.barge_in and self._by_epoch:
                self._by_epoch[max(self._by_epoch)].interrupted = True
            return
        if isinstance(event, ev.UserTurn):
            typed = self._pending.pop(0) if self._pending else Turn(event.text)
            typed.epoch = event.epoch
            typed.heard = event.text
            self._by_epoch[event.epoch] = typed
            return
        turn = self._by_epoch.get(event.epoch)
        if turn is None:  # the greeting (epoch 0) is nobody's turn
            return
        if isinstance(event, ev.FlowEntered):
            turn.nodes.append(event.node)
        elif isinstance(event, ev.BotText):
            turn.said += event.text
        elif isinstance(event, ev.ToolCallStarted):
            turn.tool_calls.append(ToolCallSeen(event.name, event.parsed))
        elif isinstance(event, ev.ToolCallSettled):
            for i, seen in enumerate(turn.tool_calls):
                if seen.name == event.name and seen.outcome is None:
                    turn.tool_calls[i] = ToolCallSeen(seen.name, seen.arguments, event.outcome.value, event.content)
                    break
        elif isinstance(event, ev.BotDone):
            turn.done.set()

    async def __aenter__(self) -> Self:
        definition = self.agent.definition()
        config = engine_config(definition)
        offered = self.agent.toolset()
        tools = ToolSet()
        for name in offered:
            spec, tool = offered.spec(name), offered.tool(name)
            assert spec is not None and tool is not None
            tools.add(spec, self._counted(name, tool))
        flow = agent_flow(definition, tools)
        self._flow = flow_manager(definition, flow, self.clock)
        registry = tools.registry(definition.tools, definition.confirm_tools) if definition.tools or flow else None
        stt: SttProvider
        if self._stt_given is not None:
            stt = self._stt_given
        else:
            stt = self._mock_stt = MockStt(self.clock)
        tts = self._tts_given if self._tts_given is not None else MockTts(self.clock, self._voice)
        providers = Providers(stt=stt, llm=self._llm(), tts=tts, vad=_energy_vad)
        self._transport = transport = LoopbackTransport(self.clock)
        await transport.__aenter__()
        self._scope = scope = TaskScope("agent-test")
        await scope.__aenter__()
        self._client = await transport.connect(metadata={**self._parameters, "sample_rate": str(_RATE)})
        link = await transport.accept()
        session = await TransportSession.open(self.clock, link)
        observer = CallObserver(listener=self._listen)
        self._call = scope.spawn(run_call(session, config, providers, self.clock, tools=registry,
                                          filler=FillerPolicy.from_config(config.llm.filler), observer=observer,
                                          summarizer=self._summarizer(), flow=self._flow, ui=self._screen),
                                 name="agent-test-call")
        scope.spawn(self._hear(), name="agent-test-listener")
        if self.audio:
            self._line = _Line(self.clock, self._client)
            scope.spawn(self._line.run(), name="agent-test-line")
        if self._flow is not None:  # the runner starts the flow (its first node) as the call starts
            await self._until(lambda: self._flow is not None and self._flow.current_node is not None,
                              "the call never started its flow")
        if definition.greeting:
            await self._settle()
        return self

    async def _until(self, ready: Callable[[], bool], failure: str) -> None:
        start = self.clock.now()
        while not ready():
            if self.clock.now() - start > _TURN_LIMIT:
                raise AssertionError(failure)
            if self._call is not None and self._call.done():
                self._call.result()  # a failed call raises its CallFailed (logged by the engine) here
                raise AssertionError(f"the call ended: {failure}")
            await self.clock.sleep(0.01)

    async def _hear(self) -> None:
        with contextlib.suppress(ChannelClosed):  # the call ended: nothing more to hear
            while True:
                heard = await self._client.recv()
                self._last_audio = self.clock.now()
                if isinstance(heard.item, WireMark):  # as a phone does once the audio before it played
                    await self._client.echo_mark(heard.item.id)  # (the engine's end waits for its farewell's)

    async def _settle(self) -> None:
        """Until the agent has been quiet for a moment (its audio played out)."""
        while self.clock.now() - self._last_audio < _SETTLE:
            await self.clock.sleep(_SETTLE / 2)

    async def user_says(self, text: str | None = None, *, audio: str | os.PathLike[str] | WavAudio | bytes | None = None,
                        wait: bool = True) -> Turn:
        """The caller types ``text`` (audio mode: says it; ``audio``: a WAV to send instead of
        the synthesized speech); returns the turn once the reply has been spoken
        (``wait=False``: at once, or in audio mode once the caller's speech was sent)."""
        if self._client is None:
            raise ConfigError("AgentTest: use it as `async with AgentTest(agent, ...) as call:`")
        if not self.audio:
            if audio is not None or text is None:
                raise ConfigError("AgentTest.user_says: the caller types text (AgentTest(..., audio=True) to speak)")
            turn = self._turn(text.strip())
            await self._client.send_text(text)
        else:
            turn = await self._speak(text, audio)
        if wait:
            await self._finish(turn)
        return turn

    def _turn(self, text: str) -> Turn:
        turn = Turn(text)
        self._pending.append(turn)
        self._turns.append(turn)
        return turn

    async def _speak(self, text: str | None, audio: str | os.PathLike[str] | WavAudio | bytes | None) -> Turn:
        assert self._line is not None
        stt = self._mock_stt
        if stt is None and audio is None:
            raise ConfigError("AgentTest.user_says: with a real stt, give the caller's audio (audio=<a WAV>)")
        if stt is not None and not (text and text.strip()):
            raise ConfigError("AgentTest.user_says: give the words the mock STT hears in the audio")
        if audio is None:
            assert text is not None
            scenario = ScenarioBuilder(sample_rate=_RATE).say(text).build()
            pcm, spoken = scenario.render(), scenario.utterances[0]

            def heard(at: float) -> SpokenUtterance:
                return _shifted(spoken, at)
        else:
            pcm = _speech_pcm(audio)

            def heard(at: float) -> SpokenUtterance:
                assert text is not None
                return _words_over(text, pcm, at)

        turn = self._turn(text.strip() if text else "<audio>")
        await self._line.speak(pcm, (lambda at: stt.hear(heard(at))) if stt is not None else (lambda at: None))
        return turn

    async def _finish(self, turn: Turn) -> None:
        await self._until(turn.done.is_set, f"the agent did not answer {turn.text!r} within {_TURN_LIMIT:.0f} s")
        await self._settle()

    async def barge_in(self, after: float, text: str = "wait") -> Turn:
        """``after`` seconds into the reply to the last turn, the caller types ``text`` (an
        interruption); the last turn is marked interrupted; returns the new turn, answered."""
        if not self._turns:
            raise ConfigError("AgentTest.barge_in: no turn to interrupt (user_says(..., wait=False) first)")
        last = self._turns[-1]
        await self._until(lambda: last.epoch is not None and bool(last.said or last.done.is_set()),
                          f"the agent never started answering {last.text!r}")
        await self.clock.sleep(after)
        return await self.user_says(text)

    @property
    def node(self) -> str | None:
        """The flow's current node (None: the agent has no flow)."""
        return self._flow.current_node if self._flow is not None else None

    @property
    def offered(self) -> tuple[str, ...]:
        """The agent's tools now: the flow node's, or every tool of the agent.  Each request offers
        those the tool engine's state allows (docs/TOOLS.md, "Offered now": a scripted LLM's
        ``requests`` show them)."""
        if self._flow is not None:
            return tuple(spec.name for spec in self._flow.tool_specs())
        return tuple(t.name for t in self.agent.tools)

    def tool_runs(self, name: str) -> int:
        """How many times the tool's function ran (a replayed or refused call does not run it)."""
        return self._runs.get(name, 0)

    @property
    def turns(self) -> list[Turn]:
        return list(self._turns)

    @property
    def context(self) -> Context:
        """The conversation as the call recorded it (available when the call has ended)."""
        if self._report is None:
            raise ConfigError("AgentTest.context: the conversation is complete after the `async with` block")
        return self._report.context

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        try:
            if self._client is not None:
                with contextlib.suppress(ChannelClosed):  # the call already ended
                    await self._client.hangup()
            if self._call is not None:
                self._report = await self._call
        finally:
            if self._scope is not None:
                await self._scope.__aexit__(et, e, tb)
            if self._transport is not None:
                await self._transport.__aexit__(et, e, tb)


@dataclass(frozen=True, slots=True)
class Replay:
    """A recorded call replayed against the current code (see the module docs)."""

    differences: tuple[Difference, ...]
    table: str  # the recorded and the replayed events side by side

    @classmethod
    def from_file(cls, path: str | Path, *, agent: Agent | None = None, silence: float | None = None,
                  tolerance: float | None = None) -> Replay:
        """Replay the recording at ``path`` on a virtual-time loop of its own (from a plain test).

        ``agent``: the agent to run (default: the agent file the recording names);
        ``silence``: a fixed-silence turn policy instead of the agent's; ``tolerance``: seconds
        event times may differ (default: 1 ms, or 500 ms for a recording made on real time)."""
        loop = VirtualTimeLoop(max_time=86_400.0)
        try:
            return loop.run_until_complete(cls.run(path, agent=agent, silence=silence, tolerance=tolerance))
        finally:
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    @classmethod
    async def run(cls, path: str | Path, *, agent: Agent | None = None, silence: float | None = None,
                  tolerance: float | None = None) -> Replay:
        """:meth:`from_file` on the running loop (a virtual-time one: an ``async`` test's)."""
        from brisvox.recording import load_recording
        from brisvox.recording.replay import judge, render
        from brisvox.server.replay import offered_tools, replay_agent, replay_recording

        recording = load_recording(path)
        definition, tools = (agent.definition(), agent.toolset()) if agent is not None else replay_agent(
            recording, None, ToolSet())
        replayed = await replay_recording(recording, definition, tools, SystemClock(), silence=silence)
        judgement = judge(recording, replayed, tolerance, offered_tools(definition, tools, recording))
        return cls(tuple(judgement.differences), render(judgement.rows))

    def expect_same(self) -> None:
        """Raise AssertionError showing both event streams when the replay differs."""
        if self.differences:
            raise AssertionError(f"the replay differs in {len(self.differences)} place(s):\n{self.table}")
