"""brisvox.inference: the inference thread pools, voice activity, end of turn, and model files."""

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

__all__ = [
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
    "WheelMember",
    "fetch_models",
    "model_dir",
    "model_path",
    "register_model",
    "require_model",
    "start_turn_executor",
]
