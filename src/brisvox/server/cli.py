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
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:  # the heavy imports wait until a command runs (``--help`` stays fast)
    from collections.abc import Coroutine, Mapping
    from pathlib import Path

    from brisvox.core.clock import Clock
    from brisvox.providers.llm import LlmRequest
    from brisvox.server.agent import Agent
    from brisvox.server.agent_file import AgentDefinition
    from brisvox.server.call import EngineCall
    from brisvox.server.call_providers import CallProviders
    from brisvox.server.calllog import CallLog
    from brisvox.server.directory import CallDirectory
    from brisvox.server.host import ServerParts
    from brisvox.server.metrics import ServerMetrics
    from brisvox.server.s2s_call import S2sCallProviders
    from brisvox.server.session import SessionRunner
    from brisvox.server.settings import Settings
    from brisvox.server.tools import ToolSet
    from brisvox.server.tracing import Tracing
    from brisvox.server.workers import WorkerStart
    from brisvox.transport.rtvi.ui import UiContract

__all__ = ["configure_logging", "run_check", "run_serve", "run_token", "session_runner"]

log = logging.getLogger(__name__)

T = TypeVar("T")



def _summary(d: AgentDefinition, llm_label: str) -> str:
    """The agent in one line; ``llm_label``: the resolved LLM (``resolve_llm``), as serve and /agent.json say it
    (a speech-to-speech agent's: its model)."""
    tools = ", ".join(d.tools) if d.tools else "none"
    if d.s2s is not None:
        return f"agent {d.name!r} (tools: {tools}; {llm_label}, barge-in by {d.s2s_policy.barge_in.value})"
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
    if definition.s2s is not None:
        from brisvox.server.s2s_call import s2s_label

        label = s2s_label(definition)
    else:
        label = resolve_llm(llm.provider, llm.options, llm.api_key_env, os.environ).label
    print(f"{_where(args.agent_file, agent)}: ok, {_summary(definition, label)}")
    return 0


def _where(path: Path | None, agent: Agent | None) -> str:
    return str(path) if path is not None or agent is None else f"agent {agent.name!r}"


def _load(path: Path | None, tools: ToolSet, agent: Agent | None,
          environ: Mapping[str, str] | None) -> tuple[AgentDefinition, ToolSet] | list[str]:
    """The definition to run and its tools, or every problem: the file at ``path`` against
    ``tools``, else ``agent`` (with ``environ``, each key variable must be set)."""
    from brisvox.core.errors import ConfigError
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
    from brisvox.server.demo import demo_tools, is_demo_agent_file

    if is_demo_agent_file(path) and not len(tools):  # the demo agent's file: its tools come with it
        try:
            tools = demo_tools()
        except ConfigError as exc:
            return [str(exc)]
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
    tracing: Tracing | None = None, directory: CallDirectory | None = None, calls: CallLog | None = None,
) -> SessionRunner[EngineCall]:
    """The session runner of ``brisvox serve``: the engine."""
    from brisvox.server.call import engine_runner

    return engine_runner(definition, tools, clock, providers, metrics, tracing, directory, calls)


async def _serve_with(settings: Settings, parts: ServerParts, providers: CallProviders | S2sCallProviders,
                      tracing: Tracing | None = None, node: WorkerStart | None = None,
                      prefix: LlmRequest | None = None) -> int:
    """``serve`` with the shared providers warmed in the background (``prefix``: how each call's
    first request begins, for a model with a prompt cache) and closed at the end, and the link to
    the call registry (Redis) open while it serves, when ``BRISVOX_REDIS_URL`` is set."""
    from contextlib import AsyncExitStack

    from brisvox.core.clock import SystemClock
    from brisvox.core.tasks import TaskScope
    from brisvox.server.directory import RedisLink
    from brisvox.server.host import serve

    try:
        async with AsyncExitStack() as stack, providers, TaskScope("serve") as scope:
            if settings.redis_url is not None and parts.directory is not None:
                await stack.enter_async_context(RedisLink(parts.directory, settings.redis_url.reveal(), SystemClock()))
            scope.spawn(providers.warm(prefix), name="warm")
            if node is None:
                code = await serve(settings, parts)
            else:
                code = await serve(settings, parts, listener=node.listener, seat=node.seat)
            scope.cancel()
            return code
    finally:
        if tracing is not None:
            tracing.shutdown()  # the last spans go out


def run_serve(args: argparse.Namespace, tools: ToolSet, agent: Agent | None = None, *,
              ready_line: str | None = None) -> int:
    """``brisvox serve``; ``ready_line`` is printed once the providers are built (so a missing
    extra or key fails before it), before the server starts listening.  ``--workers N``: a node
    of N processes (:mod:`brisvox.server.workers`), each serving the agent."""
    from brisvox.core.errors import ConfigError
    from brisvox.server.access import exposure_problem, exposure_warnings
    from brisvox.server.lifecycle import EXIT_STARTUP_FAILURE
    from brisvox.server.settings import Settings

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
        try:
            tools = demo_tools(into=_copy(tools))
        except ConfigError as exc:
            print(f"brisvox serve: {exc}", file=sys.stderr)
            return EXIT_STARTUP_FAILURE
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
    ui = agent.ui if agent is not None else None
    workers = _workers(args)
    if workers == 1:
        return _serve_agent(settings, definition, tools, ready_line=ready_line, ui=ui)
    from brisvox.server.workers import run_node

    log.info("serving with %d worker processes (--workers)", workers)

    def banner(port: int) -> str:
        return (f"brisvox serve: listening on http://{settings.host}:{port} (calls on ws://{settings.host}:{port}"
                f"{settings.ws_path}; {workers} workers; agent {definition.name})")

    def worker(start: WorkerStart) -> int:
        return _serve_agent(settings, definition, tools, node=start, ui=ui)

    if ready_line is not None:
        print(ready_line, flush=True)
    return run_node(workers, settings.host, settings.port, worker, banner=banner)


