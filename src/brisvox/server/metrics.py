"""The server's metrics registry, exported in the Prometheus text format on ``/metrics``.

:class:`ServerMetrics` owns a private ``prometheus_client`` registry (never the global
one, so two servers in one process, or two tests, do not share counters).  The session
manager feeds the call gauges and counters; the engine feeds turns, latencies and tool
outcomes through the three ``record_*`` methods, which take plain values (seconds, names)
and never block.

Metric names (all prefixed ``brisvox_``):

* ``active_calls``, ``reserved_calls``, ``max_calls`` (gauges, read from the manager at scrape time)
* ``admissions_refused_total{reason}`` (``at_capacity``, ``shutting_down``, ``at_global_capacity``)
* ``directory_errors_total``: requests to the call registry (Redis) that failed
* ``auth_refused_total{reason}`` (the values of :class:`brisvox.server.auth.RefusalReason`)
* ``signaling_refused_total{reason}``: WebRTC signaling requests refused (the WHIP routes'
  reasons: ``offer_rate``, ``address_calls``, ``offer_too_large``, ``body_timeout``, ``bad_offer``, ...,
  the admission's, the access checks' on the signaling path), and offers abandoned unconnected
  (``connect_timeout``); docs/WEBRTC.md lists them
* ``calls_ended_total{outcome}`` (``ok``, ``error``, ``crashed``, ``cancelled``, ``aborted``)
* ``call_duration_seconds`` (histogram)
* ``turns_total``
* ``turn_latency_seconds{stage}`` (histogram; ``voice_to_voice``, ``turn_detection``,
  ``llm_first_token``, ``turn_end_to_audio``: see ``brisvox.server.call.LATENCY_STAGES``)
* ``tool_calls_total{tool,outcome}``: ``tool`` is a registered tool's name (the names given
  to :class:`ServerMetrics`, plus the built-in ``confirm_pending``) or ``unknown``, so a
  model that invents tool names cannot add series; ``outcome`` is the tool engine's.
* ``engine_failures_total{stage,fatal}`` (a stage or provider failed; ``fatal="true"``: it ended the call)
* ``edge_events_total{event}`` (the values of :class:`EdgeEvent`: the edge's limit outcomes)
* ``transport_events_total{event}`` (the values of :class:`TransportEvent`: the WebSocket
  transport's refusals, limit closes, drops and faults)
* ``carrier_failures_total{action}`` (``hang-up``, ``transfer``, ``send_dtmf``): a carrier REST
  request of the telephony tools failed or timed out (logged with its traceback)
* ``model_busy_total{stage}`` (the values of :class:`brisvox.core.frames.BusyStage`): a
  ``ModelBusy`` engine event; for the VAD, one per run of refused frames

The edge and transport counters are plain ints their owners bump at the event (no per-frame
metric call); a collector reads them at scrape time (:meth:`ServerMetrics.watch_limits`).

In a worker of ``brisvox serve --workers N`` (:mod:`brisvox.server.workers`), ``/metrics``
answers for the node: the counters and histograms of every worker come from
``prometheus_client``'s multiprocess files (:class:`ServerMetrics` is built with
``node=``, after :func:`use_multiprocess_values`), and the call gauges and limit counters
from the node's shared table (:mod:`brisvox.server.node`), which also gives
``brisvox_workers_alive`` and ``brisvox_worker_restarts_total``.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest, values
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector

from brisvox.agent.tools.registry import CONFIRM_PENDING
from brisvox.core.frames import BusyStage
from brisvox.server.auth import RefusalReason
from brisvox.server.edge import EdgeStats
from brisvox.server.session import SessionEnded, SessionOutcome
from brisvox.transport.websocket.stats import ServerStats

if TYPE_CHECKING:
    from brisvox.server.node import NodeTable

__all__ = ["CARRIER_ACTIONS", "CONTENT_TYPE", "LATENCY_BUCKETS", "UNKNOWN_TOOL", "AdmissionView", "EdgeEvent",
           "NodeMetrics", "ServerMetrics", "TransportEvent", "use_multiprocess_values"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
_MAX_STAGE_NAME = 64  # stage names are the engine's own; the cap only guards a label's size

LATENCY_BUCKETS = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.8, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0)
"""Seconds; dense around the 300 ms to 1 s voice-to-voice range."""

CARRIER_ACTIONS = ("hang-up", "transfer", "send_dtmf")

_CALL_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
UNKNOWN_TOOL = "unknown"
"""The ``tool`` label of a call to a name no tool is registered under (a model's invention)."""


class EdgeEvent(StrEnum):
    """The ``event`` label of ``brisvox_edge_events_total``; each value names an EdgeStats counter."""

    HANDSHAKE_TIMEOUTS = "handshake_timeouts"
    EVICTED_UNSTARTED = "evicted_unstarted"
    PONGS_DROPPED = "pongs_dropped"
    REFUSED_FRAMES = "refused_frames"
    CLOSE_DEADLINES = "close_deadlines"


class TransportEvent(StrEnum):
    """The ``event`` label of ``brisvox_transport_events_total``; each value names a ServerStats counter."""

    REFUSED_LIMIT = "refused_limit"
    REFUSED_DROPPED = "refused_dropped"
    REFUSED_BUSY = "refused_busy"
    REFUSED_START = "refused_start"
    FAULTS = "faults"
    PING_TIMEOUTS = "ping_timeouts"
    WRITE_TIMEOUTS = "write_timeouts"
    OUTPUT_RATE_MISMATCHES = "output_rate_mismatches"
    IDLE_TIMEOUTS = "idle_timeouts"
    DURATION_LIMITS = "duration_limits"
    AUDIO_FLOODS = "audio_floods"
    AUDIO_DROPPED_FRAMES = "audio_dropped_frames"
    JSON_TOO_DEEP = "json_too_deep"


class _LimitCollector(Collector):
    """Reads the edge's and the transport's counters at scrape time (they are bumped at the event)."""

    def __init__(self, edge: EdgeStats | None, transport: ServerStats | None) -> None:
        self._edge = edge
        self._transport = transport

    def collect(self) -> Iterator[CounterMetricFamily]:
        edge = CounterMetricFamily("brisvox_edge_events", "Connections and frames the server's edge refused, "
                                   "dropped or timed out, by event.", labels=["event"])
        for e in EdgeEvent:
            edge.add_metric([e.value], getattr(self._edge, e.value) if self._edge is not None else 0)
        yield edge
        wire = CounterMetricFamily("brisvox_transport_events", "Calls the WebSocket transport refused or closed "
                                   "on a limit, and audio and faults it counted, by event.", labels=["event"])
        for t in TransportEvent:
            wire.add_metric([t.value], getattr(self._transport, t.value) if self._transport is not None else 0)
        yield wire


class _NodeCollector(Collector):
    """The node's call gauges, workers and limit counters, summed over the shared table's rows."""

    def __init__(self, table: NodeTable) -> None:
        self._table = table

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        t = self._table.totals()
        yield GaugeMetricFamily("brisvox_active_calls", "Calls running now.", value=t.active)
        yield GaugeMetricFamily("brisvox_reserved_calls", "Admitted calls not started yet.", value=t.reserved)
        yield GaugeMetricFamily("brisvox_max_calls", "The call limit.", value=t.max_calls)
        yield GaugeMetricFamily("brisvox_workers_alive", "Worker processes serving now.", value=t.alive)
        yield CounterMetricFamily("brisvox_worker_restarts", "Workers that died and were restarted.", value=t.restarts)
        edge = CounterMetricFamily("brisvox_edge_events", "Connections and frames the server's edge refused, "
                                   "dropped or timed out, by event.", labels=["event"])
        for e in EdgeEvent:
            edge.add_metric([e.value], t.edge[e.value])
        yield edge
        wire = CounterMetricFamily("brisvox_transport_events", "Calls the WebSocket transport refused or closed "
                                   "on a limit, and audio and faults it counted, by event.", labels=["event"])
        for w in TransportEvent:
            wire.add_metric([w.value], t.wire[w.value])
        yield wire


def use_multiprocess_values(directory: Path) -> None:
    """Make every metric created from now on in this process keep its values in ``directory``
    (``prometheus_client``'s multiprocess mode; a worker calls it right after the fork)."""
    import os

    os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(directory)
    values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]


