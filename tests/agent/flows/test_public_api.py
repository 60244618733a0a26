from __future__ import annotations

import brisvox.agent.flows


def test_the_flows_package_exports_exactly_its_public_api() -> None:
    assert sorted(brisvox.agent.flows.__all__) == sorted(
        [
            "FLOW_SUMMARY_PREFIX",
            "MAX_STATE_ENTRIES",
            "MAX_STATE_KEY_BYTES",
            "MAX_STATE_VALUE_BYTES",
            "TOOL_RESULT_ERRORS",
            "Action",
            "Always",
            "Append",
            "Applied",
            "CallOutcome",
            "Custom",
            "CustomAction",
            "EndCall",
            "Entered",
            "ErrorIs",
            "Failure",
            "Flow",
            "FlowBuilder",
            "FlowConfig",
            "FlowDefError",
            "FlowDefErrorKind",
            "FlowError",
            "FlowManager",
            "Goto",
            "Node",
            "Reset",
            "ResetWithSummary",
            "ResultEquals",
            "Rule",
            "Rules",
            "Say",
            "Screened",
            "Strategy",
            "Success",
            "SummaryOutcome",
            "ToolUse",
            "Transition",
        ]
    )
    for name in brisvox.agent.flows.__all__:
        assert hasattr(brisvox.agent.flows, name)
