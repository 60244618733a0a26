"""brisvox.core: time, frames, inboxes, processors and pipelines."""

from brisvox.core.clock import Clock, SimClock, SystemClock, VirtualTimeLoop, run_virtual
from brisvox.core.errors import (
    BrisvoxError,
    ChannelClosed,
    ConfigError,
    DeadlineExceeded,
    InvalidInput,
    PipelineError,
    ProcessorFailed,
    StopTimeout,
)

__all__ = [
    "BrisvoxError",
    "ChannelClosed",
    "Clock",
    "ConfigError",
    "DeadlineExceeded",
    "InvalidInput",
    "PipelineError",
    "ProcessorFailed",
    "SimClock",
    "StopTimeout",
    "SystemClock",
    "VirtualTimeLoop",
    "run_virtual",
]
