"""How long a user's keyless agent test takes: 100 scripted turns through brisvox.testing.

    python bench/agent_test_turns.py

Prints the median real time of 100 turns (text mode, virtual time) over 5 runs, and the
call time they covered (the ratio is how much faster than a real call the test runs).
"""

from __future__ import annotations

import statistics

import brisvox
from brisvox.core.clock import monotonic_ns
from brisvox.testing import AgentTest, virtual_time


@brisvox.tool.read_only
async def opening_hours() -> str:
    """When the restaurant is open."""
    return "18:00 to 23:00"


AGENT = brisvox.Agent(name="host", prompt="You book tables.", tools=[opening_hours])
call_time: list[float] = []


@virtual_time
async def hundred_turns() -> None:
    async with AgentTest(AGENT, llm=[f"Reply number {i}." for i in range(100)]) as test:
        for i in range(100):
            await test.user_says(f"message {i}")
        call_time.append(test.clock.now())


def main() -> None:
    times = []
    for _ in range(5):
        start = monotonic_ns()
        hundred_turns()
        times.append((monotonic_ns() - start) / 1e9)
    median = statistics.median(times)
    print(f"100 turns: median {median * 1000:.0f} ms real for {call_time[-1]:.1f} s of call time "
          f"({call_time[-1] / median:.0f}x real time)")


if __name__ == "__main__":
    main()
