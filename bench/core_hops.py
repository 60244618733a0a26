"""Cost per frame through a chain of pass-through processors: brisvox against Pipecat.

Both run in the same process, on the same event loop implementation, with the same frame
count: N text frames are queued at the head and the clock stops when the sink at the tail
has seen the last one.  The per-hop cost is (t(5) - t(1)) / 4: the difference between a
5-processor and a 1-processor chain, so the fixed cost of the sink, the edges and the feeding
loop is not charged to the hops.

    python bench/core_hops.py                 # standard asyncio loop
    python bench/core_hops.py --loop uvloop   # uvloop
    python bench/core_hops.py --frames 20000 --repeats 7

Pipecat (pipecat-ai==1.14.0) is installed by the ``bench`` extra only.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import logging
import statistics
import sys
from collections.abc import Callable, Coroutine
from typing import Any

from brisvox.core.clock import SystemClock, monotonic_ns
from brisvox.core.frames import Direction, Frame, LlmTextFrame
from brisvox.core.inbox import PutOutcome, QueueConfig
from brisvox.core.pipeline import Links, Pipeline
from brisvox.core.processor import Processor

HOPS = 5


class _Pass(Processor):
    pass


class _Sink:
    def __init__(self, n: int) -> None:
        self.n = n
        self.seen = 0
        self.done = asyncio.Event()

    async def put(self, frame: Frame, direction: Direction) -> PutOutcome:
        if isinstance(frame, LlmTextFrame):
            self.seen += 1
            if self.seen == self.n:
                self.done.set()
        return PutOutcome.QUEUED


async def brisvox_run(hops: int, n: int) -> float:
    """Seconds to push n frames through ``hops`` pass-through processors."""
    sink = _Sink(n)
    pipeline = Pipeline("bench")
    for _ in range(max(hops, 1)):
        pipeline.then(_Pass())
    running = pipeline.start(SystemClock(), Links(downstream=sink), QueueConfig(data=32))
    frames = [LlmTextFrame(epoch=0, text="x") for _ in range(n)]
    start = monotonic_ns()
    for frame in frames:
        await running.send(frame)
    await sink.done.wait()
    elapsed = (monotonic_ns() - start) / 1e9
    await running.aclose()
    return elapsed


async def pipecat_run(hops: int, n: int) -> float:
    from pipecat.frames.frames import TextFrame
    from pipecat.pipeline.pipeline import Pipeline as PcPipeline
    from pipecat.pipeline.runner import PipelineRunner
    from pipecat.pipeline.task import PipelineTask
    from pipecat.processors.frame_processor import FrameDirection, FrameProcessor

    class Pass(FrameProcessor):  # type: ignore[misc]
        async def process_frame(self, frame: Any, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            await self.push_frame(frame, direction)

    done = asyncio.Event()

    class Sink(FrameProcessor):  # type: ignore[misc]
        seen = 0

        async def process_frame(self, frame: Any, direction: FrameDirection) -> None:
            await super().process_frame(frame, direction)
            if isinstance(frame, TextFrame):
                Sink.seen += 1
                if Sink.seen == n:
                    done.set()
            await self.push_frame(frame, direction)

    processors = [Pass() for _ in range(max(hops, 1))] + [Sink()]
    task = PipelineTask(
        PcPipeline(processors),
        enable_rtvi=False,
        enable_turn_tracking=False,
        idle_timeout_secs=None,
        check_dangling_tasks=False,
    )
    runner = PipelineRunner(handle_sigint=False)
    run = asyncio.create_task(runner.run(task))
    await asyncio.sleep(0.2)  # let the pipeline start
    frames = [TextFrame(text="x") for _ in range(n)]
    start = monotonic_ns()
    await task.queue_frames(frames)
    await done.wait()
    elapsed = (monotonic_ns() - start) / 1e9
    await task.cancel()
    await run
    return elapsed


def median_run(fn: Callable[[int, int], Coroutine[Any, Any, float]], hops: int, n: int, repeats: int) -> float:
    async def many() -> list[float]:
        await fn(hops, min(n, 500))  # warm-up
        out = []
        for _ in range(repeats):
            gc.collect()
            out.append(await fn(hops, n))
        return out

    return statistics.median(asyncio.run(many()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--frames", type=int, default=10000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--loop", choices=["asyncio", "uvloop"], default="asyncio")
    parser.add_argument("--only", choices=["brisvox", "pipecat"], default=None)
    args = parser.parse_args()
    if args.loop == "uvloop":
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    logging.disable(logging.CRITICAL)
    try:
        from loguru import logger

        logger.remove()
    except ImportError:
        pass

    n = args.frames
    print(f"loop={args.loop} frames={n} repeats={args.repeats} chain={HOPS} pass-through processors")
    results: dict[str, tuple[float, float]] = {}
    for name, fn in (("brisvox", brisvox_run), ("pipecat", pipecat_run)):
        if args.only and args.only != name:
            continue
        chain = median_run(fn, HOPS, n, args.repeats)
        one = median_run(fn, 1, n, args.repeats)
        per_frame_us = chain / n * 1e6
        per_hop_us = (chain - one) / (HOPS - 1) / n * 1e6
        results[name] = (per_frame_us, per_hop_us)
        print(f"{name:8s} {per_frame_us:8.2f} us/frame through {HOPS}   {per_hop_us:7.2f} us/hop")
    if len(results) == 2:
        ratio_frame = results["brisvox"][0] / results["pipecat"][0]
        ratio_hop = results["brisvox"][1] / results["pipecat"][1]
        print(f"ratio brisvox/pipecat: {ratio_frame:.3f} per frame, {ratio_hop:.3f} per hop (aim: <= 0.25)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
