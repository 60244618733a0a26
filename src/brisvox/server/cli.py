"""The ``serve`` and ``check`` subcommands of the ``brisvox`` command line.

``brisvox serve [AGENT_FILE]`` starts the HTTP/WebSocket surface (settings from
``BRISVOX_*``, docs/OPERATIONS.md); with no agent file (argument or ``BRISVOX_AGENT_FILE``)
it serves the demo agent (:mod:`brisvox.server.demo`) with its tools.  Calls on the
WebSocket endpoint run the production engine (:mod:`brisvox.server.call`) with the
agent's providers (:mod:`brisvox.server.call_providers`); ``/`` serves the demo page
(:mod:`brisvox.server.page`).

Without authentication (``BRISVOX_AUTH=none``) ``serve`` refuses to listen on an address
that is not loopback unless given ``--insecure`` (:func:`brisvox.server.access.exposure_problem`).
``brisvox token`` prints a signed call token (:func:`brisvox.server.auth.issue_call_token`
with ``BRISVOX_AUTH_SECRET``), or with ``--new-secret`` a new signing key.

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
    from collections.abc import Mapping
    from pathlib import Path

    from brisvox.core.clock import Clock
    from brisvox.server.agent import Agent
    from brisvox.server.agent_file import AgentDefinition
    from brisvox.server.call import EngineCall
    from brisvox.server.call_providers import CallProviders
    from brisvox.server.host import ServerParts
    from brisvox.server.metrics import ServerMetrics
    from brisvox.server.session import SessionRunner
    from brisvox.server.settings import Settings
    from brisvox.server.tools import ToolSet
    from brisvox.server.tracing import Tracing

__all__ = ["configure_logging", "run_check", "run_serve", "run_token", "session_runner"]



def _summary(d: AgentDefinition, llm_label: str) -> str:
    """The agent in one line; ``llm_label``: the resolved LLM (``resolve_llm``), as serve and /agent.json say it."""
    tools = ", ".join(d.tools) if d.tools else "none"
    return f"agent {d.name!r} (tools: {tools}; stt {d.stt.provider}, llm {llm_label}, tts {d.tts.provider})"


def configure_logging(level: str) -> None:
    """The server's logging: one line per record on stderr, every held secret masked in it."""
    from brisvox.core.secret import install_log_masking

    logging.basicConfig(level=level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    install_log_masking()  # every Secret's value is masked in every log line, vendor texts included


def run_check(args: argparse.Namespace, tools: ToolSet, agent: Agent | None = None) -> int:
    """``brisvox check``: the agent file named, or (``brisvox.run(agent)`` without a file) the agent."""
    from brisvox.server.providers import resolve_llm

    loaded = _load(args.agent_file, tools, agent, os.environ if args.env else None)
    if isinstance(loaded, list):
        for problem in loaded:
            print(problem, file=sys.stderr)
        print(f"{_where(args.agent_file, agent)}: {len(loaded)} problem(s)", file=sys.stderr)
        return 1
    definition, _ = loaded
    llm = definition.llm
    label = resolve_llm(llm.provider, llm.options, llm.api_key_env, os.environ).label
    print(f"{_where(args.agent_file, agent)}: ok, {_summary(definition, label)}")
    return 0


def _where(path: Path | None, agent: Agent | None) -> str:
    return str(path) if path is not None or agent is None else f"agent {agent.name!r}"


def _load(path: Path | None, tools: ToolSet, agent: Agent | None,
          environ: Mapping[str, str] | None) -> tuple[AgentDefinition, ToolSet] | list[str]:
    """The definition to run and its tools, or every problem: the file at ``path`` against
    ``tools``, else ``agent`` (with ``environ``, each key variable must be set)."""
    from brisvox.server.agent import AgentError
    from brisvox.server.agent_file import AgentFileError, load_agent_file

    if path is None and agent is not None:
        try:
            if environ is not None:
                agent.check(environ)
        except AgentError as exc:
            return list(exc.problems)
        return agent.definition(), agent.toolset()
    if path is None:
        return ["no agent file given"]
    try:
        return load_agent_file(path, available_tools=tools, environ=environ), tools
    except AgentFileError as exc:
        return [str(p) for p in exc.problems]


_SECRET_VARIABLE = "BRISVOX_AUTH_SECRET"


def run_token(args: argparse.Namespace) -> int:
    import secrets

    from brisvox.core.clock import SystemClock
    from brisvox.core.errors import InvalidInput
    from brisvox.server.auth import issue_call_token

    if args.new_secret:
        print(secrets.token_urlsafe(48))
        return 0
    key = os.environ.get(_SECRET_VARIABLE, "")
    if not key:
        print(f"brisvox token: {_SECRET_VARIABLE} is not set (`brisvox token --new-secret` makes a key)",
              file=sys.stderr)
        return 1
    try:
        token = issue_call_token(key, now=SystemClock().wall().timestamp(), ttl=args.ttl, agent=args.agent,
                                 subject=args.subject)
    except InvalidInput as exc:
        print(f"brisvox token: {exc}", file=sys.stderr)
        return 1
    print(token)
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
    definition: AgentDefinition, tools: ToolSet, clock: Clock, providers: CallProviders, metrics: ServerMetrics,
    tracing: Tracing | None = None,
) -> SessionRunner[EngineCall]:
    """The session runner of ``brisvox serve``: the engine."""
    from brisvox.server.call import engine_runner

    return engine_runner(definition, tools, clock, providers, metrics, tracing)


