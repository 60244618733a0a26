"""Pipelines: a chain of processors (and parallel blocks), started as one task per unit.

    running = Pipeline("call").then(a).then_pipeline(inner).then_parallel([b1, b2]).start(clock, links)

Nested pipelines are flattened when the pipeline starts, so nesting adds no hop and no
task.  ``start`` creates one inbox and one task per processor (plus a fan-out and a
merge per parallel block), links neighbours both ways, connects the edges to ``Links``
and sends Start downstream.

Stopping: ``stop(timeout)`` sends Stop downstream; each task handles what is already
queued, forwards Stop and ends, so upstream stages finish first.  On expiry the pipeline
is cancelled and :class:`StopTimeout` (or the root-cause failure) is raised.  ``cancel``
ends every task at once.  The first processor to raise fails the whole pipeline (and only
it): the rest are cancelled and ``wait`` raises :class:`ProcessorFailed` naming that stage;
a neighbour's ``ChannelClosed`` is secondary and never reported as the cause.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

from brisvox.core.clock import Clock, deadline
from brisvox.core.errors import ChannelClosed, DeadlineExceeded, PipelineError, ProcessorFailed, StopTimeout
from brisvox.core.frames import Direction, Frame, StartFrame, StopFrame
from brisvox.core.inbox import Inbox, PutOutcome, QueueConfig
from brisvox.core.parallel import MAX_BRANCHES, BroadcastLedger, run_fan_unit
from brisvox.core.processor import (
    ALL_LAYERS,
    EpochLayers,
    FrameSink,
    Processor,
    ProcessorContext,
    ProcessorStats,
    run_processor,
)
from brisvox.core.tasks import TaskScope

__all__ = ["Links", "Pipeline", "RunningPipeline"]


@dataclass(frozen=True, slots=True)
class Links:
    """Where frames leaving the pipeline's edges go (None drops them)."""

    downstream: FrameSink | None = None
    upstream: FrameSink | None = None


@dataclass(slots=True)
class _Parallel:
    branches: list[list[_Node]]


_Node = Processor | _Parallel


