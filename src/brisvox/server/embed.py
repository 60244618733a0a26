"""``brisvox.asgi(agent)``: the agent's call server as an ASGI app to mount in your own application.

::

    voice = brisvox.asgi(agent)
    app = Starlette(routes=[Mount("/voice", app=voice)], lifespan=lambda app: voice.lifespan())
    # FastAPI: app.mount("/voice", voice), and ``async with voice.lifespan(): ...`` in its lifespan

The mounted app serves what ``brisvox serve`` serves for the agent, under the mount's
prefix: the call WebSocket (``<prefix>/ws``), ``/healthz``, ``/readyz``, ``/metrics`` and
the demo page, with the same engine, session limits, access checks (``BRISVOX_*``
settings: authentication, Host and Origin; ``BRISVOX_ALLOWED_HOSTS`` names the host
application's names) and metrics.  The providers are built when the app is made (the
keys read from their variables then); :meth:`AgentApp.lifespan` warms them at start and,
at the end, drains the calls and closes the providers.  An ASGI server does not run a
mounted app's own lifespan, so the host application's lifespan enters it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator, Mapping
from typing import Any

from brisvox.core.clock import Clock, SystemClock
from brisvox.core.tasks import TaskScope
from brisvox.server.access import AccessPolicy
from brisvox.server.agent import Agent
from brisvox.server.app import build_app
from brisvox.server.call import EngineEndpoint, engine_runner
from brisvox.server.call_providers import CallProviders, build_call_providers
from brisvox.server.host import max_calls_for
from brisvox.server.metrics import ServerMetrics
from brisvox.server.page import page_routes
from brisvox.server.session import SessionManager
from brisvox.server.settings import Settings

__all__ = ["AgentApp", "asgi"]

log = logging.getLogger(__name__)


class AgentApp:
    """The agent's ASGI application (see the module docs)."""

    def __init__(self, agent: Agent, *, settings: Settings | None = None, clock: Clock | None = None,
                 providers: CallProviders | None = None, environ: Mapping[str, str] | None = None) -> None:
        env = os.environ if environ is None else environ
        self.settings = settings = settings if settings is not None else Settings.from_env()
        self.clock = clock = clock if clock is not None else SystemClock()
        definition = agent.definition()
        agent.check(env)  # every key variable set: a missing key fails here, not in the first call
        self.providers = providers if providers is not None else build_call_providers(definition, clock, env)
        tools = agent.toolset()
        self.metrics = ServerMetrics(tool_names=tools.names())
        runner = engine_runner(definition, tools, clock, self.providers, self.metrics)
        ws = settings.transport_config()
        ws.validate()
        self.endpoint = EngineEndpoint(clock, ws)
        self.manager: SessionManager[Any] = SessionManager(runner, max_sessions=max_calls_for(settings), clock=clock,
                                                           name="calls", on_end=self.metrics.record_call_ended)
        access = AccessPolicy.from_settings(settings, agent=definition.name, wall=lambda: clock.wall().timestamp())
        self.app = build_app(self.manager, self.metrics, ws_path=settings.ws_path, call_endpoint=self.endpoint,
                             extra_routes=tuple(page_routes(self.providers.page_info(definition))), access=access)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        await self.app(scope, receive, send)

    @contextlib.asynccontextmanager
    async def lifespan(self) -> AsyncIterator[None]:
        """Warm the providers while the application runs; at its end, drain the calls and close them."""
        async with self.providers, TaskScope("agent-app") as scope:
            scope.spawn(self.providers.warm(), name="warm")
            try:
                yield
            finally:
                report = await self.manager.shutdown(self.settings.shutdown_policy, on_cancel=self.endpoint.close)
                self.endpoint.close()
                log.info("agent app stopped (%s)", report.outcome.value)
                scope.cancel()


def asgi(agent: Agent, *, settings: Settings | None = None) -> AgentApp:
    """The agent's call server as an ASGI app (see the module docs)."""
    return AgentApp(agent, settings=settings)
