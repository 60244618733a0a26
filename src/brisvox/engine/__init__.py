"""brisvox.engine: the production pipeline of one call."""

from brisvox.engine.call import CallReport, Providers, run_call
from brisvox.engine.clips import ClipCache, FillerClip, FillerClipStore, render_clips
from brisvox.engine.config import EngineConfig, LlmConfig, Speculation, SummaryConfig, Timeouts
from brisvox.engine.observe import CallEvent, CallEventKind, CallObserver
from brisvox.engine.playout import PlayoutBook

__all__ = [
    "CallEvent",
    "CallEventKind",
    "CallObserver",
    "CallReport",
    "ClipCache",
    "EngineConfig",
    "FillerClip",
    "FillerClipStore",
    "LlmConfig",
    "PlayoutBook",
    "Providers",
    "Speculation",
    "SummaryConfig",
    "Timeouts",
    "render_clips",
    "run_call",
]
