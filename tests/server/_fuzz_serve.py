"""``python -m tests.server._fuzz_serve``: the server the fuzz tests attack.

The real Starlette app under uvicorn through :func:`brisvox.server.host.serve`, as
``brisvox serve`` runs it (settings and limits from ``BRISVOX_*``, the edge's protocol
classes, the transport endpoint), with the transport's echo engine as the session runner
so calls cost no models.
"""

from __future__ import annotations

import asyncio
import logging

from brisvox.core.clock import SystemClock
from brisvox.server.host import ServerParts, serve
from brisvox.server.settings import Settings
from brisvox.server.ws_endpoint import TransportEndpoint
from tests.server._echo import echo_runner


def main() -> int:
    settings = Settings.from_env()
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    clock = SystemClock()
    config = settings.transport_config()
    endpoint = TransportEndpoint(clock, config)
    parts = ServerParts(runner=echo_runner(clock), call_endpoint=endpoint, description="echo",
                        on_stop_calls=endpoint.close,
                        ws_max_size=max(config.max_audio_bytes, config.max_control_bytes))
    return asyncio.run(serve(settings, parts, clock=clock))


if __name__ == "__main__":
    raise SystemExit(main())
