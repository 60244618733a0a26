"""The engine's own overhead per turn, at 1, 50 and 100 concurrent calls in one process.

Each call is a simulated caller over the loopback transport with mock providers of fixed
latency (STT final 50 ms after a stop, LLM first token 200 ms, TTS first audio 80 ms),
on the real clock, the calls staggered by 37 ms (mod 2 s); one feeder task sends every
caller's frames as they fall due (it ticks every 5 ms).  The caller asks a question, the
bot answers, the caller barges in: two turns and one barge-in per call.  From each call's own
timeline (brisvox.core.timeline) the script takes four engine intervals and prints p50 and
p95 over all calls:

* turn end -> LLM request   (budget 3 ms at p95)
* first TTS audio -> audio handed to the transport   (budget 2 ms)
* barge-in decision -> Clear applied   (budget 1 ms)
* first LLM token -> first text sent to TTS

It also prints whether the run is valid.  Each caller frame is due at its scenario time (up
to one feeder tick late on an idle loop);
how late the callers actually sent them is the load's own symptom: once the process has no
CPU to spare, frames leave in bursts, timers fire late and the calls change shape (turns
split, barge-ins repeat), so the intervals measure a different conversation.  A run whose
callers were more than one frame (20 ms) late at p95, or whose calls did not all have two
turns and one barge-in, is marked OVERLOADED.

    python bench/engine_latency.py [--calls 1 50 100]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import statistics
import sys
import time
from dataclasses import dataclass, field

from brisvox.agent.turn import FixedSilence
from brisvox.core.clock import SystemClock
from brisvox.core.errors import ChannelClosed
from brisvox.core.tasks import TaskScope
from brisvox.core.timeline import TurnEvent as E
from brisvox.core.timeline import TurnRecord
from brisvox.engine import EngineConfig, Providers, run_call
from brisvox.inference.energy import EnergyScorer
from brisvox.inference.vad import VadParams, VoiceActivityDetector
from brisvox.sim import LatencyProfile, MockStt, MockTts, MockTtsConfig, Say, ScenarioBuilder, ScriptedLlm
from brisvox.transport import LoopbackClient, LoopbackConfig, LoopbackTransport, TransportSession

RATE = 16000
ANSWER = "We have tables at six, seven and eight tonight, and the terrace is open for larger groups too."
INTERVALS = {
    "turn end -> LLM request": (E.USER_TURN_ENDED, E.LLM_REQUEST, 3.0),
    "first TTS audio -> transport": (E.FIRST_TTS_AUDIO, E.FIRST_AUDIO_SENT, 2.0),
    "barge-in -> Clear applied": (E.BARGE_IN, E.CLEAR_APPLIED, 1.0),
    "first token -> first TTS text": (E.LLM_FIRST_TOKEN, E.FIRST_TTS_TEXT, None),
}


FRAME = 0.02
TICK = 0.005  # the feeder's tick: a frame leaves at most this late on an idle loop
EXPECTED_TURNS, EXPECTED_BARGE_INS = 2, 1
SCENARIO = (
    ScenarioBuilder().pause(0.3).say("what tables do you have tonight").pause(1.6).say("seven").pause(1.5).build()
)


@dataclass(slots=True)
class Caller:
    client: LoopbackClient
    start: float
    frames: list[bytes]
    lateness: list[float] = field(default_factory=list)  # seconds each frame left after it was due
    done: asyncio.Event = field(default_factory=asyncio.Event)


class Feeder:
    """Sends every caller's frames as they fall due, from one task ticking every TICK.

    One task for all callers, as a media server's receive loop takes many sockets per
    wake-up: a task and a timer per caller and frame would make the simulated callers cost
    about as much CPU as the engines they measure.
    """

    def __init__(self, clock: SystemClock) -> None:
        self._clock = clock
        self._callers: list[Caller] = []
        self._added = asyncio.Event()

    def add(self, caller: Caller) -> None:
        self._callers.append(caller)
        self._added.set()

    async def run(self) -> None:
        clock = self._clock
        while True:
            if not self._callers:
                self._added.clear()
                await self._added.wait()
            now = clock.now()
            for caller in self._callers:
                with contextlib.suppress(ChannelClosed):  # the caller's ear: drained here, no task per call
                    while caller.client.try_recv() is not None:
                        pass
                sent = len(caller.lateness)
                while sent < len(caller.frames) and (due := caller.start + sent * FRAME) <= now:
                    caller.lateness.append(now - due)
                    await caller.client.send_audio(caller.frames[sent], RATE)
                    sent += 1
                if sent == len(caller.frames):
                    caller.done.set()
            self._callers = [c for c in self._callers if not c.done.is_set()]
            await clock.sleep(TICK)


@dataclass(frozen=True, slots=True)
class CallResult:
    timeline: tuple[TurnRecord, ...]
    lateness: list[float]  # seconds each caller frame left after it was due


async def one_call(clock: SystemClock, transport: LoopbackTransport, feeder: Feeder, n: int) -> CallResult:
    providers = Providers(
        stt=MockStt.for_scenario(clock, SCENARIO),
        llm=ScriptedLlm(clock, [[Say(ANSWER)], [Say("Seven it is.")]], latency=LatencyProfile(first_event=0.2)),
        tts=MockTts(clock, MockTtsConfig(latency=LatencyProfile(first_event=0.08))),
        vad=lambda rate: VoiceActivityDetector(EnergyScorer(rate), VadParams.energy()),
    )
    client = await transport.connect(call_id=f"bench-{n}", metadata={"sample_rate": str(RATE)})
    link = await transport.accept()
    session = await TransportSession.open(clock, link)
    config = EngineConfig(turn=FixedSilence(silence=0.4))
    async with TaskScope(f"bench-{n}") as scope:
        call = scope.spawn(run_call(session, config, providers, clock), name="call")

        async def drain() -> None:
            with contextlib.suppress(ChannelClosed):  # the call ended first: nothing more to hear
                while True:
                    await client.recv()

        # Calls start 37 ms apart (mod 2 s), so turn ends do not all land in the same tick.
        caller = Caller(client, clock.now() + (n * 0.037) % 2.0, list(SCENARIO.frames(FRAME)))
        feeder.add(caller)
        await caller.done.wait()
        reader = scope.spawn(drain(), name="reader")  # the feeder no longer drains this caller
        await client.hangup()
        report = await call
        reader.cancel()
    return CallResult(report.timeline, caller.lateness)


@dataclass(slots=True)
class RunResult:
    intervals: dict[str, list[float]]  # milliseconds
    lateness: list[float]  # milliseconds, every frame of every caller
    misshapen: int  # calls without exactly the scenario's turns and barge-ins
    cpu_per_call_second: float  # process CPU seconds per call per second of caller audio


async def run(calls: int) -> RunResult:
    clock = SystemClock()
    cpu = time.process_time()
    feeder = Feeder(clock)
    # No modelled wire delay: the engine's intervals end where the transport takes the audio.
    async with LoopbackTransport(clock, LoopbackConfig(latency=0.0)) as transport, TaskScope("feeder") as scope:
        scope.spawn(feeder.run(), name="feeder")
        results = await asyncio.gather(*(one_call(clock, transport, feeder, i) for i in range(calls)))
        scope.cancel()
    audio_seconds = sum(len(r.lateness) for r in results) * FRAME
    out = RunResult({name: [] for name in INTERVALS}, [], 0, (time.process_time() - cpu) / audio_seconds)
    for result in results:
        out.lateness.extend(late * 1000 for late in result.lateness)
        turns = sum(1 for r in result.timeline if r.at(E.USER_TURN_ENDED) is not None)
        barge_ins = sum(1 for r in result.timeline if r.at(E.BARGE_IN) is not None)
        out.misshapen += (turns, barge_ins) != (EXPECTED_TURNS, EXPECTED_BARGE_INS)
        for record in result.timeline:
            for name, (a, b, _) in INTERVALS.items():
                d = record.between(a, b)
                if d is not None:
                    out.intervals[name].append(d * 1000)
    return out


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, nargs="+", default=[1, 50, 100])
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    args = parser.parse_args()
    if args.loop == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    logging.disable(logging.WARNING)
    print(f"loop={args.loop}; milliseconds, p50 / p95 over every turn of every call")
    for calls in args.calls:
        result = asyncio.run(run(calls))
        late95 = pct(result.lateness, 0.95)
        valid = late95 <= FRAME * 1000 and result.misshapen == 0
        print(f"\n{calls} concurrent call(s): {'valid' if valid else 'OVERLOADED'}")
        print(
            f"  caller frames late              p50 {statistics.median(result.lateness):7.3f}  p95 {late95:7.3f}"
            f"  max {max(result.lateness):7.1f}"
        )
        print(f"  calls not shaped 2 turns + 1 barge-in: {result.misshapen} of {calls}")
        print(f"  CPU per call-second of audio: {result.cpu_per_call_second * 1000:.1f} ms (callers and mocks included)")
        for name, (_, _, budget) in INTERVALS.items():
            values = result.intervals[name]
            verdict = "" if budget is None else ("  ok" if pct(values, 0.95) <= budget else f"  OVER {budget} ms")
            print(
                f"  {name:32s} p50 {statistics.median(values) if values else float('nan'):7.3f}"
                f"  p95 {pct(values, 0.95):7.3f}  (n={len(values)}){verdict}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
