"""The one exception hierarchy of brisvox.

Every error raised by brisvox code derives from :class:`BrisvoxError`.  Errors from
third-party libraries are translated into one of these at the adapter that met them,
so callers never need to import a vendor's exception types.
"""

from __future__ import annotations

__all__ = [
    "BrisvoxError",
    "ChannelClosed",
    "ConfigError",
    "DeadlineExceeded",
    "InvalidAudio",
    "InvalidInput",
    "PipelineError",
    "ProcessorFailed",
    "StopTimeout",
]


class BrisvoxError(Exception):
    """Root of every brisvox error."""


class ConfigError(BrisvoxError):
    """A configuration value is invalid; the message names the key and the value."""


class InvalidInput(BrisvoxError):
    """An input handed to a brisvox API is malformed; the message names what was wrong."""


class InvalidAudio(InvalidInput, ValueError):
    """Audio that is not whole PCM16 samples at a positive rate (also a ``ValueError``)."""


class ChannelClosed(BrisvoxError):
    """The receiving side of a queue or inbox is gone."""


class DeadlineExceeded(BrisvoxError, TimeoutError):
    """A bounded wait ran out.  ``what`` names the wait, ``seconds`` its bound."""

    def __init__(self, what: str, seconds: float) -> None:
        super().__init__(f"{what} timed out after {seconds:g} s")
        self.what = what
        self.seconds = seconds


class PipelineError(BrisvoxError):
    """A pipeline could not be built or run."""


class ProcessorFailed(PipelineError):
    """A processor raised; ``stage`` names it and ``__cause__`` holds the root cause."""

    def __init__(self, stage: str, cause: BaseException) -> None:
        super().__init__(f"processor {stage!r} failed: {type(cause).__name__}: {cause}")
        self.stage = stage
        self.cause = cause


class StopTimeout(PipelineError):
    """A graceful stop did not finish within its bound; the pipeline was cancelled."""

    def __init__(self, seconds: float) -> None:
        super().__init__(f"graceful stop did not finish within {seconds:g} s; pipeline cancelled")
        self.seconds = seconds
