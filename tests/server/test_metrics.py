from __future__ import annotations

from brisvox.server.metrics import UNKNOWN_TOOL, ServerMetrics


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
