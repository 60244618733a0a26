"""The pacing-tick lever: the CPU of pacing many calls' bot audio, each pacer on its own
timer against one :class:`~brisvox.audio.pacer.PaceTicker` for all of them.

``--calls`` output pacers in one process (the server's own clock and loop), each given
``--seconds`` of 20 ms frames at once (as a TTS that runs ahead of real time does), release
them in real time into a sink that counts them (the transport session's sink channel in
the server; here nothing behind it, so the number is the pacing alone).  The process's CPU
time (user + sys) over the run, per call-second of paced audio, and the loop's wake-ups for
pacing.  Modes alternate within one run (``--rounds``), so a shared machine loads both alike:

    taskset -c 0 python bench/density/tick_lever.py --calls 60
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
from dataclasses import dataclass

from brisvox.audio.pacer import TICK_WINDOW, OutputPacer, PaceTicker
from brisvox.core.clock import SystemClock


@dataclass(frozen=True, slots=True)
class Frame:
    epoch: int
    duration: float = 0.02


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


async def _round(calls: int, seconds: float, ticked: bool, window: float) -> tuple[float, int, int]:
    clock = SystemClock()
    ticker = PaceTicker(clock, window=window) if ticked else None
    frames = round(seconds / 0.02)
    released = [0]
    all_out = asyncio.Event()

    def count() -> None:
        released[0] += 1
        if released[0] == calls * frames:
            all_out.set()

    async def sink(_: Frame) -> None:
        count()

    def try_sink(_: Frame) -> bool:
        count()
        return True

    pacers = [OutputPacer(clock, sink, capacity=frames, ticker=ticker, try_sink=try_sink if ticked else None)
              for _ in range(calls)]
    loop = asyncio.get_running_loop()
    tasks = [loop.create_task(p.run()) for p in pacers]
    await asyncio.sleep(0.05)
    cpu0 = _cpu()
    for i, p in enumerate(pacers):  # the calls' replies start spread over one frame
        for _ in range(frames):
            await p.push(Frame(0))
        if i % 3 == 2:
            await asyncio.sleep(0.001)
    await all_out.wait()
    cpu = _cpu() - cpu0
    for p in pacers:
        p.close()
    await asyncio.gather(*tasks, return_exceptions=True)
    wakeups = ticker.wakeups if ticker is not None else calls * (frames - 1)
    return cpu * 1000 / (calls * seconds), wakeups, released[0]


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--seconds", type=float, default=4.0, help="audio per call per round")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--window", type=float, default=TICK_WINDOW)
    args = ap.parse_args()
    results: dict[str, list[float]] = {"per-call timer": [], "one ticker": []}
    wakes: dict[str, int] = {}
    for _ in range(args.rounds):
        for name, ticked in (("per-call timer", False), ("one ticker", True)):
            ms, wakeups, _ = await _round(args.calls, args.seconds, ticked, args.window)
            results[name].append(ms)
            wakes[name] = round(wakeups / args.seconds)
    print(f"{args.calls} calls, {args.seconds:g} s of audio each, {args.rounds} rounds, window {args.window * 1000:g} ms")
    for name, values in results.items():
        print(f"{name:>15}: CPU ms per call-second median {statistics.median(values):.3f} "
              f"({', '.join(f'{v:.3f}' for v in values)}); pacing wake-ups per second {wakes[name]}")


if __name__ == "__main__":
    asyncio.run(main())
