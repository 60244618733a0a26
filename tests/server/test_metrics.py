from __future__ import annotations

from brisvox.core.frames import BusyStage
from brisvox.server.edge import EdgeStats
from brisvox.server.metrics import UNKNOWN_TOOL, EdgeEvent, ServerMetrics, TransportEvent
from brisvox.transport.websocket.stats import ServerStats


def _tool_series(metrics: ServerMetrics) -> set[str]:
    return {line.split(" ")[0] for line in metrics.render().decode().splitlines()
            if line.startswith("brisvox_tool_calls_total{")}


def test_a_tool_name_the_model_invents_is_counted_as_unknown_and_adds_no_series() -> None:
    metrics = ServerMetrics(tool_names=("check_availability", "book_table"))
    for i in range(60):  # what three calls of a model inventing 225-character names produced
        metrics.record_tool(f"{i:03d}" + "x" * 222, "unknown_tool")
    metrics.record_tool("check_availability", "ok")
    metrics.record_tool("confirm_pending", "ok")  # built in: registered with any confirm tool
    assert _tool_series(metrics) == {
        f'brisvox_tool_calls_total{{outcome="unknown_tool",tool="{UNKNOWN_TOOL}"}}',
        'brisvox_tool_calls_total{outcome="ok",tool="check_availability"}',
        'brisvox_tool_calls_total{outcome="ok",tool="confirm_pending"}',
    }
    assert f'brisvox_tool_calls_total{{outcome="unknown_tool",tool="{UNKNOWN_TOOL}"}} 60.0' in metrics.render().decode()


def test_the_edges_and_the_transports_limit_counters_are_exported_at_every_scrape() -> None:
    metrics = ServerMetrics()
    edge, wire = EdgeStats(), ServerStats()
    metrics.watch_limits(edge, wire)
    edge.pongs_dropped += 3
    wire.audio_dropped_frames += 7
    wire.idle_timeouts += 1
    text = metrics.render().decode()
    assert 'brisvox_edge_events_total{event="pongs_dropped"} 3.0' in text
    assert 'brisvox_transport_events_total{event="audio_dropped_frames"} 7.0' in text
    assert 'brisvox_transport_events_total{event="idle_timeouts"} 1.0' in text
    wire.idle_timeouts += 1  # read live, not copied at registration
    assert 'brisvox_transport_events_total{event="idle_timeouts"} 2.0' in metrics.render().decode()
    exported = {line.split('"')[1] for line in text.splitlines() if line.startswith("brisvox_edge_events_total{")}
    assert exported == {e.value for e in EdgeEvent}


def test_every_event_label_names_a_counter_of_its_stats_object() -> None:
    assert {e.value for e in EdgeEvent} <= set(EdgeStats.__dataclass_fields__)
    assert {t.value for t in TransportEvent} <= set(ServerStats.__dataclass_fields__)


def test_a_vad_frame_refused_by_a_saturated_pool_is_counted() -> None:
    metrics = ServerMetrics()
    metrics.record_model_busy(BusyStage.VAD)
    assert 'brisvox_model_busy_total{stage="voice_activity"} 1.0' in metrics.render().decode()
