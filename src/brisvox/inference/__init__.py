"""brisvox.inference: the inference thread pools, voice activity, end of turn, and model files."""

from brisvox.inference.energy import EnergyScorer
from brisvox.inference.errors import (
    InferenceError,
    InferenceFailed,
    ModelError,
    ModelHashMismatch,
    ModelNotFound,
    PoolClosed,
    PoolFull,
    PoolRefused,
)
from brisvox.inference.mel import log_mel
from brisvox.inference.models import (
    ModelFile,
    WheelMember,
    fetch_models,
    model_dir,
    model_path,
    register_model,
    require_model,
)
from brisvox.inference.pool import InferencePool, Lane, PoolConfig, PoolStats, start_turn_executor
from brisvox.inference.silero import SileroModel, SileroReset, SileroScorer
from brisvox.inference.smart_turn import EndOfTurnAnalyzer, SmartTurnModel, TurnAudio, TurnVerdict
from brisvox.inference.vad import (
    VadEvent,
    VadParams,
    VadTracker,
    VoiceActivityDetector,
    WindowScorer,
    energy_vad,
    silero_vad,
)

__all__ = [
    "EndOfTurnAnalyzer",
    "EnergyScorer",
    "InferenceError",
    "InferenceFailed",
    "InferencePool",
    "Lane",
    "ModelError",
    "ModelFile",
    "ModelHashMismatch",
    "ModelNotFound",
    "PoolClosed",
    "PoolConfig",
    "PoolFull",
    "PoolRefused",
    "PoolStats",
    "SileroModel",
    "SileroReset",
    "SileroScorer",
    "SmartTurnModel",
    "TurnAudio",
    "TurnVerdict",
    "VadEvent",
    "VadParams",
    "VadTracker",
    "VoiceActivityDetector",
    "WheelMember",
    "WindowScorer",
    "energy_vad",
    "fetch_models",
    "log_mel",
    "model_dir",
    "model_path",
    "register_model",
    "require_model",
    "silero_vad",
    "start_turn_executor",
]
