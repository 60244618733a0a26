"""brisvox.agent.tools: tool specs, the registry, the tool engine, the confirmation gate, fillers."""

from brisvox.agent.tools._records import LateNote
from brisvox.agent.tools.cancel import CancelToken
from brisvox.agent.tools.confirm import Confirmations
from brisvox.agent.tools.engine import ToolEngine, ToolEngineConfig
from brisvox.agent.tools.execution import Execution, Speculation
from brisvox.agent.tools.filler import (
    DEFAULT_FILLER_DELAY,
    DEFAULT_FILLER_TEXT,
    FillerChoice,
    FillerClips,
    FillerConfig,
    FillerPhrase,
    FillerPlan,
    FillerPolicy,
    StaticClips,
)
from brisvox.agent.tools.lines import ResultLine, spoken
from brisvox.agent.tools.offer import Grounds
from brisvox.agent.tools.registry import (
    CONFIRM_PENDING,
    CallMeta,
    RegistryError,
    RegistryErrorKind,
    Tool,
    ToolCallContext,
    ToolError,
    ToolRegistry,
    UiUnavailable,
)
from brisvox.agent.tools.results import ErrorKind, Outcome
from brisvox.agent.tools.slots import SlotKind
from brisvox.agent.tools.spec import (
    DEFAULT_FILLER_AFTER,
    DEFAULT_TOOL_TIMEOUT,
    Requirement,
    ToolKind,
    ToolSpec,
)
from brisvox.agent.tools.stats import ToolStatsSnapshot
from brisvox.agent.tools.store import IdempotencyKey, IdempotencyUsage

__all__ = [
    "CONFIRM_PENDING",
    "DEFAULT_FILLER_AFTER",
    "DEFAULT_FILLER_DELAY",
    "DEFAULT_FILLER_TEXT",
    "DEFAULT_TOOL_TIMEOUT",
    "CallMeta",
    "CancelToken",
    "Confirmations",
    "ErrorKind",
    "Execution",
    "FillerChoice",
    "FillerClips",
    "FillerConfig",
    "FillerPhrase",
    "FillerPlan",
    "FillerPolicy",
    "Grounds",
    "IdempotencyKey",
    "IdempotencyUsage",
    "LateNote",
    "Outcome",
    "RegistryError",
    "RegistryErrorKind",
    "Requirement",
    "ResultLine",
    "SlotKind",
    "Speculation",
    "StaticClips",
    "Tool",
    "ToolCallContext",
    "ToolEngine",
    "ToolEngineConfig",
    "ToolError",
    "ToolKind",
    "ToolRegistry",
    "ToolSpec",
    "ToolStatsSnapshot",
    "UiUnavailable",
    "spoken",
]
