"""Task ownership: every task brisvox starts belongs to a :class:`TaskScope`.

A scope is the owner of its children.  It names them, cancels them together, and
re-raises the first failure after the siblings were cancelled, like
:class:`asyncio.TaskGroup`, but it can also live as long as an object does
(``spawn`` outside ``async with``, then ``aclose()``), which long-lived parts such as a
transport session need.

:func:`wait_for_task_baseline` is the leak check every later test uses: it waits, on the
injected clock, until the number of live tasks on the loop is back to a baseline.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any, TypeVar

from brisvox.core.clock import Clock
from brisvox.core.errors import BrisvoxError, DeadlineExceeded

__all__ = ["ScopeClosed", "TaskScope", "live_tasks", "wait_for_task_baseline"]

T = TypeVar("T")
log = logging.getLogger(__name__)


class ScopeClosed(BrisvoxError):
    """A task was spawned into a scope that is closing or closed."""


class TaskScope:
    """Owns a set of tasks; the first child failure cancels the rest and is re-raised on exit.

    ``on_failure`` (optional) is told of that first failure at once, with the child's name
    (without the scope's prefix): an owner that waits on something else (a call waits on
    its caller) learns that its helpers are gone.  It must not raise.
    """

    def __init__(self, name: str, on_failure: Callable[[str, BaseException], None] | None = None) -> None:
        self.name = name
        self._on_failure = on_failure
        self._tasks: set[asyncio.Task[Any]] = set()
        self._failure: BaseException | None = None
        self._closing = False
        self._idle: asyncio.Event | None = None

    def spawn(self, coro: Coroutine[Any, Any, T], *, name: str) -> asyncio.Task[T]:
        if self._closing:
            coro.close()
            raise ScopeClosed(f"task scope {self.name!r} is closing; cannot start {name!r}")
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.name}/{name}")
        self._tasks.add(task)
        task.add_done_callback(self._on_done)
        return task

    @property
    def failure(self) -> BaseException | None:
        """The first exception a child raised (cancellation is not a failure)."""
        return self._failure

    def __len__(self) -> int:
        return len(self._tasks)

    def _on_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            exc = task.exception()
            if exc is not None and self._failure is None:
                self._failure = exc
                log.debug("task %s failed: %r; cancelling its siblings", task.get_name(), exc)
                self.cancel()
                if self._on_failure is not None:
                    self._on_failure(task.get_name().removeprefix(f"{self.name}/"), exc)
        if not self._tasks and self._idle is not None:
            self._idle.set()

    def cancel(self) -> None:
        """Cancel every child (idempotent); ``aclose`` or the scope's exit waits for them."""
        for task in list(self._tasks):
            task.cancel()

    async def wait(self) -> None:
        """Wait until every child has finished; re-raise the first failure."""
        if self._tasks:
            # Concurrent waiters share one event: replacing it would strand the earlier ones.
            if self._idle is None or self._idle.is_set():
                self._idle = asyncio.Event()
            try:
                await self._idle.wait()
            except asyncio.CancelledError:
                self.cancel()
                await self._drain()
                raise
        if self._failure is not None:
            raise self._failure

    async def aclose(self) -> None:
        """Cancel every child and wait for them all; re-raise the first real failure."""
        self._closing = True
        self.cancel()
        await self._drain()
        if self._failure is not None:
            raise self._failure

    async def _drain(self) -> None:
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def __aenter__(self) -> TaskScope:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc is not None:
            # The body failed or was cancelled: the children go with it.
            self._closing = True
            self.cancel()
            await self._drain()
            return
        try:
            await self.wait()
        finally:
            self._closing = True

    def __repr__(self) -> str:
        return f"TaskScope({self.name!r}, tasks={len(self._tasks)})"


def live_tasks() -> int:
    """How many tasks are alive on the running loop (the current one included)."""
    return sum(1 for t in asyncio.all_tasks() if not t.done())


async def wait_for_task_baseline(clock: Clock, baseline: int, timeout: float = 5.0, poll: float = 0.01) -> None:
    """Wait until at most ``baseline`` tasks are alive; raise DeadlineExceeded naming the leftovers."""
    deadline = clock.now() + timeout
    while True:
        alive = [t for t in asyncio.all_tasks() if not t.done()]
        if len(alive) <= baseline:
            return
        if clock.now() >= deadline:
            names = ", ".join(sorted(t.get_name() for t in alive if t is not asyncio.current_task()))
            raise DeadlineExceeded(f"waiting for {len(alive) - baseline} leaked task(s) [{names}]", timeout)
        await clock.sleep(poll)
