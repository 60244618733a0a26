"""How deep the audio path is: queues, tasks and representations per frame, from one running call.

Runs one call of ``engine_latency.py``'s scenario (a question, an answer, a barge-in; mock
providers on the real clock, the loopback transport with no wire delay) with three
instruments and prints what they saw:

* every task created while the call ran, by name (``asyncio`` task factory);
* every item queued, by queue and item type: ``Channel`` pushes, pipeline ``Inbox`` puts
  (refused ``FULL`` attempts are not counted) and ``OutputPacer`` pushes;
* per direction, how many queue hops one frame takes: caller audio (the wire's
  ``WireAudio`` frames) and bot audio (the TTS provider's audio chunks), the queues each
  kind of item went through divided by the frames of that direction.

    python bench/audio_hops.py
"""

from __future__ import annotations

import asyncio
import collections
import logging
import sys
from collections.abc import Coroutine, Generator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import engine_latency as el
from brisvox.audio.pacer import OutputPacer
from brisvox.core.channel import Channel
from brisvox.core.clock import SystemClock
from brisvox.core.inbox import Inbox, PutOutcome
from brisvox.core.tasks import TaskScope
from brisvox.transport import LoopbackConfig, LoopbackTransport

Counts = collections.Counter[tuple[str, str]]


def _kind(item: object) -> str:
    if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], int):
        item = item[1]  # the session's commands channel queues (epoch, command)
    return type(item).__name__


def instrument(counts: Counts) -> None:
    """Count every item queued, keyed by (queue, item type)."""
    channel_push = Channel._push
    inbox_put = Inbox.try_put
    pacer_push = OutputPacer.push

    def push(self: Channel[Any], item: Any, pol: Any) -> None:
        counts[(f"channel {self._name}", _kind(item))] += 1
        channel_push(self, item, pol)

    def try_put(self: Inbox, frame: Any, direction: Any, source: int = 0) -> PutOutcome:
        outcome = inbox_put(self, frame, direction, source)
        if outcome is not PutOutcome.FULL:
            counts[(f"inbox {self.name}", _kind(frame))] += 1
        return outcome

    async def pacer(self: OutputPacer[Any], frame: Any) -> None:
        await pacer_push(self, frame)
        counts[("pacer", _kind(frame))] += 1

    Channel._push = push  # type: ignore[method-assign]
    Inbox.try_put = try_put  # type: ignore[method-assign]
    OutputPacer.push = pacer  # type: ignore[method-assign]


async def measure() -> tuple[Counts, list[asyncio.Task[Any]]]:
    counts: Counts = collections.Counter()
    clock = SystemClock()
    feeder = el.Feeder(clock)
    async with LoopbackTransport(clock, LoopbackConfig(latency=0.0)) as transport, TaskScope("feeder") as scope:
        scope.spawn(feeder.run(), name="feeder")
        created: list[asyncio.Task[Any]] = []
        loop = asyncio.get_running_loop()

        def factory(loop: asyncio.AbstractEventLoop,
                    coro: Generator[Any, None, Any] | Coroutine[Any, Any, Any], **kw: Any) -> asyncio.Task[Any]:
            task: asyncio.Task[Any] = asyncio.Task(coro, loop=loop, **kw)
            created.append(task)
            return task

        instrument(counts)
        loop.set_task_factory(factory)
        await el.one_call(clock, transport, feeder, 0)
        loop.set_task_factory(None)
        scope.cancel()
    return counts, created


def main() -> int:
    logging.disable(logging.WARNING)
    counts, created = asyncio.run(measure())
    names = collections.Counter(t.get_name() for t in created)
    print(f"tasks created during the call: {len(created)}")
    for name, n in sorted(names.items()):
        print(f"  {n:3d}  {name}")
    print("\nitems queued during the call (queue, item type: count):")
    for (queue, kind), n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        print(f"  {n:6d}  {queue:40s} {kind}")
    caller = sum(n for (q, k), n in counts.items() if k == "WireAudio")
    print(f"\ncaller frames (WireAudio): {caller}")
    for (queue, kind), n in sorted(counts.items()):
        if kind in ("WireAudio", "InputAudioFrame", "CallerAudio") and caller:
            print(f"  {n / caller:5.2f} per caller frame  {queue} ({kind})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
