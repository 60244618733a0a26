"""Errors of the inference layer: refusals of the pools, failed jobs, missing or corrupt models."""

from __future__ import annotations

from brisvox.core.errors import BrisvoxError, ChannelClosed, ConfigError

__all__ = [
    "InferenceError",
    "InferenceFailed",
    "ModelError",
    "ModelHashMismatch",
    "ModelNotFound",
    "PoolClosed",
    "PoolFull",
    "PoolRefused",
]


class InferenceError(BrisvoxError):
    """Root of the inference layer's errors."""


class PoolRefused(InferenceError):
    """A pool did not accept a job; nothing ran.  The caller degrades (drops a window, skips a verdict)."""


class PoolFull(PoolRefused):
    """The job's lane was at capacity (reject newest)."""

    def __init__(self, pool: str, lane: str, capacity: int) -> None:
        super().__init__(f"inference pool {pool!r}: the {lane} lane is full ({capacity} jobs queued)")
        self.pool = pool
        self.lane = lane
        self.capacity = capacity


class PoolClosed(PoolRefused, ChannelClosed):
    """The pool is closing or closed, or it closed before a queued job could start."""

    def __init__(self, pool: str) -> None:
        super().__init__(f"inference pool {pool!r} is closed")
        self.pool = pool


class InferenceFailed(InferenceError):
    """A job raised on a pool thread; ``__cause__`` holds the original exception."""

    def __init__(self, job: str, cause: BaseException) -> None:
        super().__init__(f"inference job {job!r} failed: {type(cause).__name__}: {cause}")
        self.job = job


class ModelError(InferenceError):
    """A model file could not be obtained, verified or loaded."""


class ModelNotFound(ModelError, ConfigError):
    """A model file is not where the configuration says (run ``brisvox models fetch``)."""


class ModelHashMismatch(ModelError):
    """A model file's sha256 differs from the pinned value."""

    def __init__(self, name: str, expected: str, actual: str) -> None:
        super().__init__(f"model {name!r}: sha256 {actual} does not match the pinned {expected}")
        self.name = name
        self.expected = expected
        self.actual = actual
