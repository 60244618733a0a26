"""The driver of the on/off CPU benchmarks (bench/tracing.py, bench/recording.py).

A round runs ``--calls`` simulated calls at once on one virtual-time loop (the CPU is the
calls' own: no waiting) with the feature off or on; rounds alternate off/on, and the script
prints the median CPU seconds per call-second of each and their ratio.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

from brisvox.core.clock import VirtualTimeLoop

T = TypeVar("T")

Round = Callable[[int, bool], tuple[float, str]]
"""One round: ``(calls, on)`` -> (CPU seconds per call-second, a note on the round when on)."""


def cpu_seconds(main: Callable[[], Awaitable[T]], after: Callable[[], None] | None = None) -> tuple[float, T]:
    """CPU seconds to run ``main()`` on a fresh virtual-time loop (and ``after()``, counted too), and its result."""
    loop = VirtualTimeLoop(max_time=86_400.0)
    cpu = time.process_time()
    try:
        result = loop.run_until_complete(main())
    finally:
        loop.close()
    if after is not None:
        after()
    return time.process_time() - cpu, result


def on_off(doc: str, feature: str, calls_are: str, round_: Round) -> int:
    """Parse ``--calls`` and ``--rounds``, run the rounds alternating off/on, print the medians."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    off: list[float] = []
    on: list[float] = []
    note = ""
    for _ in range(args.rounds):
        off.append(round_(args.calls, False)[0])
        cost, note = round_(args.calls, True)
        on.append(cost)
    m_off, m_on = statistics.median(off), statistics.median(on)
    print(f"{args.calls} calls x {args.rounds} rounds ({calls_are})")
    print(f"{feature} off: {m_off * 1000:.2f} ms CPU per call-second (median)")
    print(f"{feature} on:  {m_on * 1000:.2f} ms CPU per call-second (median){note}")
    print(f"on / off: {m_on / m_off:.3f}")
    return 0
