"""CPU per call-second with call recording (``[record]``) on vs off, concurrent calls, same run.

Each call is the recorded call of ``tests/recording/_calls.py`` through the server's session
runner (``engine_runner``) over a loopback transport: 9.8 s of caller audio, two turns, a tool
call and a barge-in, mock providers, on virtual time (the CPU is the engine's, the taps' and
the writer's own, gzip in its worker thread included; no waiting).  A round runs ``--calls``
calls at once on one virtual-time loop, recording off or on (files in a temporary
directory).  Rounds alternate off/on; the script prints the median CPU seconds per
call-second of each, their ratio and the bytes written per call-second.

    python bench/recording.py [--calls 50] [--rounds 5]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repo root: tests.recording._calls

from tests.recording._calls import lookup_tools, recorded_call, recording_agent, recordings

from brisvox.core.clock import VirtualTimeLoop

CALL_SECONDS = 9.8


def round_(calls: int, record: bool) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        agent = recording_agent(Path(tmp), keep=100_000, record=record)
        tools = lookup_tools()

        async def main() -> None:
            await asyncio.gather(*(recorded_call(agent, tools) for _ in range(calls)))

        loop = VirtualTimeLoop(max_time=86_400.0)
        cpu = time.process_time()
        try:
            loop.run_until_complete(main())
        finally:
            loop.close()
        cpu = time.process_time() - cpu
        written = sum(p.stat().st_size for p in recordings(Path(tmp)))
    return cpu / (calls * CALL_SECONDS), written / (calls * CALL_SECONDS)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    off: list[float] = []
    on: list[float] = []
    rate = 0.0
    for _ in range(args.rounds):
        off.append(round_(args.calls, False)[0])
        cost, rate = round_(args.calls, True)
        on.append(cost)
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(f"{args.calls} calls x {args.rounds} rounds ({CALL_SECONDS} s each: two turns, a tool call, a barge-in)")
    print(f"recording off: {m_off * 1000:.2f} ms CPU per call-second (median)")
    print(f"recording on:  {m_on * 1000:.2f} ms CPU per call-second (median), {rate / 1000:.1f} kB written per "
          "call-second")
    print(f"on / off: {m_on / m_off:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
