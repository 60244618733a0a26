from __future__ import annotations

import brisvox.sim


def test_the_sim_package_exports_exactly_its_mocks_and_scenario_types() -> None:
    assert sorted(brisvox.sim.__all__) == sorted(
        [
            "CLOUD",
            "INSTANT",
            "LOCAL",
            "SLOW",
            "Call",
            "CallerScenario",
            "Fail",
            "Finish",
            "Hang",
            "Interleave",
            "LatencyProfile",
            "MockStt",
            "MockSttConfig",
            "MockSttSession",
            "MockTts",
            "MockTtsConfig",
            "MockTtsSession",
            "Pause",
            "Say",
            "ScenarioBuilder",
            "Script",
            "ScriptedLlm",
            "Segment",
            "SegmentKind",
            "SpokenUtterance",
            "Step",
        ]
    )
