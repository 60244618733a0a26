"""How long a user's keyless agent test takes: 100 scripted turns through brisvox.testing.

    python bench/agent_test_turns.py

Prints the median real time of 100 turns (text mode, virtual time) over 5 runs, and the
call time they covered (the ratio is how much faster than a real call the test runs);
then the same for 20 turns in audio mode (the caller's line sends 20 ms frames through
the VAD to the mock STT), whose cost follows the call time, not the turn count.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

import brisvox
from brisvox.core.clock import monotonic_ns
from brisvox.testing import AgentTest, virtual_time


@brisvox.tool.read_only
async def opening_hours() -> str:
    """When the restaurant is open."""
    return "18:00 to 23:00"


AGENT = brisvox.Agent(name="host", prompt="You book tables.", tools=[opening_hours])
call_time: list[float] = []


def turns(n: int, audio: bool) -> Callable[[], None]:
    @virtual_time
    async def run() -> None:
        async with AgentTest(AGENT, llm=[f"Reply number {i}." for i in range(n)], audio=audio) as test:
            for i in range(n):
                await test.user_says(f"message number {i}")
            call_time.append(test.clock.now())

    return run


def measure(label: str, run: Callable[[], None]) -> None:
    times = []
    for _ in range(5):
        start = monotonic_ns()
        run()
        times.append((monotonic_ns() - start) / 1e9)
    median = statistics.median(times)
    print(f"{label}: median {median * 1000:.0f} ms real for {call_time[-1]:.1f} s of call time "
          f"({call_time[-1] / median:.0f}x real time)")


def main() -> None:
    measure("100 turns, text", turns(100, audio=False))
    measure("20 turns, audio", turns(20, audio=True))


if __name__ == "__main__":
    main()