def _workers(args: argparse.Namespace) -> int:
    """``--workers``: a count, or ``auto`` (absent: 1, as for ``brisvox demo``) for the number of cores."""
    value = getattr(args, "workers", None)
    if value is None:
        return 1
    if value == "auto":
        return os.cpu_count() or 1
    return int(value)


def _serve_agent(settings: Settings, definition: AgentDefinition, tools: ToolSet, *,
                 ready_line: str | None = None, node: WorkerStart | None = None,
                 ui: UiContract | None = None) -> int:
    """One server process for the agent: the whole server, or one worker of a node (``node``);
    ``ui``: the Python agent's UI contract (RTVI calls' screen)."""
    from brisvox.core.clock import SystemClock
    from brisvox.core.errors import ConfigError
    from brisvox.server.call import (
        EngineEndpoint,
        telnyx_endpoint,
        twilio_endpoint,
        warm_request,
        webrtc_endpoint,
    )
    from brisvox.server.call_providers import build_call_providers
    from brisvox.server.calllog import CallLog
    from brisvox.server.calls_page import calls_routes
    from brisvox.server.host import ServerParts
    from brisvox.server.lifecycle import EXIT_STARTUP_FAILURE
    from brisvox.server.metrics import NodeMetrics, ServerMetrics, use_multiprocess_values
    from brisvox.server.page import page_routes
    from brisvox.server.rtvi_endpoint import RTVI_PATH, RtviEndpoint
    from brisvox.server.s2s_call import S2sCallProviders, build_s2s_providers, s2s_runner
    from brisvox.server.webhooks import webhook_routes

    if node is not None:  # before any metric exists in this process
        use_multiprocess_values(node.metrics_dir)
    clock = SystemClock()
    try:
        providers: CallProviders | S2sCallProviders = (
            build_s2s_providers(definition, clock, os.environ) if definition.s2s is not None
            else build_call_providers(definition, clock, os.environ, vad_batch=settings.vad_batch,
                                     vad_period=settings.vad_period))
    except ConfigError as exc:
        print(f"brisvox serve: {exc}", file=sys.stderr)
        return EXIT_STARTUP_FAILURE
    metrics = ServerMetrics(tool_names=tools.names(),
                            node=NodeMetrics(node.metrics_dir, node.seat.table) if node is not None else None)
    tracing = None
    if settings.tracing:  # off: the tracing module (and OpenTelemetry) is never imported
        try:
            from brisvox.server.tracing import open_tracing
        except ImportError as exc:
            print(f"brisvox serve: BRISVOX_TRACING=on needs the otel extra (pip install 'brisvox[otel]'): {exc}",
                  file=sys.stderr)
            return EXIT_STARTUP_FAILURE
        tracing = open_tracing(True, capture_tool_arguments=definition.trace_tool_arguments)
    from brisvox.server.directory import CallDirectory, owner_id

    directory = CallDirectory(owner_id(settings.node_id, node.seat.index if node is not None else None),
                              settings.global_max_calls, on_error=metrics.record_directory_error)
    runner: SessionRunner[EngineCall]
    calls = CallLog()
    if isinstance(providers, S2sCallProviders):
        runner = s2s_runner(definition, tools, clock, providers, metrics, tracing, directory, calls)
    else:
        runner = session_runner(definition, tools, clock, providers, metrics, tracing, directory, calls)
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
    rtvi = RtviEndpoint(clock, ws_config, ui=ui, stats=endpoint.stats)  # /metrics exports one set of counters
    webrtc = webrtc_endpoint(settings, clock)

    def stop_calls() -> None:
        endpoint.close()
        twilio.close()
        telnyx.close()
        rtvi.close()
        if webrtc is not None:
            webrtc.close()

    parts = ServerParts(
        runner=runner, call_endpoint=endpoint, description=description, on_stop_calls=stop_calls,
        call_routes=((settings.twilio_path, twilio), (settings.telnyx_path, telnyx), (RTVI_PATH, rtvi)),
        self_authenticating=frozenset(route for route, carrier in ((settings.twilio_path, twilio),
                                                                    (settings.telnyx_path, telnyx))
                                      if carrier.self_authenticating),
        query_token=frozenset({RTVI_PATH}),  # Pipecat's JS transport sends its token as ?token=
        ws_max_size=max(ws_config.max_audio_bytes, ws_config.max_control_bytes),
        extra_routes=(*webhook_routes(settings, definition.name, lambda: clock.wall().timestamp()),
                      *calls_routes(calls), *page_routes(providers.page_info(definition))),
        metrics=metrics, agent=definition.name, transport_stats=endpoint.stats, directory=directory,
        http_call_endpoints=(webrtc,) if webrtc is not None else (),
    )
    if ready_line is not None:
        print(ready_line, flush=True)
    prefix = warm_request(definition, tools, clock.wall().date()) if definition.s2s is None else None
    return _run_loop(_serve_with(settings, parts, providers, tracing, node, prefix), settings.loop)


def _run_loop(main: Coroutine[Any, Any, T], loop: str) -> T:
    """Run ``main`` on ``loop`` (``BRISVOX_LOOP``: ``asyncio``, or ``uvloop``, which the settings
    checked is installed)."""
    if loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(main)
    return asyncio.run(main)
