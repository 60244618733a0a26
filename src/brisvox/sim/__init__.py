"""brisvox.sim: mock providers with latency profiles and fault injection, and caller scenarios.

Tests, benchmarks and simulations import this package; in the product only
:mod:`brisvox.server.mock_providers` does (``provider = "mock"`` in an agent file, for
capacity tests).
"""

from brisvox.sim.latency import CLOUD, INSTANT, LOCAL, SLOW, LatencyProfile
from brisvox.sim.mock_llm import Call, Fail, Finish, Hang, Interleave, Pause, Say, Script, ScriptedLlm, Step
from brisvox.sim.mock_stt import MockStt, MockSttConfig, MockSttSession
from brisvox.sim.mock_tts import MockTts, MockTtsConfig, MockTtsSession
from brisvox.sim.scenario import CallerScenario, ScenarioBuilder, Segment, SegmentKind, SpokenUtterance

__all__ = [
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
