"""brisvox.engine: the production pipeline of one call."""

from brisvox.engine.call import CallFailed, CallReport, Providers, run_call
from brisvox.engine.clips import ClipCache, FillerClip, FillerClipStore, render_clips
from brisvox.engine.config import EngineConfig, LlmConfig, SpeculationMode, SummaryConfig, Timeouts
from brisvox.engine.events import CallObserver, EngineEvent
from brisvox.engine.playout import PlayoutBook
from brisvox.engine.s2s import run_s2s_call

__all__ = [
    "CallFailed",
    "CallObserver",
    "CallReport",
    "ClipCache",
    "EngineConfig",
    "EngineEvent",
    "FillerClip",
    "FillerClipStore",
    "LlmConfig",
    "PlayoutBook",
    "Providers",
    "SpeculationMode",
    "SummaryConfig",
    "Timeouts",
    "render_clips",
    "run_call",
    "run_s2s_call",
]