async def _serve_with(settings: Settings, parts: ServerParts, providers: CallProviders,
                      tracing: Tracing | None = None) -> int:
    """``serve`` with the shared providers warmed in the background and closed at the end."""
    from brisvox.core.tasks import TaskScope
    from brisvox.server.host import serve

    try:
        async with providers, TaskScope("serve") as scope:
            scope.spawn(providers.warm(), name="warm")
            code = await serve(settings, parts)
            scope.cancel()
            return code
    finally:
        if tracing is not None:
            tracing.shutdown()  # the last spans go out


def run_serve(args: argparse.Namespace, tools: ToolSet, agent: Agent | None = None, *,
              ready_line: str | None = None) -> int:
    """``brisvox serve``; ``ready_line`` is printed once the providers are built (so a missing
    extra or key fails before it), before the server starts listening."""
    from brisvox.core.clock import SystemClock
    from brisvox.core.errors import ConfigError
    from brisvox.server.access import exposure_problem, exposure_warnings
    from brisvox.server.call import EngineEndpoint, telnyx_endpoint, twilio_endpoint
    from brisvox.server.call_providers import build_call_providers
    from brisvox.server.host import ServerParts
    from brisvox.server.lifecycle import EXIT_STARTUP_FAILURE
    from brisvox.server.metrics import ServerMetrics
    from brisvox.server.page import page_routes
    from brisvox.server.rtvi_endpoint import RTVI_PATH, RtviEndpoint
    from brisvox.server.settings import Settings
    from brisvox.server.webhooks import webhook_routes

    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"brisvox serve: {exc}", file=sys.stderr)
        return EXIT_STARTUP_FAILURE
    configure_logging(settings.log_level)
    agent_path = args.agent_file or settings.agent_file
    if agent_path is None and agent is None:
        from brisvox.server.demo import DEMO_AGENT_FILE, demo_tools

        agent_path = DEMO_AGENT_FILE
        tools = demo_tools(into=_copy(tools))
    exposed = exposure_problem(settings, insecure=args.insecure)
    if exposed is not None:
        print(f"brisvox serve: {exposed}; not starting", file=sys.stderr)
        return EXIT_STARTUP_FAILURE
    for warning in exposure_warnings(settings, insecure=args.insecure):
        print(f"brisvox serve: warning: {warning}", file=sys.stderr)
    loaded = _load(agent_path, tools, agent, os.environ)
    if isinstance(loaded, list):
        for problem in loaded:
            print(problem, file=sys.stderr)
        print("brisvox serve: the agent is invalid; not starting", file=sys.stderr)
        return EXIT_STARTUP_FAILURE
    definition, tools = loaded
    clock = SystemClock()
    try:
        providers = build_call_providers(definition, clock, os.environ)
    except ConfigError as exc:
        print(f"brisvox serve: {exc}", file=sys.stderr)
        return EXIT_STARTUP_FAILURE
    metrics = ServerMetrics(tool_names=tools.names())
    tracing = None
    if settings.tracing:  # off: the tracing module (and OpenTelemetry) is never imported
        try:
            from brisvox.server.tracing import open_tracing
        except ImportError as exc:
            print(f"brisvox serve: BRISVOX_TRACING=on needs the otel extra (pip install 'brisvox[otel]'): {exc}",
                  file=sys.stderr)
            return EXIT_STARTUP_FAILURE
        tracing = open_tracing(True)
    runner = session_runner(definition, tools, clock, providers, metrics, tracing)
    description = _summary(definition, providers.llm_label)
    try:
        ws_config = settings.transport_config()
        ws_config.validate()
    except ConfigError as exc:
        print(f"brisvox serve: {exc}", file=sys.stderr)
        return EXIT_STARTUP_FAILURE
    endpoint = EngineEndpoint(clock, ws_config)
    twilio = twilio_endpoint(settings, clock, ws_config, agent=definition.name)
    telnyx = telnyx_endpoint(settings, clock, ws_config)
    rtvi = RtviEndpoint(clock, ws_config)

    def stop_calls() -> None:
        endpoint.close()
        twilio.close()
        telnyx.close()
        rtvi.close()

    parts = ServerParts(
        runner=runner, call_endpoint=endpoint, description=description, on_stop_calls=stop_calls,
        call_routes=((settings.twilio_path, twilio), (settings.telnyx_path, telnyx), (RTVI_PATH, rtvi)),
        self_authenticating=frozenset(route for route, carrier in ((settings.twilio_path, twilio),
                                                                    (settings.telnyx_path, telnyx))
                                      if carrier.self_authenticating),
        ws_max_size=max(ws_config.max_audio_bytes, ws_config.max_control_bytes),
        extra_routes=(*webhook_routes(settings, definition.name, lambda: clock.wall().timestamp()),
                      *page_routes(providers.page_info(definition))),
        metrics=metrics, agent=definition.name,
        transport_stats=endpoint.stats,
    )
    if ready_line is not None:
        print(ready_line, flush=True)
    return asyncio.run(_serve_with(settings, parts, providers, tracing))
