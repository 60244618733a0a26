"""Runs ``async def`` tests without pytest-asyncio.

By default a coroutine test runs on a fresh :class:`VirtualTimeLoop`: timers
fast-forward, so timeouts of minutes cost nothing and timings are exact.  Tests marked
``@pytest.mark.realtime`` run on a standard asyncio loop (real sockets shared with
another process, subprocesses, wall-clock benchmarks).  After the test body returns,
any task it left behind fails the test: every task must have an owner that ends it.

Async fixtures are not supported on purpose; use an async context manager in the test.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

import pytest

from brisvox.core.clock import VirtualTimeLoop


def _run(coro: Any, realtime: bool) -> None:
    # One virtual day is far beyond any test; a test still running then spins on timers.
    loop: asyncio.AbstractEventLoop = asyncio.new_event_loop() if realtime else VirtualTimeLoop(max_time=86_400.0)
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(_checked(coro))
    finally:
        leftovers = [t for t in asyncio.all_tasks(loop) if not t.done()]
        for t in leftovers:
            t.cancel()
        if leftovers:
            loop.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
        asyncio.set_event_loop(None)
        loop.close()


async def _checked(coro: Any) -> None:
    me = asyncio.current_task()
    await coro
    # Give tasks cancelled in the body's last step a chance to finish.
    for _ in range(3):
        await asyncio.sleep(0)
    left = [t for t in asyncio.all_tasks() if t is not me and not t.done()]
    if left:
        names = ", ".join(sorted(t.get_name() for t in left))
        raise AssertionError(f"the test left {len(left)} task(s) running: {names}")


@pytest.hookimpl(tryfirst=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> bool | None:
    func = pyfuncitem.obj
    if not inspect.iscoroutinefunction(func):
        return None
    argnames = pyfuncitem._fixtureinfo.argnames
    kwargs = {name: pyfuncitem.funcargs[name] for name in argnames}
    realtime = pyfuncitem.get_closest_marker("realtime") is not None
    _run(func(**kwargs), realtime)
    return True
