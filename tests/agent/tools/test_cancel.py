from __future__ import annotations

import asyncio

from brisvox.agent.tools.cancel import CancelToken


async def test_a_token_wakes_waiters_and_futures_once_and_remembers_its_reason() -> None:
    token = CancelToken()
    fut = token.future()
    waiter = asyncio.get_running_loop().create_task(token.wait())
    await asyncio.sleep(0)
    assert not token.is_cancelled and not fut.done()
    token.cancel("barge-in")
    token.cancel("again")
    await waiter
    assert fut.done() and token.is_cancelled and token.reason == "barge-in"
    assert token.future().done()


async def test_an_abandoned_future_is_forgotten() -> None:
    token = CancelToken()
    fut = token.future()
    fut.cancel()
    await asyncio.sleep(0)
    assert token._waiters == set()
