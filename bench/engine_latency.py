"""The engine's own overhead per turn, at 1, 50 and 100 concurrent calls in one process.

Each call is a simulated caller over the loopback transport with mock providers of fixed
latency (STT final 50 ms after a stop, LLM first token 200 ms, TTS first audio 80 ms),
on the real clock, the calls staggered by 37 ms (mod 2 s).  The caller asks a question, the bot answers, the caller barges in.
From each call's own timeline (brisvox.core.timeline) the script takes four engine
intervals and prints p50 and p95 over all calls:

* turn end -> LLM request   (budget 3 ms at p95)
* first TTS audio -> audio handed to the transport   (budget 2 ms)
* barge-in decision -> Clear applied   (budget 1 ms)
* first LLM token -> first text sent to TTS

    python bench/engine_latency.py [--calls 1 50 100]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import statistics
import sys

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
from brisvox.transport import LoopbackTransport, TransportSession

RATE = 16000
ANSWER = "We have tables at six, seven and eight tonight, and the terrace is open for larger groups too."
INTERVALS = {
    "turn end -> LLM request": (E.USER_TURN_ENDED, E.LLM_REQUEST, 3.0),
    "first TTS audio -> transport": (E.FIRST_TTS_AUDIO, E.FIRST_AUDIO_SENT, 2.0),
    "barge-in -> Clear applied": (E.BARGE_IN, E.CLEAR_APPLIED, 1.0),
    "first token -> first TTS text": (E.LLM_FIRST_TOKEN, E.FIRST_TTS_TEXT, None),
}


async def one_call(clock: SystemClock, transport: LoopbackTransport, n: int) -> tuple[TurnRecord, ...]:
    scenario = (
        ScenarioBuilder().pause(0.3).say("what tables do you have tonight").pause(1.6).say("seven").pause(1.5).build()
    )
    providers = Providers(
        stt=MockStt.for_scenario(clock, scenario),
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

        reader = scope.spawn(drain(), name="reader")
        # Calls start 37 ms apart (mod 2 s), so turn ends do not all land in the same tick.
        start = clock.now() + (n * 0.037) % 2.0
        for i, pcm in enumerate(scenario.frames(0.02)):
            await clock.sleep_until(start + i * 0.02)
            await client.send_audio(pcm, RATE)
        await client.hangup()
        report = await call
        reader.cancel()
    return report.timeline


async def run(calls: int) -> dict[str, list[float]]:
    clock = SystemClock()
    async with LoopbackTransport(clock) as transport:
        records = await asyncio.gather(*(one_call(clock, transport, i) for i in range(calls)))
    out: dict[str, list[float]] = {name: [] for name in INTERVALS}
    for timeline in records:
        for record in timeline:
            for name, (a, b, _) in INTERVALS.items():
                d = record.between(a, b)
                if d is not None:
                    out[name].append(d * 1000)
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
        print(f"\n{calls} concurrent call(s):")
        for name, (_, _, budget) in INTERVALS.items():
            values = result[name]
            verdict = "" if budget is None else ("  ok" if pct(values, 0.95) <= budget else f"  OVER {budget} ms")
            print(
                f"  {name:32s} p50 {statistics.median(values) if values else float('nan'):7.3f}"
                f"  p95 {pct(values, 0.95):7.3f}  (n={len(values)}){verdict}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
