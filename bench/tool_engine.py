"""Overhead of one tool round through the engine (planning, tasks, timeout race, results).

The tools return at once, so what is measured is the engine: ``execute`` of one ReadOnly
call, of four ReadOnly calls, and of one SideEffect call (its own task, the idempotency
store, the result channel), on the standard asyncio loop or uvloop.

    python bench/tool_engine.py [--loop asyncio|uvloop] [--repeats 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from typing import Any

from brisvox.agent.context import ToolCall
from brisvox.agent.tools import CancelToken, ToolCallContext, ToolEngine, ToolKind, ToolRegistry, ToolSpec
from brisvox.core.clock import SystemClock, monotonic_ns


async def _fast(args: dict[str, Any], ctx: ToolCallContext) -> dict[str, Any]:
    return {"ok": True}


async def _measure(repeats: int) -> dict[str, float]:
    reg = ToolRegistry()
    params = {"type": "object", "properties": {"q": {"type": "string"}}}
    reg.register(ToolSpec(name="look", description="look", parameters=params), _fast)
    reg.register(ToolSpec(name="book", description="book", parameters=params, kind=ToolKind.SIDE_EFFECT), _fast)
    out: dict[str, float] = {}
    async with ToolEngine(reg, "bench", SystemClock()) as engine:
        cases = {
            "1 ReadOnly call": lambda i: [ToolCall(id=f"t{i}.0", name="look", arguments={"q": "x"})],
            "4 ReadOnly calls": lambda i: [ToolCall(id=f"t{i}.{k}", name="look", arguments={"q": "x"}) for k in range(4)],
            "1 SideEffect call": lambda i: [ToolCall(id=f"t{i}.0", name="book", arguments={"q": str(i)})],
        }
        epoch = 0
        for label, make in cases.items():
            samples = []
            for n in range(repeats + 100):
                epoch += 1
                calls = make(epoch)
                t0 = monotonic_ns()
                ex = await engine.execute(calls, epoch, CancelToken())
                dt = monotonic_ns() - t0
                ex.mark_delivered()
                if n >= 100:
                    samples.append(dt)
            out[label] = statistics.median(samples) / 1000.0
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    parser.add_argument("--repeats", type=int, default=2000)
    args = parser.parse_args()
    if args.loop == "uvloop":
        import uvloop

        result = uvloop.run(_measure(args.repeats))
    else:
        result = asyncio.run(_measure(args.repeats))
    print(f"engine execute, tools that return at once ({args.loop}), median of {args.repeats}:")
    for label, us in result.items():
        print(f"  {label:18s} {us:8.1f} us")


if __name__ == "__main__":
    main()