@dataclass(frozen=True, slots=True)
class NodeMetrics:
    """Where a worker's node keeps what ``/metrics`` reads: the multiprocess files and the shared table."""

    directory: Path
    table: NodeTable


class AdmissionView(Protocol):
    """What the gauges read (a SessionManager)."""

    @property
    def active(self) -> int: ...

    @property
    def reserved(self) -> int: ...

    @property
    def max_sessions(self) -> int: ...


class ServerMetrics:
    """One server's metrics (see the module docs); ``tool_names``: the registered tools, the
    only values the ``tool`` label takes besides ``confirm_pending`` and ``unknown``."""

    def __init__(self, tool_names: Collection[str] = (), *, node: NodeMetrics | None = None) -> None:
        self._tool_names = frozenset((*tool_names, CONFIRM_PENDING))
        self.registry = CollectorRegistry(auto_describe=True)
        self._node = node
        r = self.registry
        # A node's gauges come from its table: a worker's own would be one worker's view.
        self._gauges = None if node is not None else (
            Gauge("brisvox_active_calls", "Calls running now.", registry=r),
            Gauge("brisvox_reserved_calls", "Admitted calls not started yet.", registry=r),
            Gauge("brisvox_max_calls", "The call limit.", registry=r),
        )
        self._refused = Counter("brisvox_admissions_refused", "Calls refused at admission.", ["reason"], registry=r)
        self._auth_refused = Counter("brisvox_auth_refused", "Requests refused by the access checks (Host, Origin, token).",
                                     ["reason"], registry=r)
        self._signaling_refused = Counter("brisvox_signaling_refused", "WebRTC signaling requests refused and "
                                          "offers abandoned unconnected, by reason.", ["reason"], registry=r)
        self._ended = Counter("brisvox_calls_ended", "Calls ended, by outcome.", ["outcome"], registry=r)
        self._duration = Histogram("brisvox_call_duration_seconds", "Call durations.",
                                   buckets=_CALL_BUCKETS, registry=r)
        self._turns = Counter("brisvox_turns", "Turns answered.", registry=r)
        self._latency = Histogram("brisvox_turn_latency_seconds", "Latencies of the turn timeline, by stage.",
                                  ["stage"], buckets=LATENCY_BUCKETS, registry=r)
        self._tools = Counter("brisvox_tool_calls", "Tool calls settled, by tool and outcome.",
                              ["tool", "outcome"], registry=r)
        self._failures = Counter("brisvox_engine_failures", "Stage or provider failures, by stage.",
                                 ["stage", "fatal"], registry=r)
        self._summaries = Counter("brisvox_window_summaries", "Window summary refreshes, by outcome.", ["outcome"],
                                  registry=r)
        self._uncovered = Counter("brisvox_window_uncovered_requests",
                                  "Model requests that left out earlier turns no summary covered.", registry=r)
        self._agent_link = Counter("brisvox_agent_link_failures",
                                   "Agent links that could not open or were lost (docs/AGENT_PROTOCOL.md).", ["kind"],
                                   registry=r)
        self._busy = Counter("brisvox_model_busy", "Frames or turns refused by a saturated model pool, by stage.",
                             ["stage"], registry=r)
        self._carrier = Counter("brisvox_carrier_failures", "Carrier REST requests that failed or timed out, by action.",
                                ["action"], registry=r)
        for action in CARRIER_ACTIONS:
            self._carrier.labels(action=action)
        for busy in BusyStage:
            self._busy.labels(stage=busy.value)
        self._recordings = Counter("brisvox_recordings", "Call recordings ([record]) closed, by outcome.",
                                   ["outcome"], registry=r)
        self._recording_dropped = Counter("brisvox_recording_records_dropped",
                                          "Recording records dropped because the writer was behind.", registry=r)
        for closed in ("written", "failed"):
            self._recordings.labels(outcome=closed)
        for kind in ("stored", "failed"):
            self._summaries.labels(outcome=kind)
        self._directory_errors = Counter("brisvox_directory_errors", "Requests to the call registry (Redis) "
                                         "that failed.", registry=r)
        for reason in ("at_capacity", "shutting_down", "at_global_capacity"):
            self._refused.labels(reason=reason)
        for why in RefusalReason:
            self._auth_refused.labels(reason=why.value)
        for outcome in SessionOutcome:
            self._ended.labels(outcome=outcome.value)

    # --- fed by the server -------------------------------------------------------------

    def watch(self, admission: AdmissionView) -> None:
        """Read the call gauges from ``admission`` at every scrape (a node's come from its table)."""
        if self._gauges is None:
            return
        active, reserved, max_calls = self._gauges
        active.set_function(lambda: admission.active)
        reserved.set_function(lambda: admission.reserved)
        max_calls.set_function(lambda: admission.max_sessions)

    def watch_limits(self, edge: EdgeStats | None, transport: ServerStats | None) -> None:
        """Export the edge's and the transport's counters (read at every scrape; call once; a
        node's come from its table, where the worker publishes them)."""
        if self._node is None:
            self.registry.register(_LimitCollector(edge, transport))

    def record_refusal(self, reason: str) -> None:
        self._refused.labels(reason=reason).inc()

    def record_directory_error(self) -> None:
        """A request to the call registry (Redis) failed (logged by the directory, rate-limited)."""
        self._directory_errors.inc()

    def record_auth_refusal(self, reason: str) -> None:
        """A request refused by the access checks (``reason``: a RefusalReason value)."""
        self._auth_refused.labels(reason=reason).inc()

    def record_signaling_refusal(self, reason: str) -> None:
        """A WebRTC signaling request refused, or an offer abandoned (``reason``: a code constant)."""
        self._signaling_refused.labels(reason=reason[:_MAX_STAGE_NAME]).inc()

    def record_call_ended(self, ended: SessionEnded) -> None:
        self._ended.labels(outcome=ended.outcome.value).inc()
        self._duration.observe(max(0.0, ended.duration))

    # --- fed by the engine -------------------------------------------------------------

    def record_turn(self, latencies: Mapping[str, float | None]) -> None:
        """One answered turn and its timeline's latencies in seconds (``None``: not measured)."""
        self._turns.inc()
        for stage, seconds in latencies.items():
            if seconds is not None and seconds >= 0:
                self._latency.labels(stage=stage).observe(seconds)

    def record_tool(self, tool: str, outcome: str) -> None:
        """One settled tool call (outcome as the tool engine names it: ``ok``, ``timed_out``, ...).

        A name that is not registered counts as ``unknown``: the name comes from the model."""
        label = tool if tool in self._tool_names else UNKNOWN_TOOL
        self._tools.labels(tool=label, outcome=outcome).inc()

    def record_failure(self, stage: str, *, fatal: bool) -> None:
        """One failure of an engine stage or provider (logged by the engine with its traceback)."""
        self._failures.labels(stage=stage[:_MAX_STAGE_NAME], fatal="true" if fatal else "false").inc()

    def record_agent_link_failure(self, kind: str) -> None:
        """An agent link that could not open (``open``) or was lost (``lost``); the call went on without it."""
        self._agent_link.labels(kind=kind).inc()
    def record_carrier_failure(self, action: str) -> None:
        """A carrier request of the telephony tools failed (``action``: one of :data:`CARRIER_ACTIONS`)."""
        self._carrier.labels(action=action if action in CARRIER_ACTIONS else "other").inc()

    def record_model_busy(self, stage: BusyStage) -> None:
        """One ``ModelBusy`` event: a turn's words or reply refused by a saturated pool, or the
        start of a run of caller frames the VAD pool refused."""
        self._busy.labels(stage=stage.value).inc()

    def record_memory(self, summaries: int, failures: int, uncovered_requests: int) -> None:
        """One call's long-call memory (``CallReport.summaries``, ``summary_failures``, ``uncovered_requests``)."""
        self._summaries.labels(outcome="stored").inc(summaries)
        self._summaries.labels(outcome="failed").inc(failures)
        self._uncovered.inc(uncovered_requests)

    def record_recording(self, *, failed: bool, dropped: int) -> None:
        """One call's recording closed (``failed``: a write failed, it is incomplete)."""
        self._recordings.labels(outcome="failed" if failed else "written").inc()
        self._recording_dropped.inc(dropped)

    # --- export ------------------------------------------------------------------------

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric (of the whole node, in a worker)."""
        if self._node is None:
            return generate_latest(self.registry)
        node = CollectorRegistry(auto_describe=False)
        MultiProcessCollector(node, path=str(self._node.directory))  # type: ignore[no-untyped-call]
        node.register(_NodeCollector(self._node.table))
        return generate_latest(node)
