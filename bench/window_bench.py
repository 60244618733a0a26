"""Cost of the long-call window per LLM request, over a one-hour call.

A 360-turn call (15 caller words, 40 agent words, a tool call every tenth turn) is built
once.  For a few call lengths the summary is first brought up to date (an instant
summarizer), then the script times ``build_window`` alone and ``needs_summary`` +
``build_window`` (what a runner does per request when the summary is current), and prints
the medians in microseconds.

    python bench/window_bench.py
    python bench/window_bench.py --repeats 200
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics

from brisvox.agent.context import (
    AssistantMessage,
    CharsPerToken,
    Context,
    SystemMessage,
    ToolCall,
    ToolMessage,
)
from brisvox.agent.window import (
    Summary,
    SummaryRequest,
    WindowPolicy,
    build_window,
    needs_summary,
    refresh_summary,
)
from brisvox.core.clock import monotonic_ns

WORDS = [
    "table",
    "tonight",
    "seven",
    "people",
    "window",
    "quiet",
    "garden",
    "birthday",
    "menu",
    "vegetarian",
    "parking",
    "please",
]


def _call(turns: int) -> Context:
    rng = random.Random(1)
    ctx = Context([SystemMessage(text="You are the booking assistant of a small restaurant.")])
    for i in range(turns):
        ctx.push_user(" ".join(rng.choice(WORDS) for _ in range(15)))
        if i % 10 == 9:
            call = ToolCall(id=f"t{i}.0", name="check_availability", arguments={"date": "2026-12-24"})
            ctx.push(AssistantMessage(tool_calls=(call,)))
            ctx.push(ToolMessage(call_id=call.id, content='{"free": true}'))
        ctx.push_assistant(" ".join(rng.choice(WORDS) for _ in range(40)))
    return ctx


class _Instant:
    async def summarize(self, request: SummaryRequest) -> str:
        return "The caller asked about tables for a party of four."


def _median_us(fn: object, repeats: int) -> float:
    samples = []
    for _ in range(repeats):
        t0 = monotonic_ns()
        fn()  # type: ignore[operator]
        samples.append((monotonic_ns() - t0) / 1000)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=100)
    args = parser.parse_args()
    est = CharsPerToken()
    print(f"{'turns':>6} {'policy':>18} {'build_window us':>16} {'needs+build us':>15}")
    for turns in (10, 90, 360):
        ctx = _call(turns)
        for name, policy in (
            ("4000 / 8 turns", WindowPolicy(max_tokens=4000, keep_recent_turns=8)),
            ("4000 / budget", WindowPolicy(max_tokens=4000, keep_recent_turns=100_000)),
            ("1200 / 8 turns", WindowPolicy(max_tokens=1200, keep_recent_turns=8)),
        ):
            summary = asyncio.run(refresh_summary(ctx, policy, est, None, _Instant()))

            def build(
                ctx: Context = ctx, policy: WindowPolicy = policy, summary: Summary | None = summary
            ) -> None:
                build_window(ctx, policy, est, summary)

            def both(
                ctx: Context = ctx, policy: WindowPolicy = policy, summary: Summary | None = summary
            ) -> None:
                needs_summary(ctx, policy, est, summary)
                build_window(ctx, policy, est, summary)

            print(
                f"{turns:>6} {name:>18} {_median_us(build, args.repeats):>16.0f} {_median_us(both, args.repeats):>15.0f}"
            )


if __name__ == "__main__":
    main()
