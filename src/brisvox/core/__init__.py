"""brisvox.core: time, frames, channels, inboxes, processors and pipelines."""

from brisvox.core.channel import Channel, Overflow
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
from brisvox.core.frames import Direction, Frame
from brisvox.core.inbox import Inbox, OverflowPolicies, QueueConfig
from brisvox.core.pipeline import Links, Pipeline, RunningPipeline
from brisvox.core.processor import EpochPolicy, Processor, ProcessorContext
from brisvox.core.secret import Secret
from brisvox.core.tasks import TaskScope, wait_for_task_baseline

__all__ = [
    "BrisvoxError",
    "Channel",
    "ChannelClosed",
    "Clock",
    "ConfigError",
    "DeadlineExceeded",
    "Direction",
    "EpochPolicy",
    "Frame",
    "Inbox",
    "InvalidInput",
    "Links",
    "Overflow",
    "OverflowPolicies",
    "Pipeline",
    "PipelineError",
    "Processor",
    "ProcessorContext",
    "ProcessorFailed",
    "QueueConfig",
    "RunningPipeline",
    "Secret",
    "SimClock",
    "StopTimeout",
    "SystemClock",
    "TaskScope",
    "VirtualTimeLoop",
    "run_virtual",
    "wait_for_task_baseline",
]
