"""A session runner for server tests that need real calls but no engine: the transport's echo engine."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from brisvox.core.clock import Clock
from brisvox.server.session import SessionCancel
from brisvox.transport.echo import EchoOptions, echo_call
from brisvox.transport.link import CallLink


def echo_runner(clock: Clock, options: EchoOptions | None = None) -> Callable[[CallLink, SessionCancel], Awaitable[None]]:
    """Plays each caller frame back until the call ends or the shutdown asks it to stop."""

    async def run(link: CallLink, cancel: SessionCancel) -> None:
        call = asyncio.ensure_future(echo_call(clock, link, options))
        stop = asyncio.ensure_future(cancel.wait())
        try:
            await asyncio.wait([call, stop], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in (call, stop):
                t.cancel()
            await asyncio.gather(call, stop, return_exceptions=True)

    return run
