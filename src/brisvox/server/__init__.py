"""brisvox.server: the session manager, settings, agent files, tools by name, and the HTTP surface."""

from brisvox.server.agent_file import (
    AgentDefinition,
    AgentFileError,
    Problem,
    ProviderChoice,
    load_agent_file,
    parse_agent_file,
)
from brisvox.server.app import CallEndpoint, build_app
from brisvox.server.lifecycle import StopRequests, drain_on_stop
from brisvox.server.metrics import ServerMetrics
from brisvox.server.session import (
    AtCapacity,
    Refusal,
    SessionCancel,
    SessionEnded,
    SessionManager,
    SessionOutcome,
    SessionRunner,
    SessionSlot,
    ShutdownOutcome,
    ShutdownPolicy,
    ShutdownReport,
    ShuttingDown,
)
from brisvox.server.settings import Settings, SettingsError
from brisvox.server.tools import ToolSet

__all__ = [
    "AgentDefinition",
    "AgentFileError",
    "AtCapacity",
    "CallEndpoint",
    "Problem",
    "ProviderChoice",
    "Refusal",
    "ServerMetrics",
    "SessionCancel",
    "SessionEnded",
    "SessionManager",
    "SessionOutcome",
    "SessionRunner",
    "SessionSlot",
    "Settings",
    "SettingsError",
    "ShutdownOutcome",
    "ShutdownPolicy",
    "ShutdownReport",
    "ShuttingDown",
    "StopRequests",
    "ToolSet",
    "build_app",
    "drain_on_stop",
    "load_agent_file",
    "parse_agent_file",
]
