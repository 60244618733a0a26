"""The ``serve`` and ``check`` subcommands of the ``brisvox`` command line.

``brisvox serve [AGENT_FILE]`` starts the HTTP/WebSocket surface (settings from
``BRISVOX_*``, docs/OPERATIONS.md); with no agent file (argument or ``BRISVOX_AGENT_FILE``)
it serves the demo agent (:mod:`brisvox.server.demo`) with its tools.  Calls on the
WebSocket endpoint run the production engine (:mod:`brisvox.server.call`) with the
agent's providers (:mod:`brisvox.server.call_providers`); ``/`` serves the demo page
(:mod:`brisvox.server.page`).

``brisvox check AGENT_FILE`` validates an agent file offline against the tools this
program provides (exit 0, or 1 with every problem on stderr); ``--env`` also checks that
each ``api_key_env`` variable is set.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the heavy imports wait until a command runs (``--help`` stays fast)
    from brisvox.core.clock import Clock
    from brisvox.server.agent_file import AgentDefinition
    from brisvox.server.call import EngineCall
    from brisvox.server.call_providers import CallProviders
    from brisvox.server.host import ServerParts
    from brisvox.server.metrics import ServerMetrics
    from brisvox.server.session import SessionRunner
    from brisvox.server.settings import Settings
    from brisvox.server.tools import ToolSet

__all__ = ["run_check", "run_serve", "session_runner"]



def _summary(d: AgentDefinition) -> str:
    tools = ", ".join(d.tools) if d.tools else "none"
    return f"agent {d.name!r} (tools: {tools}; stt {d.stt.provider}, llm {d.llm.provider}, tts {d.tts.provider})"


def run_check(args: argparse.Namespace, tools: ToolSet) -> int:
    from brisvox.server.agent_file import AgentFileError, load_agent_file

    try:
        definition = load_agent_file(args.agent_file, available_tools=tools,
                                     environ=os.environ if args.env else None)
    except AgentFileError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"{args.agent_file}: {len(exc.problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"{args.agent_file}: ok, {_summary(definition)}")
    return 0


def _copy(tools: ToolSet) -> ToolSet:
    from brisvox.server.tools import ToolSet

    out = ToolSet()
    for name in tools.names():
        spec, tool = tools.spec(name), tools.tool(name)
        assert spec is not None and tool is not None
        out.add(spec, tool)
    return out


def session_runner(
    definition: AgentDefinition, tools: ToolSet, clock: Clock, providers: CallProviders, metrics: ServerMetrics
) -> tuple[SessionRunner[EngineCall], str]:
    """The session runner of ``brisvox serve`` (the engine) and how the start-up line describes it."""
    from brisvox.server.call import engine_runner

    return engine_runner(definition, tools, clock, providers, metrics), f"llm: {providers.llm_label}"


async def _serve_with(settings: Settings, parts: ServerParts, providers: CallProviders) -> int:
    """``serve`` with the shared providers warmed in the background and closed at the end."""
    from brisvox.core.tasks import TaskScope
    from brisvox.server.host import serve

    async with providers, TaskScope("serve") as scope:
        scope.spawn(providers.warm(), name="warm")
        code = await serve(settings, parts)
        scope.cancel()
        return code


def run_serve(args: argparse.Namespace, tools: ToolSet) -> int:
    from brisvox.core.clock import SystemClock
    from brisvox.core.errors import ConfigError
    from brisvox.server.agent_file import AgentFileError, load_agent_file
    from brisvox.server.call import EngineEndpoint
    from brisvox.server.call_providers import build_call_providers
    from brisvox.server.host import ServerParts
    from brisvox.server.lifecycle import EXIT_STARTUP_FAILURE
    from brisvox.server.metrics import ServerMetrics
    from brisvox.server.page import page_routes
    from brisvox.server.settings import Settings
    from brisvox.transport.websocket import ServerConfig

    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"brisvox serve: {exc}", file=sys.stderr)
        return EXIT_STARTUP_FAILURE
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    agent_path = args.agent_file or settings.agent_file
    if agent_path is None:
        from brisvox.server.demo import DEMO_AGENT_FILE, demo_tools

        agent_path = DEMO_AGENT_FILE
        tools = demo_tools(into=_copy(tools))
    try:
        definition = load_agent_file(agent_path, available_tools=tools, environ=os.environ)
    except AgentFileError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print("brisvox serve: the agent file is invalid; not starting", file=sys.stderr)
        return EXIT_STARTUP_FAILURE
    clock = SystemClock()
    try:
        providers = build_call_providers(definition, clock, os.environ)
    except ConfigError as exc:
        print(f"brisvox serve: {exc}", file=sys.stderr)
        return EXIT_STARTUP_FAILURE
    metrics = ServerMetrics()
    runner, what = session_runner(definition, tools, clock, providers, metrics)
    description = f"{_summary(definition)}; {what}"
    ws_config = ServerConfig(host=settings.host, port=settings.port, path=settings.ws_path)
    endpoint = EngineEndpoint(clock, ws_config)
    parts = ServerParts(
        runner=runner, call_endpoint=endpoint, description=description, on_stop_calls=endpoint.close,
        ws_ping_interval=ws_config.ping_interval, ws_ping_timeout=ws_config.ping_timeout - ws_config.ping_interval,
        ws_max_size=max(ws_config.max_audio_bytes, ws_config.max_control_bytes),
        extra_routes=tuple(page_routes(providers.page_info(definition))), metrics=metrics,
    )
    return asyncio.run(_serve_with(settings, parts, providers))
