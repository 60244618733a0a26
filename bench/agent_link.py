"""Added latency of the agent link: a remote tool call and a ``say``, each against the same in process.

Tools: one ReadOnly tool (returns at once) runs through the tool engine two ways in the same
run: in process (a ``brisvox.tool`` method of a Brain), and remote (the same Brain served by
``brisvox.sdk.serve`` in a child process on 127.0.0.1, called over an ``AgentLink``).
Reported: p50 and p95 of one ``execute`` in microseconds.

Bot lines: a call (``run_call`` over the loopback transport, mock STT and TTS, real time) is
told to ``say`` a line (interrupting) every 0.2 s, two ways: over the link (the brain in the
child process sends ``say`` frames; the clock starts when the link's reader hands the command
to the call) and in process (the bench puts the same command into the call's ``AgentInput``).
Reported: p50 and p95 in milliseconds from the command to the first audio frame of its turn
the caller receives (the transport releases frames on its 20 ms tick, so this includes up to
one tick).  Each table ends with the latency the link adds (remote minus in process); the lines
table also gives the link's own share (the agent stamps each line with its sending moment on
CLOCK_MONOTONIC, the same clock in both processes: agent send -> command into the call), since
the transport's 20 ms tick blurs the difference of two end-to-end medians.

Brain mode (an agent that answers the turns): the call's model is the link (``BrainLlm``).  The
same scripted model answers a request two ways: in process (the model's own stream), and as a
``ModelBrain`` in the child process (a ``turn.request`` out, its reply lines back).  Reported: p50
and p95 in microseconds from the request to its first text, and the latency the link adds.

    python bench/agent_link.py [--repeats 2000] [--lines 100]

The driver (an agent process started from its command, a tool timed through the tool engine in
process or over an ``AgentLink``) is shared with ``bench/agent_link_ts.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import re
import statistics
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel

import brisvox
from brisvox.agent.context import ToolCall, UserMessage
from brisvox.agent.tools import CancelToken, ToolCallContext, ToolEngine, ToolRegistry
from brisvox.agent.turn import FixedSilence
from brisvox.core.clock import SystemClock, monotonic_ns
from brisvox.core.errors import ChannelClosed
from brisvox.core.tasks import TaskScope
from brisvox.engine import EngineConfig, Providers, run_call
from brisvox.engine.agent_input import AgentCommand, AgentInput, BotLine
from brisvox.engine.events import UserTurn
from brisvox.inference.vad import energy_vad
from brisvox.providers.llm import LlmProvider, LlmRequest, TextDelta
from brisvox.sdk import Brain, ModelBrain, serve
from brisvox.server.agent_brain import BrainLlm
from brisvox.server.agent_link import AgentLink, AgentLinkConfig
from brisvox.sim import MockStt, MockTts, Say, ScriptedLlm
from brisvox.transport import LoopbackConfig, LoopbackTransport, TransportSession
from brisvox.transport.events import WireAudioOut


class Query(BaseModel):
    q: str


class Lines(BaseModel):
    count: int


LINE_GAP = 0.2  # seconds between two lines: the last one's first audio is out long before


class Lookup(Brain):
    @brisvox.tool.read_only
    async def look(self, args: Query) -> dict[str, str]:
        """Look something up."""
        return {"found": args.q}

    @brisvox.tool.read_only
    async def speak(self, args: Lines) -> str:
        """Start saying ``count`` lines, one every LINE_GAP seconds (the bench's say loop)."""
        task = asyncio.get_running_loop().create_task(self._say(args.count))
        self._saying = task  # owned by the session's brain until the call ends
        return "started"

    async def _say(self, count: int) -> None:
        for n in range(count):
            await asyncio.sleep(LINE_GAP)  # the agent process's own pacing (not brisvox logic)
            # Stamped with the sending moment (CLOCK_MONOTONIC is one clock for every process on
            # the machine): the bench reads the link's own share of the latency from it.
            await self.say_line(f"Line {n} sent at {monotonic_ns()}.", interrupt=True)


# --- the driver, shared with agent_link_ts.py -------------------------------------------------


def serve_child(brain: Callable[[], Brain]) -> None:
    """The agent process of a Python brain: serve it on a free port of 127.0.0.1 and print
    ``{"listening": port}`` as the first line (what the TypeScript example prints)."""

    async def run() -> None:
        server = await serve(brain, "127.0.0.1", 0)
        print(json.dumps({"listening": server.sockets[0].getsockname()[1]}), flush=True)
        await server.serve_forever()

    asyncio.run(run())


@contextlib.contextmanager
def agent_process(command: list[str]) -> Iterator[int]:
    """The port of the agent process ``command`` starts (it prints ``{"listening": port}`` first);
    the process is stopped on exit."""
    child = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None
        first = child.stdout.readline()
        if not first:
            raise RuntimeError(f"the agent {command} exited before it listened (status {child.wait()})")
        yield int(json.loads(first)["listening"])
    finally:
        child.terminate()
        child.wait(timeout=5)


# --- brain mode: the call's model is the link ---------------------------------------------------


def _replier() -> ScriptedLlm:
    """The model of both ways of the brain-mode table: one short sentence per request, at once."""
    return ScriptedLlm(SystemClock(), lambda _request: [Say("Here you are.")], record=False)


async def _first_text(llm: LlmProvider, repeats: int) -> tuple[float, float]:
    """p50/p95 (us) from a request to its first text (the rest of the stream read before the next)."""
    request = LlmRequest(messages=(UserMessage(text="hello"),))
    samples: list[int] = []
    for n in range(repeats + 100):
        t0 = monotonic_ns()
        first = 0
        async with llm.stream(request) as stream:
            async for event in stream:
                if isinstance(event, TextDelta) and not first:
                    first = monotonic_ns() - t0
        if n >= 100:
            samples.append(first)
    return percentiles(samples)


async def _reply_latency(repeats: int, port: int) -> tuple[tuple[float, float], tuple[float, float]]:
    """The brain-mode table's two ways: the scripted model in process, and a ModelBrain over the link."""
    in_process = await _first_text(_replier(), repeats)
    async with TaskScope("bench") as scope:
        link = await AgentLink.open(AgentLinkConfig(url=f"ws://127.0.0.1:{port}"), SystemClock(), call_id="bench",
                                    agent="bench", transport="bench", parameters={}, scope=scope)
        assert link is not None and link.replies is not None, "the brain did not answer the turns"
        llm = BrainLlm(link, link.replies, _replier(), SystemClock(), first_line=5.0)
        llm.listen(UserTurn(epoch=1, at=0.0, text="hello"))
        remote = await _first_text(llm, repeats)
        assert llm.fell_back == 0, "the brain missed a reply: the numbers are the fallback's"
        await link.close()
    return in_process, remote


def percentiles(samples: list[int]) -> tuple[float, float]:
    """p50 and p95 of nanosecond ``samples``, in microseconds."""
    q = statistics.quantiles(samples, n=100)
    return statistics.median(samples) / 1000.0, q[94] / 1000.0


async def time_calls(registry: ToolRegistry, name: str, arguments: dict[str, Any], repeats: int) -> tuple[float, float]:
    """p50 and p95 (us) of one ``execute`` of tool ``name`` through the tool engine (after 100 warm-up calls)."""
    samples: list[int] = []
    async with ToolEngine(registry, "bench", SystemClock()) as engine:
        for n in range(repeats + 100):
            calls = [ToolCall(id=f"t{n}.0", name=name, arguments=dict(arguments))]
            t0 = monotonic_ns()
            ex = await engine.execute(calls, n + 1, CancelToken())
            dt = monotonic_ns() - t0
            ex.mark_delivered()
            if n >= 100:
                samples.append(dt)
    return percentiles(samples)


async def time_remote(port: int, name: str, arguments: dict[str, Any], repeats: int) -> tuple[float, float]:
    """:func:`time_calls` of the agent on ``port``'s tool, over an ``AgentLink``."""
    async with TaskScope("bench") as scope:
        link = await AgentLink.open(AgentLinkConfig(url=f"ws://127.0.0.1:{port}"), SystemClock(), call_id="bench",
                                    agent="bench", transport="bench", parameters={}, scope=scope)
        assert link is not None, f"the agent on port {port} did not answer"
        timed = await time_calls(link.tools_into(None), name, arguments, repeats)
        await link.close()
    return timed


# --- this bench ---------------------------------------------------------------------------------

LOOK = {"q": "x"}


async def _line_latency(lines: int, port: int | None) -> tuple[tuple[float, float], tuple[float, float] | None]:
    """p50/p95 (ms) from a say command reaching the call to its first audio frame at the caller, and
    (over the link) from the agent's send to the command reaching the call."""
    clock = SystemClock()
    put_at: list[int] = []
    transit: list[int] = []
    first_audio: dict[int, int] = {}
    llm = ScriptedLlm(clock, [])
    providers = Providers(stt=MockStt(clock), llm=llm, tts=MockTts(clock), vad=energy_vad)
    # No simulated network (the loopback's default 30 ms): the number is the server's own.
    async with TaskScope("bench-lines") as scope, LoopbackTransport(clock, LoopbackConfig(latency=0.0)) as transport:
        link: AgentLink | None = None
        if port is not None:
            link = await AgentLink.open(AgentLinkConfig(url=f"ws://127.0.0.1:{port}"), clock, call_id="lines",
                                        agent="bench", transport="loopback", parameters={}, scope=scope)
            assert link is not None, "the agent did not answer"
            agent = link.input
        else:
            agent = AgentInput(lambda command, why, _: print(f"refused {command}: {why.value}"))
        put = agent.put

        def stamped(command: AgentCommand) -> None:
            now = monotonic_ns()
            put_at.append(now)
            if isinstance(command, BotLine) and (sent := re.search(r"sent at (\d+)", command.text)):
                transit.append(now - int(sent.group(1)))
            put(command)

        agent.put = stamped  # type: ignore[method-assign]  # the clock starts where the command enters the call
        client = await transport.connect(metadata={"sample_rate": "16000"})
        session = await TransportSession.open(clock, await transport.accept())
        cancel = asyncio.Event()
        call = scope.spawn(run_call(session, EngineConfig(turn=FixedSilence(silence=0.5)), providers, clock,
                                    cancel=cancel, agent=agent), name="call")

        async def hear() -> None:
            try:
                while len(first_audio) < lines:
                    got = await client.recv()
                    if isinstance(got.item, WireAudioOut):
                        first_audio.setdefault(got.item.frame.epoch, monotonic_ns())
            except ChannelClosed:
                return

        hearing = scope.spawn(hear(), name="hear")
        if link is not None:
            speak = link.tools_into(None).get("speak")
            assert speak is not None
            await speak.tool({"count": lines}, _ctx("speak", {"count": lines}))
        else:
            for n in range(lines):
                await clock.sleep(LINE_GAP)
                agent.put(BotLine(f"Line {n}.", interrupt=True))
        await asyncio.wait((hearing,), timeout=lines * LINE_GAP + 10.0)
        cancel.set()
        await call
        if link is not None:
            await link.close()
    # Each line is a bot turn of its own: line n (0-based) is epoch n + 1.
    samples = [first_audio[n + 1] - put_at[n] for n in range(min(len(put_at), lines)) if n + 1 in first_audio]
    assert len(samples) >= lines * 0.9, f"only {len(samples)} of {lines} lines were heard"
    p50, p95 = percentiles(samples)
    link_share = None
    if transit:
        t50, t95 = percentiles(transit)
        link_share = (t50 / 1000.0, t95 / 1000.0)
    return (p50 / 1000.0, p95 / 1000.0), link_share


def _ctx(name: str, arguments: dict[str, object]) -> ToolCallContext:
    return ToolCallContext("bench", 1, ToolCall(id="t1.0", name=name, arguments=dict(arguments)), CancelToken())


async def _measure(repeats: int, port: int, brain_port: int, lines: int) -> None:
    local = ToolRegistry()
    tool = Lookup().look
    local.register(tool.spec, tool)
    in_process = await time_calls(local, "look", LOOK, repeats)
    remote = await time_remote(port, "look", LOOK, repeats)
    print(f"{'':24}{'p50 us':>10}{'p95 us':>10}")
    print(f"{'in process':24}{in_process[0]:10.1f}{in_process[1]:10.1f}")
    print(f"{'remote (agent link)':24}{remote[0]:10.1f}{remote[1]:10.1f}")
    print(f"{'added by the link':24}{remote[0] - in_process[0]:10.1f}{remote[1] - in_process[1]:10.1f}")
    model, brain = await _reply_latency(repeats, brain_port)
    print()
    print(f"{'request -> first text':24}{'p50 us':>10}{'p95 us':>10}")
    print(f"{'model in process':24}{model[0]:10.1f}{model[1]:10.1f}")
    print(f"{'brain over the link':24}{brain[0]:10.1f}{brain[1]:10.1f}")
    print(f"{'added by the link':24}{brain[0] - model[0]:10.1f}{brain[1] - model[1]:10.1f}")
    if lines <= 0:
        return
    local_line, _ = await _line_latency(lines, None)
    remote_line, link_share = await _line_latency(lines, port)
    print()
    print(f"{'say -> first audio':24}{'p50 ms':>10}{'p95 ms':>10}")
    print(f"{'in process':24}{local_line[0]:10.2f}{local_line[1]:10.2f}")
    print(f"{'over the agent link':24}{remote_line[0]:10.2f}{remote_line[1]:10.2f}")
    print(f"{'added by the link':24}{remote_line[0] - local_line[0]:10.2f}{remote_line[1] - local_line[1]:10.2f}")
    if link_share is not None:  # the difference above is within the transport's 20 ms tick
        print(f"{'  agent send -> call':24}{link_share[0]:10.2f}{link_share[1]:10.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--lines", type=int, default=100, help="say commands per way (0: tools only)")
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the child: serve the brain
    parser.add_argument("--serve-replier", action="store_true", help=argparse.SUPPRESS)  # the brain-mode child
    args = parser.parse_args()
    if args.serve:
        serve_child(Lookup)
        return
    if args.serve_replier:
        serve_child(lambda: ModelBrain(_replier()))
        return
    with agent_process([sys.executable, __file__, "--serve"]) as port, \
            agent_process([sys.executable, __file__, "--serve-replier"]) as brain_port:
        asyncio.run(_measure(args.repeats, port, brain_port, args.lines))


if __name__ == "__main__":
    main()
