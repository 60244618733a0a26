"""A server with the WHIP endpoint and the transport's echo engine, in this process (real time)."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from starlette.routing import BaseRoute

from brisvox.core.clock import SystemClock
from brisvox.server.host import ServerParts, serve
from brisvox.server.lifecycle import StopRequests
from brisvox.server.settings import Settings
from brisvox.server.webrtc_endpoint import WebRtcEndpoint, WhipConfig
from brisvox.server.ws_endpoint import TransportEndpoint
from tests.server._echo import echo_runner


@asynccontextmanager
async def whip_server(config: WhipConfig | None = None, settings: Settings | None = None,
                      extra_routes: tuple[BaseRoute, ...] = ()) -> AsyncIterator[tuple[str, WebRtcEndpoint]]:
    """``(base URL, endpoint)``; the server stops (exit status 0) when the block ends."""
    clock = SystemClock()
    endpoint = WebRtcEndpoint(clock, config or WhipConfig())
    parts = ServerParts(runner=echo_runner(clock), call_endpoint=TransportEndpoint(clock), description="echo",
                        on_stop_calls=endpoint.close, http_call_endpoints=(endpoint,), extra_routes=extra_routes)
    stops = StopRequests()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(serve(settings or Settings(port=0, max_calls=4), parts, clock=clock, stops=stops,
                                         out=io.StringIO(), on_ready=ready.set_result))
    try:
        yield f"http://127.0.0.1:{await asyncio.wait_for(ready, 20)}", endpoint
    finally:
        stops.request("test stop")
        assert await asyncio.wait_for(server, 30) == 0
