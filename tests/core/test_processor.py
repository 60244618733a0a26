"""ProcessorContext.push on a full neighbour: blocked pushes, abandoned stale pushes and wakeups."""

from __future__ import annotations

import asyncio

from brisvox.core.clock import SimClock
from brisvox.core.frames import Direction, InterruptFrame, LlmTextFrame
from brisvox.core.inbox import Inbox, QueueConfig
from brisvox.core.processor import ProcessorContext

DOWN = Direction.DOWNSTREAM


def _pusher(name: str, target: Inbox, clock: SimClock) -> ProcessorContext:
    ctx = ProcessorContext(name, clock, Inbox(name))
    ctx.downstream = (target, 0)
    return ctx


async def test_a_push_abandoned_as_stale_after_its_wakeup_lets_the_next_blocked_push_in() -> None:
    clock = SimClock()
    merge = Inbox("merge", config=QueueConfig(data=1))
    merge.try_put(LlmTextFrame(epoch=0, text="x"), DOWN)
    a, b = _pusher("a", merge, clock), _pusher("b", merge, clock)
    push_a = asyncio.ensure_future(a.push(LlmTextFrame(epoch=0, text="from a")))
    push_b = asyncio.ensure_future(b.push(LlmTextFrame(epoch=0, text="from b")))
    await asyncio.wait({push_a, push_b}, timeout=0.01)  # both wait for room
    assert merge.get_nowait() is not None  # one slot: a's wait is woken ...
    a.inbox.try_put(InterruptFrame(new_epoch=1), DOWN)  # ... as its frame goes stale
    done, _ = await asyncio.wait({push_a, push_b}, timeout=1.0)
    for task in (push_a, push_b):
        if not task.done():
            task.cancel()
    await asyncio.gather(push_a, push_b, return_exceptions=True)
    assert done == {push_a, push_b}
    assert push_a.result() is False and a.stats.abandoned_pushes == 1
    assert push_b.result() is True
    item = merge.get_nowait()
    assert item is not None and isinstance(item[0], LlmTextFrame) and item[0].text == "from b"
