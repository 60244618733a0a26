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

A recorded call (``[record]`` in the agent file, docs/OBSERVABILITY.md) is a test case::

    def test_the_call_that_went_wrong() -> None:
        Replay.from_file("tests/calls/bad-turn.jsonl.gz", agent=agent).expect_same()

:class:`Replay` re-runs it on virtual time with the recorded providers and tools and holds
the differences from the recorded events (``differences``; ``table`` shows both streams).

``Turn.expect`` asserts what happened in a turn (``tool_call``, ``no_tool_call``,
``said``), raising ``AssertionError`` with what happened instead.  ``AgentTest.context``
is the conversation the call recorded (after the ``async with`` block), and
``AgentTest.tool_runs(name)`` how many times a tool's function actually ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self

from brisvox.agent.context import Context
from brisvox.agent.tools import FillerPolicy, Tool, ToolCallContext
from brisvox.core.clock import Clock, SimClock, SystemClock, VirtualTimeLoop
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.tasks import TaskScope
from brisvox.engine import CallObserver, CallReport, Providers, run_call
from brisvox.engine import events as ev
from brisvox.inference.energy import EnergyScorer
from brisvox.inference.vad import VadParams, VoiceActivityDetector
from brisvox.providers.llm import LlmProvider
from brisvox.providers.summarizer import LlmSummarizer
from brisvox.recording.replay import Difference
from brisvox.server.agent import Agent
from brisvox.server.call import engine_config
from brisvox.server.tools import ToolSet
from brisvox.sim import MockStt, MockTts, MockTtsConfig
from brisvox.sim.mock_llm import Call, Say, ScriptedLlm
from brisvox.transport import LoopbackTransport, TransportSession

__all__ = ["AgentTest", "Replay", "Turn", "TurnExpect", "call", "virtual_time"]

_RATE = 16000
_FAST_VOICE = MockTtsConfig(chars_per_second=400.0, chunk_seconds=0.04)
_SETTLE = 0.2  # seconds of quiet after the reply's last audio before a turn counts as over
_SUMMARY = "The caller and the agent talked earlier."
_TURN_LIMIT = 120.0  # seconds (call time) a turn may take before the test fails


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
    said: str = ""  # the reply's text as it went to speech (every round)
    tool_calls: list[ToolCallSeen] = field(default_factory=list)
    interrupted: bool = False  # the caller spoke over the reply
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


def _energy_vad(rate: int) -> VoiceActivityDetector:
    return VoiceActivityDetector(EnergyScorer(rate), VadParams.energy())


def _script(response: Response) -> list[Say | Call]:
    steps = [response] if isinstance(response, str | Call) else list(response)
    return [Say(s) if isinstance(s, str) else s for s in steps]


class AgentTest:
    """One test call with ``agent`` (see the module docs)."""

    def __init__(self, agent: Agent, *, llm: Sequence[Response] | LlmProvider | None = None,
                 clock: Clock | None = None, on_event: ev.EventListener | None = None,
                 chars_per_second: float = _FAST_VOICE.chars_per_second) -> None:
        """``clock``: the call's clock (a SimClock by default; the console passes the system's);
        ``on_event``: sees every engine event as it happens; ``chars_per_second``: how fast the
        mock voice "speaks" (fast by default: a reply's audio is short)."""
        self.agent = agent
        self.clock: Clock = clock if clock is not None else SimClock()
        self._llm_given = llm
        self._on_event = on_event
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
            import os

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
            self._by_epoch[event.epoch] = typed
            return
        turn = self._by_epoch.get(event.epoch)
        if turn is None:  # the greeting (epoch 0) is nobody's turn
            return
        if isinstance(event, ev.BotText):
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
        registry = tools.registry(definition.tools, definition.confirm_tools) if definition.tools else None
        providers = Providers(stt=MockStt(self.clock), llm=self._llm(), tts=MockTts(self.clock, self._voice),
                              vad=_energy_vad)
        self._transport = transport = LoopbackTransport(self.clock)
        await transport.__aenter__()
        self._scope = scope = TaskScope("agent-test")
        await scope.__aenter__()
        self._client = await transport.connect(metadata={"sample_rate": str(_RATE)})
        link = await transport.accept()
        session = await TransportSession.open(self.clock, link)
        observer = CallObserver(listener=self._listen)
        self._call = scope.spawn(run_call(session, config, providers, self.clock, tools=registry,
                                          filler=FillerPolicy.from_config(config.llm.filler), observer=observer,
                                          summarizer=self._summarizer()),
                                 name="agent-test-call")
        scope.spawn(self._hear(), name="agent-test-listener")
        if definition.greeting:
            await self._settle()
        return self

    async def _hear(self) -> None:
        with contextlib.suppress(ChannelClosed):  # the call ended: nothing more to hear
            while True:
                await self._client.recv()
                self._last_audio = self.clock.now()

    async def _settle(self) -> None:
        """Until the agent has been quiet for a moment (its audio played out)."""
        while self.clock.now() - self._last_audio < _SETTLE:
            await self.clock.sleep(_SETTLE / 2)

    async def user_says(self, text: str, *, wait: bool = True) -> Turn:
        """The caller types ``text``; returns the turn once the reply has been spoken
        (``wait=False``: at once, for :meth:`barge_in`)."""
        if self._client is None:
            raise ConfigError("AgentTest: use it as `async with AgentTest(agent, ...) as call:`")
        turn = Turn(text.strip())
        self._pending.append(turn)
        self._turns.append(turn)
        await self._client.send_text(text)
        if wait:
            await self._finish(turn)
        return turn

    async def _finish(self, turn: Turn) -> None:
        start = self.clock.now()
        while not turn.done.is_set():
            if self.clock.now() - start > _TURN_LIMIT:
                raise AssertionError(f"the agent did not answer {turn.text!r} within {_TURN_LIMIT:.0f} s")
            if self._call is not None and self._call.done():
                self._call.result()  # a failed call raises its CallFailed (logged by the engine) here
                raise AssertionError(f"the call ended before the agent answered {turn.text!r}")
            await self.clock.sleep(0.05)
        await self._settle()

    async def barge_in(self, after: float, text: str = "wait") -> Turn:
        """``after`` seconds into the reply to the last turn, the caller types ``text`` (an
        interruption); the last turn is marked interrupted; returns the new turn, answered."""
        if not self._turns:
            raise ConfigError("AgentTest.barge_in: no turn to interrupt (user_says(..., wait=False) first)")
        last = self._turns[-1]
        start = self.clock.now()
        while last.epoch is None or not (last.said or last.done.is_set()):
            if self.clock.now() - start > _TURN_LIMIT:
                raise AssertionError(f"the agent never started answering {last.text!r}")
            await self.clock.sleep(0.01)
        await self.clock.sleep(after)
        return await self.user_says(text)

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
        from brisvox.server.replay import replay_agent, replay_recording

        recording = load_recording(path)
        definition, tools = (agent.definition(), agent.toolset()) if agent is not None else replay_agent(
            recording, None, ToolSet())
        replayed = await replay_recording(recording, definition, tools, SystemClock(), silence=silence)
        judgement = judge(recording, replayed, tolerance)
        return cls(tuple(judgement.differences), render(judgement.rows))

    def expect_same(self) -> None:
        """Raise AssertionError showing both event streams when the replay differs."""
        if self.differences:
            raise AssertionError(f"the replay differs in {len(self.differences)} place(s):\n{self.table}")
