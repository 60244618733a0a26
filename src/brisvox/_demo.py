"""``brisvox demo``: the local demonstration that ``make demo`` starts.

Until the server lands this runs what exists for real: a call-shaped frame pipeline on
virtual time.  A "bot" stage streams reply text at 20 ms per word, the caller barges in
halfway, and the demo prints what reached the end of the pipeline, showing that no
frame of the interrupted turn arrives after the interrupt.
"""

from __future__ import annotations

from brisvox.core.clock import SimClock, run_virtual
from brisvox.core.frames import Direction, Frame, InterruptFrame, LlmTextFrame, StopFrame
from brisvox.core.inbox import PutOutcome
from brisvox.core.pipeline import Links, Pipeline
from brisvox.core.processor import Processor, ProcessorContext

REPLY = "Sure, I can book a table for four at eight tonight; would you like a window seat?"


class _Speaker(Processor):
    """Turns a request into reply words, one every 20 ms of (virtual) time."""

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        if isinstance(frame, LlmTextFrame) and frame.text == "request":
            for word in REPLY.split():
                if not await ctx.push(LlmTextFrame(epoch=frame.epoch, text=word)):
                    return  # interrupted: the rest of the reply is stale
                await ctx.clock.sleep(0.02)
            return
        await ctx.push(frame, direction)


class _Caller:
    def __init__(self, clock: SimClock) -> None:
        self.clock = clock
        self.lines: list[str] = []

    async def put(self, frame: Frame, direction: Direction) -> PutOutcome:
        t = self.clock.now()
        if isinstance(frame, LlmTextFrame):
            self.lines.append(f"{t * 1000:7.0f} ms  epoch {frame.epoch}  heard: {frame.text}")
        elif isinstance(frame, InterruptFrame | StopFrame):
            self.lines.append(f"{t * 1000:7.0f} ms  {type(frame).__name__}")
        return PutOutcome.QUEUED


async def _call() -> list[str]:
    clock = SimClock()
    caller = _Caller(clock)
    pipeline = Pipeline("demo")
    for _ in range(3):
        pipeline.then(Processor())
    pipeline.then(_Speaker())
    running = pipeline.start(clock, Links(downstream=caller))
    await running.send(LlmTextFrame(epoch=0, text="request"))
    await clock.sleep(0.15)
    await running.send(InterruptFrame(new_epoch=1))  # the caller barges in
    await clock.sleep(0.1)
    await running.stop(timeout=1.0)
    return caller.lines


def run_demo() -> int:
    print("brisvox demo (frame runtime only: the voice server has not landed yet)")
    print("A bot streams a reply word by word; the caller barges in at 150 ms.\n")
    for line in run_virtual(_call):
        print(line)
    print("\nNothing from epoch 0 arrives after the interrupt.")
    return 0