class Pipeline:
    """A builder: an ordered list of processors, nested pipelines and parallel blocks."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._items: list[Processor | Pipeline | _ParallelSpec] = []

    def then(self, processor: Processor) -> Pipeline:
        if not isinstance(processor, Processor):
            raise PipelineError(f"pipeline {self.name!r}: then() takes a Processor, got {type(processor).__name__}")
        self._items.append(processor)
        return self

    def then_pipeline(self, inner: Pipeline) -> Pipeline:
        if inner is self:
            raise PipelineError(f"pipeline {self.name!r} cannot contain itself")
        self._items.append(inner)
        return self

    def then_parallel(self, branches: Sequence[Pipeline]) -> Pipeline:
        if not branches:
            raise PipelineError(f"pipeline {self.name!r}: a parallel block needs at least one branch")
        if len(branches) > MAX_BRANCHES:
            raise PipelineError(
                f"pipeline {self.name!r}: a parallel block holds at most {MAX_BRANCHES} branches, got {len(branches)}"
            )
        self._items.append(_ParallelSpec(list(branches)))
        return self

    def flatten(self) -> list[_Node]:
        """The units this pipeline starts: nested pipelines inlined, empty nested ones skipped."""
        nodes: list[_Node] = []
        for item in self._items:
            if isinstance(item, Processor):
                nodes.append(item)
            elif isinstance(item, Pipeline):
                nodes.extend(item.flatten())
            else:
                flat = []
                for i, branch in enumerate(item.branches):
                    units = branch.flatten()
                    if not units:
                        raise PipelineError(f"pipeline {self.name!r}: parallel branch {i} ({branch.name!r}) is empty")
                    flat.append(units)
                nodes.append(_Parallel(flat))
        return nodes

    def start(
        self,
        clock: Clock,
        links: Links | None = None,
        queue: QueueConfig | None = None,
        *,
        layers: EpochLayers = ALL_LAYERS,
    ) -> RunningPipeline:
        """Start every unit as a task on the running loop and send Start downstream.

        ``layers`` switches the epoch layers (all on; mutation tests turn some off).
        """
        nodes = self.flatten()
        if not nodes:
            raise PipelineError(f"pipeline {self.name!r} has no processors")
        running = RunningPipeline(self.name, clock, layers)
        chain = _build_chain(running, nodes, queue, prefix=self.name)
        links = links or Links()
        if links.downstream is not None:
            chain.set_downstream((links.downstream, 0))
        if links.upstream is not None:
            chain.set_upstream((links.upstream, 0))
        running._attach(chain.head, chain.tail)
        for name, coro in chain.coros:
            running._spawn(name, coro)
        outcome = chain.head.try_put(StartFrame(), Direction.DOWNSTREAM)
        if outcome is not PutOutcome.QUEUED:
            raise PipelineError(f"pipeline {self.name!r}: could not queue Start ({outcome.value})")
        return running


@dataclass(slots=True)
class _ParallelSpec:
    branches: list[Pipeline]


@dataclass(slots=True)
class _Chain:
    head: Inbox
    tail: Inbox
    first: list[ProcessorContext]  # whose upstream is the chain's upstream neighbour
    last: list[ProcessorContext]  # whose downstream is the chain's downstream neighbour
    coros: list[tuple[str, Coroutine[Any, Any, None]]] = field(default_factory=list)

    def set_downstream(self, target: tuple[Inbox | FrameSink, int]) -> None:
        for ctx in self.last:
            ctx.downstream = target

    def set_upstream(self, target: tuple[Inbox | FrameSink, int]) -> None:
        for ctx in self.first:
            ctx.upstream = target


def _build_chain(running: RunningPipeline, nodes: list[_Node], queue: QueueConfig | None, prefix: str) -> _Chain:
    chains = [_build_unit(running, node, queue, f"{prefix}.{i}") for i, node in enumerate(nodes)]
    for a, b in itertools.pairwise(chains):
        a.set_downstream((b.head, 0))
        b.set_upstream((a.tail, 0))
    coros = [c for chain in chains for c in chain.coros]
    return _Chain(chains[0].head, chains[-1].tail, chains[0].first, chains[-1].last, coros)


def _build_unit(running: RunningPipeline, node: _Node, queue: QueueConfig | None, path: str) -> _Chain:
    if isinstance(node, Processor):
        name = node.name
        inbox = Inbox(name, queue or node.queue_config, node.overflow)
        ctx = ProcessorContext(name, running.clock, inbox, running.layers)
        running._contexts[f"{path}:{name}"] = ctx
        running._inboxes.setdefault(id(node), []).append(inbox)
        return _Chain(inbox, inbox, [ctx], [ctx], [(name, run_processor(node, ctx))])
    branches = [_build_chain(running, b, queue, f"{path}.b{i}") for i, b in enumerate(node.branches)]
    n = len(branches)
    fan = ProcessorContext(f"{path}.fanout", running.clock, Inbox(f"{path}.fanout", queue), running.layers)
    merge = ProcessorContext(f"{path}.merge", running.clock, Inbox(f"{path}.merge", queue), running.layers)
    down_ledger, up_ledger = BroadcastLedger(n), BroadcastLedger(n)
    for i, branch in enumerate(branches):
        branch.set_upstream((fan.inbox, i))
        branch.set_downstream((merge.inbox, i))
    running._contexts[fan.name] = fan
    running._contexts[merge.name] = merge
    coros = [c for b in branches for c in b.coros]
    heads: list[tuple[Inbox | FrameSink, int]] = [(b.head, 0) for b in branches]
    tails: list[tuple[Inbox | FrameSink, int]] = [(b.tail, 0) for b in branches]
    coros.append((fan.name, run_fan_unit(fan, heads, Direction.DOWNSTREAM, down_ledger, up_ledger)))
    coros.append((merge.name, run_fan_unit(merge, tails, Direction.UPSTREAM, up_ledger, down_ledger)))
    return _Chain(fan.inbox, merge.inbox, [fan], [merge], coros)


class RunningPipeline:
    """A started pipeline: feed it, stop it, cancel it, wait for it."""

    def __init__(self, name: str, clock: Clock, layers: EpochLayers = ALL_LAYERS) -> None:
        self.name = name
        self.clock = clock
        self.layers = layers
        self._scope = TaskScope(f"pipeline:{name}")
        self._contexts: dict[str, ProcessorContext] = {}
        self._inboxes: dict[int, list[Inbox]] = {}  # id(processor) -> its inbox (one per place it holds)
        self._on_end: list[Callable[[], None]] = []
        self._failure: BaseException | None = None
        self._secondary: BaseException | None = None
        self._head: Inbox | None = None
        self._tail: Inbox | None = None
        self._done = asyncio.Event()
        self._live = 0

    def _attach(self, head: Inbox, tail: Inbox) -> None:
        self._head, self._tail = head, tail

    def _spawn(self, name: str, coro: Coroutine[Any, Any, None]) -> None:
        self._live += 1
        task = self._scope.spawn(self._supervise(name, coro), name=name)

        def _task_ended(_: asyncio.Task[None]) -> None:
            coro.close()  # a task cancelled before it ran never started its coroutine
            self._live -= 1
            if self._live == 0:
                self._ended()

        task.add_done_callback(_task_ended)

    async def _supervise(self, stage: str, coro: Coroutine[Any, Any, None]) -> None:
        try:
            await coro
        except ChannelClosed as exc:
            if self._secondary is None:
                self._secondary = ProcessorFailed(stage, exc)
            self.cancel()
        except Exception as exc:
            if self._failure is None:
                self._failure = ProcessorFailed(stage, exc)
            self.cancel()

    # --- feeding ------------------------------------------------------------------------

    async def send(self, frame: Frame, direction: Direction = Direction.DOWNSTREAM) -> PutOutcome:
        """Put a frame into the head (downstream) or the tail (upstream), waiting for room."""
        target = self._head if direction is Direction.DOWNSTREAM else self._tail
        assert target is not None
        return await target.put(frame, direction)

    def try_send(self, frame: Frame, direction: Direction = Direction.DOWNSTREAM) -> PutOutcome:
        target = self._head if direction is Direction.DOWNSTREAM else self._tail
        assert target is not None
        return target.try_put(frame, direction)

    async def send_to(self, processor: Processor, frame: Frame, direction: Direction) -> PutOutcome:
        """Put a frame straight into one stage's inbox, waiting for room, as if its neighbour
        on the other side had pushed it.

        For a fact that arises outside the chain and concerns one stage only (the transport's
        playout facts for the turn driver): it skips the hops through the stages in between.
        The frame meets that stage's epoch rules on dequeue like any other.  Raises
        PipelineError when the processor is not in this pipeline exactly once, ChannelClosed
        once that stage has ended.
        """
        inboxes = self._inboxes.get(id(processor), [])
        if len(inboxes) != 1:
            raise PipelineError(
                f"pipeline {self.name!r}: send_to needs a stage it holds exactly once; "
                f"{processor.name!r} is held {len(inboxes)} times"
            )
        return await inboxes[0].put(frame, direction)

    # --- ending -------------------------------------------------------------------------

    def _ended(self) -> None:
        self._done.set()
        callbacks, self._on_end = self._on_end, []
        for callback in callbacks:
            callback()

    def on_end(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` (from the loop, once) when every task of the pipeline has ended,
        or soon when that already happened; it must not raise.  ``failure`` is final then.
        A watcher without a task of its own."""
        if self._done.is_set():
            asyncio.get_running_loop().call_soon(callback)
        else:
            self._on_end.append(callback)

    def cancel(self) -> None:
        """End every task at once (idempotent)."""
        self._scope.cancel()

    @property
    def failure(self) -> BaseException | None:
        """The root cause: the first processor error, else a secondary ChannelClosed."""
        return self._failure or self._secondary

    async def wait(self) -> None:
        """Wait for every task to end; raise the root-cause failure if there was one."""
        await self._done.wait()
        await self._scope.aclose()
        if self.failure is not None:
            raise self.failure

    async def stop(self, timeout: float = 5.0) -> None:
        """Graceful stop bounded by ``timeout``: drain in order, then end."""
        try:
            async with deadline(self.clock, timeout, "pipeline stop"):
                await self.send(StopFrame())
                await self._done.wait()
        except DeadlineExceeded:
            self.cancel()
            await self._scope.aclose()
            if self.failure is not None:
                raise self.failure from None
            raise StopTimeout(timeout) from None
        await self.wait()

    async def aclose(self) -> None:
        """Cancel and wait, without raising a processor failure (use ``wait`` for that)."""
        self.cancel()
        with contextlib.suppress(Exception):
            await self._scope.aclose()
        self._ended()

    async def __aenter__(self) -> RunningPipeline:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # --- inspection ---------------------------------------------------------------------

    def stats(self) -> dict[str, ProcessorStats]:
        return {name: ctx.stats for name, ctx in self._contexts.items()}

    def contexts(self) -> dict[str, ProcessorContext]:
        return dict(self._contexts)

    @property
    def running(self) -> bool:
        return not self._done.is_set()
